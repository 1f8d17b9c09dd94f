// The batches view: every key's batches, OpenAI's (/v1/batches) and Anthropic's (/v1/messages/batches),
// newest first, with their status, progress, cost so far and a cancel for one still running.
// Admin API: GET /admin/batches (?status, ?after, ?limit), POST /admin/batches/{id}/cancel.
// Self-contained: the page needs only a `batches-view` section with this view's ids and a tab.
import { api } from "./api.js";
import { count, h, percent, time, usd } from "./format.js";

const $ = (id) => document.getElementById(id);
const RUNNING = new Set(["validating", "in_progress"]);
const STATUS_CLASS = {
	in_progress: "status-active",
	validating: "status-active",
	finalizing: "status-active",
	completed: "status-active",
	cancelling: "warn",
	cancelled: "warn",
	expired: "warn",
	failed: "bad",
};

/** The cursor of the next page, null when the last one is shown. */
let after = null;
let context = { say() {} };

function progress(b) {
	const { total, completed, failed } = b.request_counts;
	const done = completed + failed;
	const share = total > 0 ? done / total : null;
	return h(
		"td",
		{ class: "num", title: `${count(completed)} succeeded, ${count(failed)} failed of ${count(total)}` },
		h("progress", { max: String(Math.max(total, 1)), value: String(done), "aria-label": `${b.api_id} progress` }),
		` ${count(done)} / ${count(total)} (${percent(share)})`,
	);
}

async function cancel(b, button) {
	if (!window.confirm(`Cancel batch ${b.api_id}? Lines not yet run end cancelled and cost nothing.`)) return;
	button.disabled = true;
	try {
		await api(`/batches/${encodeURIComponent(b.id)}/cancel`, { method: "POST" });
		context.say(`Batch ${b.api_id} is cancelling.`);
		await loadBatches();
	} catch (err) {
		button.disabled = false;
		context.say(err.message, "error");
	}
}

function row(b) {
	const action = RUNNING.has(b.status)
		? h("button", { type: "button", class: "quiet", onclick: (e) => cancel(b, e.currentTarget) }, "Cancel")
		: "";
	return h(
		"tr",
		{ dataset: { batch: b.id } },
		h("td", { class: "mono" }, b.api_id),
		h("td", {}, b.api === "anthropic" ? "Anthropic" : "OpenAI"),
		h("td", { class: "mono" }, b.key_id),
		h("td", {}, b.model),
		h("td", { class: STATUS_CLASS[b.status] ?? "" }, b.status),
		progress(b),
		h("td", { class: "num" }, usd(b.cost_usd)),
		h("td", {}, time(b.created_at)),
		h("td", {}, b.ended_at === null ? `expires ${time(b.expires_at)}` : time(b.ended_at)),
		h("td", {}, action),
	);
}

function query(cursor) {
	const q = new URLSearchParams({ limit: "50" });
	const status = $("batches-status").value;
	if (status) q.set("status", status);
	if (cursor) q.set("after", cursor);
	return `/batches?${q}`;
}

/** The first page (again); "Load more" appends the next. */
export async function loadBatches(more = false) {
	const tbody = $("batches-table").tBodies[0];
	try {
		const page = await api(query(more ? after : null));
		const rows = page.data.map(row);
		if (more) tbody.append(...rows);
		else tbody.replaceChildren(...rows);
		after = page.has_more ? page.last_id : null;
		$("batches-more").hidden = after === null;
		$("batches-empty").hidden = tbody.rows.length > 0;
	} catch (err) {
		if (err.status !== 404) throw err;
		tbody.replaceChildren(h("tr", {}, h("td", { colspan: 10, class: "hint" }, "The batch lane is off (batches.enabled).")));
		$("batches-more").hidden = true;
	}
}

export function initBatches(ctx) {
	context = ctx;
	const reload = (more) => loadBatches(more).catch((err) => context.say(err.message, "error"));
	$("batches-refresh").addEventListener("click", () => reload(false));
	$("batches-status").addEventListener("change", () => reload(false));
	$("batches-more").addEventListener("click", () => reload(true));
}
