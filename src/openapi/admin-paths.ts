/**
 * The admin API (admin token) and the operator console's public files, as OpenAPI operations.
 * Bodies and the usage summary's query come from zod; the listings' query parameters are read
 * by api/list-params.ts (functions, not zod) and are described by hand below.
 */
import { usageSummaryQuery } from "../api/usage-query";
import { type Operation, pathParam, query, queryFromZod } from "./operation";

// ---- Hand-described query parameters (api/list-params.ts, routes/usage.ts, routes/admin.ts read them, not zod) ----
const LIMIT = query("limit", "Page size, 1–1000 (default 100; larger values are clamped).", { type: "integer", minimum: 1 });
const CURSOR = query("cursor", "The previous page's `next_cursor`, unchanged.");
const TIME = "unix seconds or an ISO 8601 date";
const KEY_LIST_PARAMS = [
	LIMIT,
	CURSOR,
	query("name", "Only keys whose name contains this text (at most 200 characters, one line)."),
];
const USAGE_LIST_PARAMS = [
	query("key_id", "Only this key's records."),
	query("model", "Only this served model's records."),
	query("end_user", "Only records of this end user (as the request named it)."),
	query("since", `Records from this time (inclusive): ${TIME}.`),
	query("until", `Records before this time (exclusive): ${TIME}.`),
	LIMIT,
	CURSOR,
];

const KEY_ID = pathParam("id", "A key id (`key_…`).");

