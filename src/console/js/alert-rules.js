// A key's spend alert rules in its edit dialog (the `alerts` field of PATCH /admin/keys/{id}:
// `[{when, at, webhook_url?}]`, docs/operations.md "Alerts"): a row per rule, added and removed
// here and saved with the dialog; a refusal naming `alerts[i]…` is shown beside the rules with
// that row marked. Below them, the key's own deliveries (GET /admin/keys/{id}/alert-deliveries).

import { deliveryRow } from "./alerts.js";
import { api, query } from "./api.js";
import { h } from "./format.js";

const $ = (id) => document.getElementById(id);
const MAX_RULES = 10;

/** What `at` means for each rule, as its field's placeholder says. */
const WHENS = {
	balance_below_usd: "USD, e.g. 5",
	spent_pct_of_cap: "% of spend limit, e.g. 80",
	exhausted: "no threshold",
};

function ruleRow(rule = { when: "balance_below_usd" }) {
	const n = $("alert-rules").children.length + 1;
	const at = h("input", {
		type: "number",
		step: "any",
		min: "0",
		inputmode: "decimal",
		class: "rule-at",
		"aria-label": `Rule ${n} threshold`,
	});
	at.value = rule.at ?? "";
	const when = h(
		"select",
		{ class: "rule-when", "aria-label": `Rule ${n} when` },
		...Object.keys(WHENS).map((w) => h("option", { value: w }, w)),
	);
	when.value = rule.when;
	const sync = () => {
		at.placeholder = WHENS[when.value];
		at.disabled = when.value === "exhausted";
		if (at.disabled) at.value = "";
	};
	when.addEventListener("change", sync);
	sync();
	const url = h("input", {
		type: "url",
		class: "rule-url",
		maxlength: "2048",
		autocomplete: "off",
		spellcheck: "false",
		placeholder: "webhook URL (empty: the operator's)",
		"aria-label": `Rule ${n} webhook URL`,
	});
	url.value = rule.webhook_url ?? "";
	const tr = h("div", { class: "rule" }, when, at, url);
	tr.append(
		h("button", { type: "button", class: "quiet", "aria-label": `Remove rule ${n}`, onclick: () => removeRule(tr) }, "Remove"),
	);
	return tr;
}

function removeRule(row) {
	row.remove();
	clearError();
	$("alert-rules-add").disabled = false;
}

function clearError() {
	$("alert-rules-error").hidden = true;
	$("alert-rules-error").textContent = "";
	for (const row of $("alert-rules").children) row.classList.remove("invalid");
}

/** The rules as the dialog shows them, the `alerts` value of the PATCH body. */
export function alertRulesBody() {
	return [...$("alert-rules").children].map((row) => {
		const rule = { when: row.querySelector(".rule-when").value };
		const at = row.querySelector(".rule-at").value.trim();
		const url = row.querySelector(".rule-url").value.trim();
		if (at !== "" && rule.when !== "exhausted") rule.at = Number(at);
		if (url) rule.webhook_url = url;
		return rule;
	});
}

/**
 * A failed save: a refusal about `alerts` is shown beside the rules (the row it names marked);
 * rethrown either way, so the dialog stays open and the message line says it too.
 */
export function alertRulesFailed(err) {
	if (typeof err?.param === "string" && err.param.startsWith("alerts")) {
		$("alert-rules-error").textContent = err.message;
		$("alert-rules-error").hidden = false;
		const index = /^alerts\[(\d+)\]/.exec(err.param)?.[1];
		if (index !== undefined) $("alert-rules").children[Number(index)]?.classList.add("invalid");
	}
	throw err;
}

async function loadDeliveries(k) {
	const tbody = $("key-alerts-table").tBodies[0];
	tbody.replaceChildren();
	$("key-alerts-empty").hidden = true;
	try {
		const page = await api(`/keys/${encodeURIComponent(k.id)}/alert-deliveries${query({ limit: 20 })}`);
		for (const d of page.data) tbody.append(deliveryRow(d, { subject: false }));
		$("key-alerts-empty").textContent = "No alerts sent for this key.";
		$("key-alerts-empty").hidden = page.data.length > 0;
	} catch (err) {
		$("key-alerts-empty").textContent = `Deliveries could not be read: ${err.message}`;
		$("key-alerts-empty").hidden = false;
	}
}

/** Fills the rules and deliveries for key `k` (a temporary token has neither: the section is hidden). */
export function openAlertRules(k) {
	clearError();
	$("alert-rules").replaceChildren();
	$("key-alerts").hidden = Boolean(k.parent_key_id);
	if (k.parent_key_id) return;
	for (const rule of k.alerts ?? []) $("alert-rules").append(ruleRow(rule));
	$("alert-rules-add").disabled = $("alert-rules").children.length >= MAX_RULES;
	// A property, not a listener: opening the dialog again never adds a second one.
	$("alert-rules-add").onclick = addRule;
	loadDeliveries(k);
}

function addRule() {
	clearError();
	const row = ruleRow();
	$("alert-rules").append(row);
	row.querySelector(".rule-at").focus();
	$("alert-rules-add").disabled = $("alert-rules").children.length >= MAX_RULES;
}
