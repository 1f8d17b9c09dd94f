// The admin API as the console calls it. The token lives in this tab's sessionStorage only:
// never in a URL, a cookie or localStorage; "log out" forgets it.

const TOKEN_KEY = "venym.adminToken";

export const session = {
	get token() {
		return sessionStorage.getItem(TOKEN_KEY);
	},
	set token(value) {
		if (value) sessionStorage.setItem(TOKEN_KEY, value);
		else sessionStorage.removeItem(TOKEN_KEY);
	},
};

/** An admin API refusal: the HTTP status and the OpenAI-shaped error's message and param. */
export class ApiError extends Error {
	constructor(status, message, param = null, retryAfter = null) {
		super(message);
		this.status = status;
		this.param = param;
		this.retryAfter = retryAfter;
	}
}

/** Called when the token in use is refused (401): the app logs out. */
let onUnauthorized = () => {};
export function whenUnauthorized(fn) {
	onUnauthorized = fn;
}

/**
 * `GET`/`POST`/… `/admin{path}` with the token (or `token` given, to try one before keeping it).
 * Resolves to the JSON body; throws ApiError for any non-2xx answer.
 */
export async function api(path, { method = "GET", body, headers = {}, token = session.token } = {}) {
	const res = await fetch(`/admin${path}`, {
		method,
		headers: {
			authorization: `Bearer ${token ?? ""}`,
			...(body === undefined ? {} : { "content-type": "application/json" }),
			...headers,
		},
		body: body === undefined ? undefined : JSON.stringify(body),
		cache: "no-store",
		credentials: "omit",
	});
	const json = await res.json().catch(() => null);
	if (res.ok) return json;
	const err = json?.error ?? {};
	const error = new ApiError(res.status, err.message ?? `HTTP ${res.status}`, err.param ?? null, res.headers.get("retry-after"));
	if (res.status === 401 && token === session.token) onUnauthorized(error);
	throw error;
}

/** Query string from an object, leaving out empty values. */
export function query(params) {
	const q = new URLSearchParams();
	for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
	const s = q.toString();
	return s ? `?${s}` : "";
}

/** A fresh idempotency key (crypto.randomUUID needs a secure context: HTTPS or localhost). */
export function newIdempotencyKey() {
	if (crypto.randomUUID) return crypto.randomUUID();
	const bytes = crypto.getRandomValues(new Uint8Array(16));
	return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
