// The keys view: the table (GET /admin/keys with its balances), search by name, create (the
// secret shown once), top up, edit scopes, revoke, credit history.
import { alertRulesBody, alertRulesFailed, openAlertRules } from "./alert-rules.js";
import { api, query } from "./api.js";
import { count, h, time, usd } from "./format.js";
import { isolated, openCredits, openTopUp, submitTopUp } from "./key-credits.js";
import { rememberName } from "./names.js";

const PAGE = 50;
const $ = (id) => document.getElementById(id);

let app; // {say, openUsage}
let cursor = null;
let searchTimer;
/** Each load gets a number; the answer to an older search (the operator typed on) is dropped. */
let generation = 0;
/** The keys shown, by id (the dialogs act on one of them). */
const shown = new Map();

function statusOf(k) {
	if (k.revoked) return "revoked";
	if (k.expires_at !== null && k.expires_at * 1000 <= Date.now()) return "expired";
	// Settlement took the balance below zero (an answer cost more than its hold): flagged.
	if (k.overdrawn || (k.balance_usd !== null && k.balance_usd < 0)) return "overdrawn";
	return "active";
}

function limitsOf(k) {
	const parts = [];
	if (k.rpm) parts.push(`${count(k.rpm)} rpm`);
	if (k.tpm) parts.push(`${count(k.tpm)} tpm`);
	if (k.max_concurrent) parts.push(`${count(k.max_concurrent)} at once`);
	if (k.per_user_rpm) parts.push(`${count(k.per_user_rpm)} rpm/user`);
	if (k.per_user_daily_usd != null) parts.push(`${usd(k.per_user_daily_usd)}/user/day`);
	if (k.spend_limit_usd !== null) parts.push(`${usd(k.spend_limit_usd)} ${k.spend_limit_period ?? "lifetime"}`);
	if (k.max_tokens) parts.push(`max ${count(k.max_tokens)} tok`);
	if (k.allowed_models) parts.push(`${k.allowed_models.length} model${k.allowed_models.length === 1 ? "" : "s"}`);
	if (k.allowed_origins) parts.push("browser");
	if (k.parent_key_id) parts.push("token");
	return parts.length ? parts.join(" · ") : "none";
}

const money = (value, field) => h("td", { class: "num", dataset: { field, usd: value ?? "" } }, usd(value));

function row(k) {
	const status = statusOf(k);
	const name = k.name;
	return h(
		"tr",
		{ dataset: { keyId: k.id, status }, class: status === "overdrawn" ? "flagged" : null },
		h(
			"td",
			{ class: "name" },
			h(
				"button",
				{ type: "button", class: "link", dir: "auto", title: "Usage of this key", onclick: () => app.openUsage(k) },
				name,
			),
		),
		h("td", { class: `status-${status}`, dataset: { field: "status" } }, status),
		money(k.balance_usd, "balance"),
		money(k.spent_usd, "spent"),
		money(k.held_usd, "held"),
		h("td", { dataset: { field: "last-used" } }, k.last_used_at ? time(k.last_used_at) : "never"),
		h("td", { class: "num", dataset: { field: "requests-today" } }, count(k.requests_today ?? null)),
		h("td", { class: "wrap" }, limitsOf(k)),
		h("td", { class: "id" }, k.id),
		h("td", {}, time(k.created_at)),
		h(
			"td",
			{},
			h(
				"div",
				{ class: "row-actions" },
				h("button", { type: "button", "aria-label": `Usage of ${name}`, onclick: () => app.openUsage(k) }, "Usage"),
				k.parent_key_id || k.revoked
					? null
					: h("button", { type: "button", "aria-label": `Top up ${name}`, onclick: () => openTopUp(k) }, "Top up"),
				h("button", { type: "button", "aria-label": `Edit ${name}`, onclick: () => openScopes(k) }, "Edit"),
				k.parent_key_id
					? null
					: h("button", { type: "button", "aria-label": `Credit history of ${name}`, onclick: () => openCredits(k) }, "Credits"),
				k.revoked
					? null
					: h("button", { type: "button", "aria-label": `Revoke ${name}`, onclick: () => openRevoke(k) }, "Revoke"),
			),
		),
	);
}

/** Loads the first page (or the next one with `more`) for the name in the search box. */
export async function loadKeys({ more = false } = {}) {
	const mine = ++generation;
	const tbody = $("keys-table").tBodies[0];
	const name = $("key-name").value.trim();
	const page = await api(`/keys${query({ limit: PAGE, name, cursor: more ? cursor : null })}`);
	if (mine !== generation) return;
	if (!more) {
		tbody.replaceChildren();
		shown.clear();
	}
	for (const k of page.data) {
		shown.set(k.id, k);
		rememberName(k.id, k.name);
		tbody.append(row(k));
	}
	cursor = page.next_cursor;
	$("keys-more").hidden = !cursor;
	$("keys-empty").hidden = shown.size > 0;
}

/** Puts a key's new state (from a PATCH, DELETE or GET) in its row. */
async function refreshRow(id) {
	const k = await api(`/keys/${encodeURIComponent(id)}`);
	shown.set(id, k);
	const old = document.querySelector(`#keys-table tr[data-key-id="${CSS.escape(id)}"]`);
	old?.replaceWith(row(k));
	return k;
}

/** Runs a dialog form's submit: the button disabled while it runs, errors shown, the dialog closed on success. */
function onSubmit(form, run) {
	form.addEventListener("submit", async (event) => {
		event.preventDefault();
		const button = form.querySelector('button[type="submit"]');
		if (button.disabled) return;
		button.disabled = true;
		try {
			await run();
		} catch (err) {
			app.say(err.message, "error");
		} finally {
			button.disabled = false;
		}
	});
}

