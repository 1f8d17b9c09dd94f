// The refused requests view (GET /admin/refusals): every 401, 402, 429, 400, … on the inference
// lanes with its reason, newest first, filtered by status, reason code and key. Recorded within a
// bound per isolate a minute: a row's `suppressed` counts refusals left out just before it.
import { api, query } from "./api.js";
import { count, h, time } from "./format.js";
import { rememberName } from "./names.js";

const PAGE = 50;
const $ = (id) => document.getElementById(id);

let app; // {say}
let cursor = null;
let generation = 0;
let suppressed = 0;
let filterTimer;

/** How a status reads in a row: the number, with what it means for the common ones. */
const MEANING = {
	400: "bad request",
	401: "bad key",
	402: "no balance",
	403: "not allowed",
	404: "not found",
	429: "rate limit",
};

function row(r) {
	rememberName(r.key_id, r.key_name);
	const key = r.key_id
		? h("span", { dir: "auto" }, r.key_name ?? r.key_id, r.key_name ? h("span", { class: "id" }, ` ${r.key_id}`) : null)
		: h("span", { class: "hint" }, "no key");
	return h(
		"tr",
		{ dataset: { requestId: r.request_id, status: r.status } },
		h("td", {}, time(r.created_at)),
		h("td", { class: "num bad", title: MEANING[r.status] ?? "" }, String(r.status)),
		// A refusal without a code (a 400's invalid request) reads as what its status means.
		h("td", { class: r.code ? "mono" : "", dataset: { field: "reason" } }, r.code ?? MEANING[r.status] ?? "—"),
		h("td", { dataset: { field: "key" } }, key),
		h("td", {}, r.model ?? "—"),
		h("td", {}, r.lane),
		h("td", { class: "wrap" }, r.message ?? ""),
		h("td", { class: "mono" }, r.request_id),
	);
}

function filters() {
	return { status: $("refused-status").value, code: $("refused-code").value.trim(), key_id: $("refused-key").value.trim() };
}

/** Loads the first page for the filters (or the next one with `more`). */
export async function loadRefused({ more = false } = {}) {
	const mine = ++generation;
	const page = await api(`/refusals${query({ ...filters(), limit: PAGE, cursor: more ? cursor : null })}`);
	if (mine !== generation) return;
	const tbody = $("refused-table").tBodies[0];
	if (!more) {
		tbody.replaceChildren();
		suppressed = 0;
	}
	for (const r of page.data) {
		tbody.append(row(r));
		suppressed += r.suppressed;
	}
	cursor = page.next_cursor;
	$("refused-more").hidden = !cursor;
	$("refused-empty").hidden = tbody.rows.length > 0;
	$("refused-suppressed").hidden = suppressed === 0;
	$("refused-suppressed").textContent =
		`${count(suppressed)} more refusals were not recorded (each gateway isolate records at most 30 a minute).`;
}

export function initRefused(context) {
	app = context;
	const reload = () => loadRefused().catch((err) => app.say(err.message, "error"));
	$("refused-filter").addEventListener("submit", (event) => {
		event.preventDefault();
		reload();
	});
	$("refused-status").addEventListener("change", reload);
	for (const id of ["refused-code", "refused-key"]) {
		$(id).addEventListener("input", () => {
			clearTimeout(filterTimer);
			filterTimer = setTimeout(reload, 250);
		});
	}
	$("refused-more").addEventListener("click", () => loadRefused({ more: true }).catch((err) => app.say(err.message, "error")));
}
