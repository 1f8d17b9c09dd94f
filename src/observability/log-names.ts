/**
 * The request log line's OpenTelemetry names (request-log.ts): `gen_ai.operation.name` by lane,
 * the provider, `server.address`/`server.port`, and the names the line used before them.
 */
/** The inference lane of a request (each one writes a line). */
export type Lane = "chat" | "responses" | "embeddings" | "completions" | "messages" | "gemini";

/**
 * The names the line used before it took OpenTelemetry's (docs/operations.md, "Renamed fields"),
 * still written beside the new ones so that saved queries and alerts keep working.
 */
export interface LegacyLogFields {
	model: string | null;
	requested_model: string | null;
	status: number;
	error_code: string | null;
	/** `host[:port]`, as `server.address` and `server.port` together. */
	node: string | null;
	prompt_tokens: number;
	completion_tokens: number;
}

/** `gen_ai.operation.name`'s well-known values the lanes map to. */
export type GenAiOperation = "chat" | "text_completion" | "embeddings" | "generate_content";

export const PROVIDER_NAME = "venym";

export const OPERATIONS: Record<Lane, GenAiOperation> = {
	chat: "chat",
	responses: "chat",
	messages: "chat",
	completions: "text_completion",
	embeddings: "embeddings",
	gemini: "generate_content",
};

/** `host[:port]` as `server.address` and `server.port`. */
export function serverOf(host: string | null): { address: string | null; port: number | null } {
	if (host === null) return { address: null, port: null };
	const m = /^(.*):(\d+)$/.exec(host);
	return m ? { address: m[1] as string, port: Number(m[2]) } : { address: host, port: null };
}
