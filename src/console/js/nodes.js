// The nodes view: the fleet as the router sees it (GET /admin/nodes). Each node's state comes first
// (healthy, failing, cooling, unhealthy, drained) with its last error beside it, then the operator's
// actions (PATCH /admin/nodes: drain, weight, re-enable), then load, latency and the share of prompt
// tokens each node served from its prefix cache (this isolate's count).
import { api } from "./api.js";
import { count, h, percent, time } from "./format.js";

const $ = (id) => document.getElementById(id);
const COLUMNS = 13;

let app; // {say}
/** The node the weight dialog acts on. */
let weighing = null;

const STATE_CLASS = { healthy: "status-active", failing: "bad", unhealthy: "bad", cooling: "status-cooling", drained: "warn" };

/** The state, from the API's `state` (a gateway from before it: from its flags). */
function stateOf(n) {
	if (n.state) return n.state;
	if (n.drained) return "drained";
	if (n.cooling_until !== null) return "cooling";
	return n.healthy ? "healthy" : "unhealthy";
}

const label = (n) => `${n.model} on ${n.url}`;

async function change(n, body, done) {
	try {
		await api("/nodes", { method: "PATCH", body: { url: n.url, model: n.model, ...body } });
		app.say(`${label(n)}: ${done}.`, "ok");
	} catch (err) {
		app.say(err.message, "error");
	}
	await loadNodes();
}

function actions(n, state) {
	const out = [];
	if (state !== "drained") {
		out.push(
			h(
				"button",
				{ type: "button", "aria-label": `Drain ${label(n)}`, onclick: () => change(n, { drain: true }, "drained") },
				"Drain",
			),
		);
	}
	out.push(h("button", { type: "button", "aria-label": `Weight of ${label(n)}`, onclick: () => openWeight(n) }, "Weight"));
	if (state !== "healthy") {
		out.push(
			h(
				"button",
				{ type: "button", "aria-label": `Re-enable ${label(n)}`, onclick: () => change(n, { reenable: true }, "re-enabled") },
				"Re-enable",
			),
		);
	}
	return h("div", { class: "row-actions" }, out);
}

function row(n) {
	const state = stateOf(n);
	const load = n.engine_load ?? {};
	const weight = n.weight === n.configured_weight ? count(n.weight) : `${count(n.weight)} (of ${count(n.configured_weight)})`;
	const error = n.last_error
		? h("span", {}, n.last_error, n.last_error_at ? h("span", { class: "hint" }, ` ${time(n.last_error_at)}`) : null)
		: "";
	return h(
		"tr",
		{ dataset: { model: n.model, url: n.url, state } },
		h("td", {}, n.model),
		h("td", { class: "mono" }, n.url),
		h("td", { class: STATE_CLASS[state] ?? "", dataset: { field: "state" } }, state),
		h("td", { class: "wrap", dataset: { field: "last-error" } }, error),
		h("td", {}, actions(n, state)),
		h("td", { class: "num", dataset: { field: "weight" } }, weight),
		h("td", { class: "num" }, n.latency_ms === null ? "—" : `${count(n.latency_ms)} ms`),
		h("td", { class: "num" }, load.waiting ?? "—"),
		h("td", { class: "num" }, load.running ?? "—"),
		h("td", { class: "num" }, count(n.in_flight)),
		h("td", { class: "num", dataset: { field: "cache-hit-rate" } }, percent(n.cache_hit_rate)),
		h("td", {}, n.cooling_until === null ? "—" : time(n.cooling_until)),
		h("td", {}, n.checked_at === null ? "—" : time(n.checked_at)),
	);
}

export async function loadNodes() {
	const tbody = $("nodes-table").tBodies[0];
	try {
		const nodes = await api("/nodes");
		tbody.replaceChildren(...nodes.data.map(row));
		if (!nodes.data.length)
			tbody.replaceChildren(h("tr", {}, h("td", { colspan: COLUMNS, class: "hint" }, "No nodes configured.")));
	} catch (err) {
		if (err.status !== 404) throw err;
		tbody.replaceChildren(
			h("tr", {}, h("td", { colspan: COLUMNS, class: "hint" }, "This gateway has no fleet view (GET /admin/nodes).")),
		);
	}
}

function openWeight(n) {
	weighing = n;
	$("weight-node").textContent = `${label(n)}: weight ${count(n.weight)} (configured ${count(n.configured_weight)})`;
	$("weight-value").value = n.override?.weight ?? "";
	$("weight-dialog").showModal();
	$("weight-value").focus();
}

export function initNodes(context) {
	app = context;
	$("nodes-refresh").addEventListener("click", () => loadNodes().catch((err) => app.say(err.message, "error")));
	$("weight-form").addEventListener("submit", async (event) => {
		event.preventDefault();
		const raw = $("weight-value").value.trim();
		$("weight-dialog").close();
		await change(weighing, { weight: raw === "" ? null : Number(raw) }, raw === "" ? "configured weight" : `weight ${raw}`);
	});
}
