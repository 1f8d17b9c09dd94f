// The nodes view: the fleet as the router sees it (GET /admin/nodes): health, cooling, latency, queue,
// and the share of prompt tokens each node served from its prefix cache (this isolate's count).
import { api } from "./api.js";
import { count, h, percent, time } from "./format.js";

const $ = (id) => document.getElementById(id);

function health(n) {
	if (n.drained) return ["drained", "warn"];
	if (n.cooling_until !== null) return ["cooling", "status-cooling"];
	return n.healthy ? ["healthy", "status-active"] : ["unhealthy", "bad"];
}

function row(n) {
	const [state, cls] = health(n);
	const load = n.engine_load ?? {};
	const weight = n.weight === n.configured_weight ? count(n.weight) : `${count(n.weight)} (of ${count(n.configured_weight)})`;
	return h(
		"tr",
		{},
		h("td", {}, n.model),
		h("td", { class: "mono" }, n.url),
		h("td", { class: cls }, state),
		h("td", {}, n.cooling_until === null ? "—" : time(n.cooling_until)),
		h("td", { class: "num" }, weight),
		h("td", { class: "num" }, n.latency_ms === null ? "—" : `${count(n.latency_ms)} ms`),
		h("td", { class: "num" }, load.waiting ?? "—"),
		h("td", { class: "num" }, load.running ?? "—"),
		h("td", { class: "num" }, count(n.in_flight)),
		h("td", { class: "num", dataset: { field: "cache-hit-rate" } }, percent(n.cache_hit_rate)),
		h("td", {}, n.checked_at === null ? "—" : time(n.checked_at)),
		h("td", { class: "wrap" }, n.last_error ?? ""),
	);
}

export async function loadNodes() {
	const tbody = $("nodes-table").tBodies[0];
	try {
		const nodes = await api("/nodes");
		tbody.replaceChildren(...nodes.data.map(row));
		if (!nodes.data.length) tbody.replaceChildren(h("tr", {}, h("td", { colspan: 12, class: "hint" }, "No nodes configured.")));
	} catch (err) {
		if (err.status !== 404) throw err;
		tbody.replaceChildren(
			h("tr", {}, h("td", { colspan: 12, class: "hint" }, "This gateway has no fleet view (GET /admin/nodes).")),
		);
	}
}

export function initNodes(context) {
	$("nodes-refresh").addEventListener("click", () => loadNodes().catch((err) => context.say(err.message, "error")));
}
