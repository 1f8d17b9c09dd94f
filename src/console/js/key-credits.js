// A key's money dialogs in the keys view (keys.js): top up (POST /admin/keys/{id}/credits) and
// the credit history (GET /admin/keys/{id}/credits).
import { api, newIdempotencyKey, query } from "./api.js";
import { h, time, usd } from "./format.js";

const $ = (id) => document.getElementById(id);

/** A name inside a sentence, isolated (FSI … PDI) so no direction control in it can reorder the words around it. */
export const isolated = (name) => `\u2068${name}\u2069`;

// Top up: one idempotency key per opened form, so a double submit or a retry of the same top-up
// is credited once; the next top-up gets a new key.
let topUp = null;

export function openTopUp(k) {
	topUp = { key: k, idempotencyKey: newIdempotencyKey() };
	$("topup-form").reset();
	$("topup-key").textContent = `${isolated(k.name)} (${k.id}), balance ${usd(k.balance_usd)}`;
	$("topup-dialog").showModal();
	$("topup-amount").focus();
}

/** `refreshRow(id)` redraws the key's row in the keys table. */
export async function submitTopUp(app, refreshRow) {
	const { key, idempotencyKey } = topUp;
	const note = $("topup-note").value.trim();
	const result = await api(`/keys/${encodeURIComponent(key.id)}/credits`, {
		method: "POST",
		headers: { "idempotency-key": idempotencyKey },
		body: { amount_usd: Number($("topup-amount").value), ...(note ? { note } : {}) },
	});
	$("topup-dialog").close();
	await refreshRow(key.id);
	app.say(`${key.name}: balance now ${usd(result.balance_usd)}${result.applied ? "" : " (already applied)"}.`, "ok");
}

// Credit history: GET /admin/keys/{id}/credits, newest first.
export async function openCredits(k) {
	const tbody = $("credits-table").tBodies[0];
	tbody.replaceChildren();
	$("credits-key").textContent = `${isolated(k.name)} (${k.id})`;
	$("credits-empty").hidden = true;
	$("credits-dialog").showModal();
	try {
		const page = await api(`/keys/${encodeURIComponent(k.id)}/credits${query({ limit: 100 })}`);
		for (const c of page.data) {
			tbody.append(
				h(
					"tr",
					{},
					h("td", {}, time(c.created_at)),
					h("td", { class: "num" }, usd(c.amount_usd)),
					h("td", { class: "num" }, usd(c.balance_usd)),
					h("td", { class: "wrap" }, c.note ?? ""),
				),
			);
		}
		$("credits-empty").textContent = "No credits yet.";
		$("credits-empty").hidden = page.data.length > 0;
	} catch (err) {
		$("credits-empty").textContent =
			err.status === 404 ? "This gateway does not serve credit history yet." : `Credit history failed: ${err.message}`;
		$("credits-empty").hidden = false;
	}
}