export function adminPaths(): Record<string, Record<string, Operation>> {
	const html = (summary: string): Operation => ({
		tag: "Console",
		summary,
		security: "none",
		media: ["text/html", { type: "string" }],
		successDescription: "The operator console's page (public; its data calls need the admin token).",
		errors: [],
	});
	return {
		"/admin": { get: html("Operator console") },
		"/admin/": { get: html("Operator console (trailing slash)") },
		"/admin/console.css": {
			get: {
				tag: "Console",
				summary: "Console style sheet",
				security: "none",
				media: ["text/css", { type: "string" }],
				successDescription: "The console's style sheet.",
			},
		},
		"/admin/js/{file}": {
			get: {
				tag: "Console",
				summary: "Console script",
				security: "none",
				parameters: [pathParam("file", "A script of the console (`app.js`).")],
				media: ["text/javascript", { type: "string" }],
				successDescription: "One of the console's scripts.",
				errors: [404],
			},
		},
		"/admin/keys": {
			post: {
				tag: "Admin",
				summary: "Create a key",
				security: "admin",
				body: "CreateKeyRequest",
				status: 201,
				json: "AdminKeyCreated",
				successDescription: "The key, with its `vk-…` secret (shown once).",
				errors: [400, 413],
			},
			get: {
				tag: "Admin",
				summary: "List keys",
				security: "admin",
				parameters: KEY_LIST_PARAMS,
				json: "AdminKeyList",
				successDescription: "A page of keys, newest first.",
				errors: [400],
			},
		},
		"/admin/keys/{id}": {
			get: {
				tag: "Admin",
				summary: "Get a key",
				security: "admin",
				parameters: [KEY_ID],
				json: "AdminKey",
				successDescription: "The key and its money.",
				errors: [404],
			},
			patch: {
				tag: "Admin",
				summary: "Change a key",
				security: "admin",
				parameters: [KEY_ID],
				body: "PatchKeyRequest",
				json: "AdminKey",
				successDescription: "The key as changed.",
				errors: [400, 404, 413],
			},
			delete: {
				tag: "Admin",
				summary: "Revoke a key",
				security: "admin",
				parameters: [KEY_ID],
				json: "AdminKeyDeleted",
				successDescription: "The revoked key.",
				errors: [404],
			},
		},
		"/admin/keys/{id}/credits": {
			get: {
				tag: "Admin",
				summary: "A key's credit history",
				security: "admin",
				parameters: [KEY_ID, LIMIT],
				json: "CreditHistory",
				successDescription: "The key's credits (initial balance, top-ups, debits), newest first.",
				errors: [400, 404],
			},
			post: {
				tag: "Admin",
				summary: "Add or take back credit",
				security: "admin",
				parameters: [
					KEY_ID,
					{
						name: "Idempotency-Key",
						in: "header",
						required: false,
						description: "Resending the same amount with it replays the first result (`applied: false`).",
						schema: { type: "string" },
					},
				],
				body: "CreditRequest",
				json: "CreditResult",
				successDescription: "The new balance.",
				errors: [400, 404, 409, 413],
			},
		},
		"/admin/keys/{id}/alert-deliveries": {
			get: {
				tag: "Admin",
				summary: "A key's alert deliveries",
				security: "admin",
				parameters: [KEY_ID, query("limit", "At most this many, 1–200 (default 50).", { type: "integer", minimum: 1 })],
				json: "KeyAlertDeliveries",
				successDescription: "The key's spend alert deliveries as its ledger holds them now, newest first.",
				errors: [400, 404],
			},
		},
		"/admin/alert-deliveries": {
			get: {
				tag: "Admin",
				summary: "Every alert delivery",
				security: "admin",
				parameters: [
					query("key_id", "Only this key's deliveries."),
					query("status", "pending, delivered or failed."),
					query("event", "balance_below_usd, spent_pct_of_cap, exhausted, node_down or node_back."),
					query("limit", "Page size, 1–500 (default 50).", { type: "integer", minimum: 1 }),
					CURSOR,
				],
				json: "AlertDeliveryList",
				successDescription: "Key and node alert deliveries as last written to D1, newest first.",
				errors: [400],
			},
		},
		"/admin/usage": {
			get: {
				tag: "Admin",
				summary: "List usage records",
				security: "admin",
				parameters: USAGE_LIST_PARAMS,
				json: "UsageList",
				successDescription: "A page of usage records, newest first.",
				errors: [400],
			},
		},
		"/admin/usage/summary": {
			get: {
				tag: "Admin",
				summary: "Usage per hour or day",
				security: "admin",
				parameters: queryFromZod(usageSummaryQuery),
				json: "UsageSummary",
				successDescription: "Totals per period, optionally per model or paying key.",
				errors: [400],
			},
		},
		"/admin/nodes": {
			get: {
				tag: "Admin",
				summary: "Engine nodes as the router sees them",
				security: "admin",
				json: "NodeList",
				successDescription: "A row per model × node.",
			},
			patch: {
				tag: "Admin",
				summary: "Override a node's weight or drain it",
				security: "admin",
				body: "PatchNodeRequest",
				json: "NodeList",
				successDescription: "The node's rows after the change.",
				errors: [400, 404, 413],
			},
		},
		"/admin/refusals": {
			get: {
				tag: "Admin",
				summary: "Requests the gateway refused",
				description:
					"Refusals (401, 402, 429, 400, …) on the inference lanes, newest first, with the error's code and message and the key's name. Query: `status`, `code`, `key_id`, `since` (unix seconds or ISO 8601), `limit` (≤ 200), `cursor`. Each isolate records at most 30 a minute; `suppressed` counts those it left out just before a row.",
				security: "admin",
				json: "RefusalList",
				successDescription: "A page of refusals.",
				errors: [400],
			},
		},
		"/admin/maintenance/run": {
			post: {
				tag: "Admin",
				summary: "Run the hourly maintenance now",
				description:
					"The raw usage records' retention (and R2 export) that the Cron Trigger runs every hour: records older than `usage.retention_days` whole UTC days are deleted, rollups and balances are never touched. A run stops starting chunks after 25 s: `done: false` means run it again. `error` is set (and the answer still 200) when it could not delete what it should.",
				security: "admin",
				json: "MaintenanceRun",
				successDescription: "What the run did.",
			},
		},
	};
}
