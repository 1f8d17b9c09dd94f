/**
 * What to do with a node's answer: use it; try the next node and cool this one (`next`: the
 * node's own trouble); try the next node without blaming this one yet (`server_error`: a 5xx
 * the request itself may have caused); or give the client the engine's refusal.
 */
export type NodeVerdict = "ok" | "next" | "server_error" | "refuse";

export function classifyStatus(status: number): NodeVerdict {
	if (status >= 200 && status < 300) return "ok";
	// 429 and 503 say the node is busy or not ready; redirects are never followed; 401/403 mean
	// the gateway's own node key is wrong: the client's request is not at fault, and passing
	// them on would look like the client's key was refused.
	if (status === 429 || status === 503 || status === 401 || status === 403 || (status >= 300 && status < 400)) return "next";
	// Any other 5xx may be the node's or the request's (an input that crashes the engine makes
	// every node answer 500): callEngine stops a request at its second, and a node cools only
	// on 5xx answers to different requests (routing/node-state.ts).
	if (status >= 500) return "server_error";
	return "refuse";
}

export interface EngineErrorInfo {
	message: string;
	type: string | null;
	param: string | null;
	code: string | null;
}

function str(v: unknown): string | null {
	if (typeof v === "string") return v;
	if (typeof v === "number") return String(v);
	return null;
}

function isRecord(v: unknown): v is Record<string, unknown> {
	return typeof v === "object" && v !== null && !Array.isArray(v);
}

const FALLBACK = "The engine rejected the request";

function fields(e: Record<string, unknown>, fallback: string): EngineErrorInfo {
	return { message: str(e.message) ?? fallback, type: str(e.type), param: str(e.param), code: str(e.code) };
}

/**
 * The error an engine payload carries, or null when it carries none: OpenAI's nested
 * `{"error": {...}}`, `{"error": "text"}`, vLLM/FastAPI's flat `{"object": "error", ...}` (or any
 * payload of an SSE `event: error`), and FastAPI's `{"detail": ...}`. The one classifier of
 * engine errors, for error bodies and stream events alike.
 */
export function engineErrorIn(body: unknown, event?: string, fallback = FALLBACK): EngineErrorInfo | null {
	if (!isRecord(body)) return null;
	const inner = body.error;
	if (isRecord(inner)) return fields(inner, fallback);
	if (typeof inner === "string") return { message: inner, type: str(body.type), param: str(body.param), code: str(body.code) };
	if (inner || body.object === "error" || event === "error") return fields(body, fallback);
	if (typeof body.detail === "string") return { message: body.detail, type: null, param: null, code: null };
	if (Array.isArray(body.detail))
		return { message: JSON.stringify(body.detail).slice(0, 500), type: null, param: null, code: null };
	return null;
}

/**
 * Reads an engine error body (a refusal's status came with it, so some message is always
 * returned): any shape `engineErrorIn` knows, a bare `{"message": ...}`, or plain text.
 */
export function parseEngineError(text: string, fallback = FALLBACK): EngineErrorInfo {
	let body: unknown;
	try {
		body = JSON.parse(text);
	} catch {
		const trimmed = text.trim();
		// A JSON error body cut short (we read at most 64 KiB of it): its message is still there.
		if (trimmed.startsWith("{")) {
			const m = /"message"\s*:\s*"((?:[^"\\]|\\.){0,2000})/.exec(trimmed);
			if (m) return { message: unescapeJson(m[1] as string), type: null, param: null, code: null };
		}
		return { message: trimmed.slice(0, 500) || fallback, type: null, param: null, code: null };
	}
	const found = engineErrorIn(body, undefined, fallback);
	if (found) return found;
	if (isRecord(body) && typeof body.message === "string") return fields(body, fallback);
	return { message: fallback, type: null, param: null, code: null };
}

function unescapeJson(s: string): string {
	try {
		return JSON.parse(`"${s.replace(/\\$/, "")}"`) as string;
	} catch {
		return s;
	}
}
