/** Token counts as OpenAI reports them. */
export interface Usage {
	prompt_tokens: number;
	completion_tokens: number;
	total_tokens: number;
	/** Prompt tokens the engine served from its prefix cache (a part of prompt_tokens); absent when none. */
	cached_tokens?: number;
}

/** A web-search result cited in an answer (search/grounding.ts): the `venym.sources` frame and the citations. */
export interface Source {
	title: string;
	url: string;
}

/** How a request ended, for billing and the usage record. */
export type SettleStatus = "completed" | "engine_error" | "client_disconnected" | "failed";

/** What the streaming / non-streaming transform hands to settlement. */
export interface Outcome {
	status: SettleStatus;
	usage: Usage;
	/** true when any part of `usage` was estimated by the gateway rather than reported by the engine. */
	estimated: boolean;
	/** base URL of the node that answered, or null when none did. */
	node: string | null;
}
