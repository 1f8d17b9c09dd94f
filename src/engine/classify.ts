/** What to do with a node's answer: use it, try the next node, or give the client the engine's refusal. */
export type NodeVerdict = "ok" | "next" | "refuse";

export function classifyStatus(status: number): NodeVerdict {
	if (status >= 200 && status < 300) return "ok";
	// 429 and 5xx are the node's trouble, not the request's; redirects are never followed.
	// 401/403 mean the gateway's own node key is wrong: the client's request is not at fault,
	// and passing them on would look like the client's key was refused.
	if (status === 429 || status === 401 || status === 403 || status >= 500 || (status >= 300 && status < 400)) return "next";
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

/**
 * Reads an engine error body in any of the shapes engines use: OpenAI's nested
 * `{"error": {...}}`, vLLM/FastAPI's flat `{"object": "error", "message": ...}`,
 * `{"error": "text"}`, `{"detail": ...}` or plain text.
 */
export function parseEngineError(text: string, fallback = "The engine rejected the request"): EngineErrorInfo {
	let body: unknown;
	try {
		body = JSON.parse(text);
	} catch {
		const trimmed = text.trim().slice(0, 500);
		return { message: trimmed || fallback, type: null, param: null, code: null };
	}
	if (body && typeof body === "object") {
		const o = body as Record<string, unknown>;
		const inner = o.error;
		if (inner && typeof inner === "object") {
			const e = inner as Record<string, unknown>;
			return { message: str(e.message) ?? fallback, type: str(e.type), param: str(e.param), code: str(e.code) };
		}
		if (typeof inner === "string") return { message: inner, type: str(o.type), param: str(o.param), code: str(o.code) };
		if (typeof o.message === "string") return { message: o.message, type: str(o.type), param: str(o.param), code: str(o.code) };
		if (typeof o.detail === "string") return { message: o.detail, type: null, param: null, code: null };
		if (Array.isArray(o.detail)) return { message: JSON.stringify(o.detail).slice(0, 500), type: null, param: null, code: null };
	}
	return { message: fallback, type: null, param: null, code: null };
}
