// The console's entry: sign in with the admin token (kept in sessionStorage), the views, auto-refresh, log out.
import { initAlerts, loadAlerts } from "./alerts.js";
import { ApiError, api, session, whenUnauthorized } from "./api.js";
import { initAutoRefresh, stopAutoRefresh } from "./autorefresh.js";
import { initBatches, loadBatches } from "./batches.js";
import { initKeys, loadKeys } from "./keys.js";
import { initNodes, loadNodes } from "./nodes.js";
import { initRefused, loadRefused } from "./refused.js";
import { initUsage, loadUsage, showKeyUsage } from "./usage.js";

const $ = (id) => document.getElementById(id);

/**
 * Each view is a module of its own with an `init(context)` and a `load()`, shown by the section
 * `#<name>-view` and the tab `data-view="<name>"` in index.html: a new view is a module, its
 * markup, and one line here.
 */
const REGISTRY = {
	keys: { init: initKeys, load: loadKeys },
	usage: { init: initUsage, load: loadUsage },
	nodes: { init: initNodes, load: loadNodes },
	refused: { init: initRefused, load: loadRefused },
	batches: { init: initBatches, load: () => loadBatches() },
	alerts: { init: initAlerts, load: loadAlerts },
};
const VIEWS = Object.keys(REGISTRY);
/** The view on screen (auto-refresh reloads it). */
let current = null;

/** One line for the operator, read out by screen readers (role=status, aria-live). */
function say(text, kind = "info") {
	const box = $("message");
	box.dataset.kind = kind;
	box.textContent = text;
}

function refusal(err) {
	if (err instanceof ApiError && err.status === 401) return "That admin token was refused.";
	if (err instanceof ApiError && err.status === 429) {
		return `Too many wrong admin tokens from this address: try again in ${err.retryAfter ?? "a few"} seconds.`;
	}
	return `The gateway could not be reached: ${err.message}`;
}

/** Nothing of the admin data stays on screen once signed out. */
function clearData() {
	for (const tbody of document.querySelectorAll("main tbody")) tbody.replaceChildren();
	for (const id of ["usage-totals", "usage-chart"]) $(id).replaceChildren();
	for (const dialog of document.querySelectorAll("dialog")) if (dialog.open) dialog.close();
	$("secret-value").value = "";
}

function showLogin() {
	clearData();
	for (const v of VIEWS) $(`${v}-view`).hidden = true;
	current = null;
	stopAutoRefresh();
	$("tabs").hidden = true;
	$("autorefresh").hidden = true;
	$("logout").hidden = true;
	$("login-view").hidden = false;
	$("token").value = "";
	$("token").focus();
}

async function show(view) {
	current = view;
	for (const v of VIEWS) $(`${v}-view`).hidden = v !== view;
	for (const tab of $("tabs").querySelectorAll("button")) {
		if (tab.dataset.view === view) tab.setAttribute("aria-current", "page");
		else tab.removeAttribute("aria-current");
	}
	try {
		await REGISTRY[view].load();
	} catch (err) {
		if (!(err instanceof ApiError && err.status === 401)) say(err.message, "error");
	}
}

async function enter() {
	$("login-view").hidden = true;
	$("tabs").hidden = false;
	$("autorefresh").hidden = false;
	$("logout").hidden = false;
	await show("keys");
}

async function signIn(token) {
	try {
		// The cheapest admin call: it proves the token before anything is kept or shown.
		await api("/keys?limit=1", { token });
	} catch (err) {
		say(refusal(err), "error");
		$("token").select();
		return;
	}
	session.token = token;
	say("");
	await enter();
}

function logOut(message = "Logged out.", kind = "info") {
	session.token = null;
	showLogin();
	say(message, kind);
}

function start() {
	const context = {
		say,
		openUsage(key) {
			say("");
			showKeyUsage(key);
			show("usage");
		},
	};
	for (const view of Object.values(REGISTRY)) view.init(context);
	// Reloads the view on screen in place (its filters kept); never while a dialog is open.
	initAutoRefresh(async () => {
		if (!current || document.querySelector("dialog[open]")) return;
		await REGISTRY[current].load();
	}, say);
	whenUnauthorized(() => logOut("That admin token was refused.", "error"));
	$("login-form").addEventListener("submit", (event) => {
		event.preventDefault();
		const token = $("token").value.trim();
		if (!token) return say("Enter the admin token.", "error");
		signIn(token);
	});
	$("logout").addEventListener("click", () => logOut());
	for (const tab of $("tabs").querySelectorAll("button")) {
		tab.addEventListener("click", () => {
			say("");
			if (tab.dataset.view === "usage") showKeyUsage(null);
			show(tab.dataset.view);
		});
	}
	$("create-dialog").addEventListener("close", () => {
		$("secret-value").value = "";
	});
	if (session.token) enter();
	else showLogin();
}

start();
