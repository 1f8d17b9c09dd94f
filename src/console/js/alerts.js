// The alerts view (GET /admin/alert-deliveries): every spend alert and node alert the gateway
// sent or tried to send, newest first, filtered by status and event, paged with next_cursor.
// A failed delivery (retries given up, or no webhook to send to) is flagged, and so is a pending
// one whose last attempt failed (it is being retried with backoff).
import { api, query } from "./api.js";
import { h, time } from "./format.js";

const PAGE = 50;
const $ = (id) => document.getElementById(id);

let app; // {say}
let cursor = null;
let generation = 0;

/** What a delivery's status reads as: a pending one whose last attempt failed is retrying. */
export function deliveryState(d) {
	if (d.status === "pending" && (d.last_error || (d.last_status_code !== null && d.last_status_code >= 300))) {
		return "retrying";
	}
	return d.status;
}

const STATE_CLASS = { failed: "bad", retrying: "warn", delivered: "status-active", pending: "" };

/** Its last attempt: the HTTP status the webhook answered, or why it could not be reached. */
function lastAttempt(d) {
	if (d.last_status_code !== null) return String(d.last_status_code);
	return d.last_error ?? "—";
}

/** One delivery as a table row (the alerts view and a key's deliveries in its edit dialog). */
export function deliveryRow(d, { subject = true } = {}) {
	const state = deliveryState(d);
	const cells = [
		h("td", {}, time(d.created_at)),
		h("td", { class: "mono", dataset: { field: "event" } }, d.event),
		subject
			? h(
					"td",
					{ dataset: { field: "subject" } },
					h("span", { dir: "auto" }, d.subject ?? "—"),
					d.key_id ? h("span", { class: "id" }, ` ${d.key_id}`) : null,
				)
			: null,
		h("td", { class: "mono", dataset: { field: "target" } }, d.target ?? "no webhook"),
		h("td", { class: STATE_CLASS[state] ?? "", dataset: { field: "status" } }, state === "failed" ? "⚠ failed" : state),
		h("td", { class: "num", dataset: { field: "attempts" } }, String(d.attempts)),
		h("td", { class: "wrap", title: d.last_error ?? "", dataset: { field: "last" } }, lastAttempt(d)),
		h("td", { dataset: { field: "delivered" } }, d.delivered_at ? time(d.delivered_at) : "—"),
	];
	return h(
		"tr",
		{ class: state === "failed" ? "flagged" : "", dataset: { deliveryId: d.id, status: d.status, state, event: d.event } },
		...cells.filter(Boolean),
	);
}

function filters() {
	return { status: $("alerts-status").value, event: $("alerts-event").value, key_id: $("alerts-key").value.trim() };
}

/** Loads the first page for the filters (or the next one with `more`). */
export async function loadAlerts({ more = false } = {}) {
	const mine = ++generation;
	const page = await api(`/alert-deliveries${query({ ...filters(), limit: PAGE, cursor: more ? cursor : null })}`);
	if (mine !== generation) return;
	const tbody = $("alerts-table").tBodies[0];
	if (!more) tbody.replaceChildren();
	for (const d of page.data) tbody.append(deliveryRow(d));
	cursor = page.next_cursor ?? null;
	$("alerts-more").hidden = !cursor;
	$("alerts-empty").hidden = tbody.rows.length > 0;
}

export function initAlerts(context) {
	app = context;
	const reload = () => loadAlerts().catch((err) => app.say(err.message, "error"));
	let keyTimer;
	$("alerts-filter").addEventListener("submit", (event) => {
		event.preventDefault();
		reload();
	});
	for (const id of ["alerts-status", "alerts-event"]) $(id).addEventListener("change", reload);
	$("alerts-key").addEventListener("input", () => {
		clearTimeout(keyTimer);
		keyTimer = setTimeout(reload, 250);
	});
	$("alerts-more").addEventListener("click", () => loadAlerts({ more: true }).catch((err) => app.say(err.message, "error")));
}