// Create: the secret is shown once, in the dialog, with a copy button.
function openCreate() {
	$("create-form").reset();
	$("create-form").hidden = false;
	$("create-secret").hidden = true;
	$("create-dialog").showModal();
	$("create-name").focus();
}

async function create() {
	const balance = Number($("create-balance").value || 0);
	const key = await api("/keys", { method: "POST", body: { name: $("create-name").value.trim(), balance_usd: balance } });
	$("secret-value").value = key.key;
	$("create-form").hidden = true;
	$("create-secret").hidden = false;
	$("secret-copy").focus();
	app.say(`Created key ${key.name} (${key.id}).`, "ok");
	await loadKeys();
}

async function copySecret() {
	const input = $("secret-value");
	try {
		await navigator.clipboard.writeText(input.value);
		app.say("Secret copied to the clipboard.", "ok");
	} catch {
		input.select();
		app.say("Copy was refused by the browser: the secret is selected, press Ctrl+C.", "error");
	}
}

// Scopes: the fields PATCH /admin/keys/{id} accepts; empty means none (null).
let editing = null;

const list = (s) => {
	const items = s
		.split(/[\s,]+/)
		.map((x) => x.trim())
		.filter(Boolean);
	return items.length ? items : null;
};
const num = (s) => (s.trim() === "" ? null : Number(s));
const localIso = (unix) => (unix ? new Date(unix * 1000).toISOString().slice(0, 16) : "");

function openScopes(k) {
	editing = k;
	const token = Boolean(k.parent_key_id);
	$("scopes-token").hidden = !token;
	for (const el of document.querySelectorAll("#scopes-form [data-scope]")) el.disabled = token;
	$("scopes-name").value = k.name;
	$("scopes-models").value = (k.allowed_models ?? []).join(", ");
	$("scopes-origins").value = (k.allowed_origins ?? []).join(", ");
	$("scopes-rpm").value = k.rpm ?? "";
	$("scopes-tpm").value = k.tpm ?? "";
	$("scopes-concurrent").value = k.max_concurrent ?? "";
	$("scopes-user-rpm").value = k.per_user_rpm ?? "";
	$("scopes-user-daily").value = k.per_user_daily_usd ?? "";
	$("scopes-max").value = k.max_tokens ?? "";
	$("scopes-spend").value = k.spend_limit_usd ?? "";
	$("scopes-period").value = k.spend_limit_period ?? "";
	$("scopes-expires").value = localIso(k.expires_at);
	openAlertRules(k);
	$("scopes-dialog").showModal();
	$("scopes-name").focus();
}

async function submitScopes() {
	const k = editing;
	const body = { name: $("scopes-name").value.trim() };
	if (!k.parent_key_id) {
		const expires = $("scopes-expires").value;
		Object.assign(body, {
			allowed_models: list($("scopes-models").value),
			allowed_origins: list($("scopes-origins").value),
			rpm: num($("scopes-rpm").value),
			tpm: num($("scopes-tpm").value),
			max_concurrent: num($("scopes-concurrent").value),
			per_user_rpm: num($("scopes-user-rpm").value),
			per_user_daily_usd: num($("scopes-user-daily").value),
			max_tokens: num($("scopes-max").value),
			spend_limit_usd: num($("scopes-spend").value),
			spend_limit_period: $("scopes-period").value || null,
			alerts: alertRulesBody(),
		});
		// datetime-local has no zone and no seconds: the console reads and writes it as UTC, and
		// sends it only when it was changed, so saving other fields never moves the expiry.
		if (expires !== localIso(k.expires_at)) {
			body.expires_at = expires ? Math.floor(Date.parse(`${expires}Z`) / 1000) : null;
		}
	}
	await api(`/keys/${encodeURIComponent(k.id)}`, { method: "PATCH", body }).catch(alertRulesFailed);
	$("scopes-dialog").close();
	await refreshRow(k.id);
	app.say(`${body.name}: saved.`, "ok");
}

// Revoke, after a confirmation naming the key.
let revoking = null;

function openRevoke(k) {
	revoking = k;
	$("revoke-text").textContent =
		`Revoke ${isolated(k.name)} (${k.id})? Requests with it are refused from now on. This cannot be undone.`;
	$("revoke-dialog").showModal();
	$("revoke-dialog").querySelector("[data-close]").focus();
}

async function submitRevoke() {
	const k = revoking;
	await api(`/keys/${encodeURIComponent(k.id)}`, { method: "DELETE" });
	$("revoke-dialog").close();
	await refreshRow(k.id);
	app.say(`${isolated(k.name)} is revoked.`, "ok");
}

export function initKeys(context) {
	app = context;
	$("new-key").addEventListener("click", openCreate);
	$("secret-copy").addEventListener("click", copySecret);
	$("keys-more").addEventListener("click", () => loadKeys({ more: true }).catch((err) => app.say(err.message, "error")));
	$("key-search").addEventListener("submit", (event) => {
		event.preventDefault();
		clearTimeout(searchTimer);
		loadKeys().catch((err) => app.say(err.message, "error"));
	});
	$("key-name").addEventListener("input", () => {
		clearTimeout(searchTimer);
		searchTimer = setTimeout(() => loadKeys().catch((err) => app.say(err.message, "error")), 250);
	});
	onSubmit($("create-form"), create);
	onSubmit($("topup-form"), () => submitTopUp(app, refreshRow));
	onSubmit($("scopes-form"), submitScopes);
	onSubmit($("revoke-form"), submitRevoke);
	for (const button of document.querySelectorAll("dialog [data-close]")) {
		button.addEventListener("click", () => button.closest("dialog").close());
	}
}
