import { estimateTokens } from "../stream/estimate";
import type { Usage } from "../types";
import { boundedUsage, type UsageBounds } from "./usage-bounds";

export interface RewrittenCompletion {
	body: Record<string, unknown>;
	usage: Usage;
	estimated: boolean;
}

function outputChars(choices: unknown): number {
	if (!Array.isArray(choices)) return 0;
	let n = 0;
	for (const choice of choices) {
		// Legacy completions answer with `text`.
		const text = (choice as { text?: unknown } | null)?.text;
		if (typeof text === "string") n += text.length;
		const msg = (choice as { message?: Record<string, unknown> } | null)?.message;
		if (!msg) continue;
		for (const f of ["content", "reasoning_content", "reasoning"]) {
			const v = msg[f];
			if (typeof v === "string") n += v.length;
		}
		if (Array.isArray(msg.tool_calls)) {
			for (const tc of msg.tool_calls as Array<{ function?: { name?: string; arguments?: string } }>) {
				n += (tc.function?.arguments?.length ?? 0) + (tc.function?.name?.length ?? 0);
			}
		}
	}
	return n;
}

/**
 * A non-streaming engine answer as the client sees it: the gateway's model id, and usage
 * always present and within bounds (estimated at ~4 characters a token when the engine
 * reported none, or reported counts outside `bounds`).
 */
export function rewriteCompletion(
	engineJson: unknown,
	model: string,
	promptTokensEstimate: number,
	bounds: UsageBounds,
): RewrittenCompletion & { outOfBounds: boolean } {
	const body = (engineJson && typeof engineJson === "object" ? engineJson : {}) as Record<string, unknown>;
	body.model = model;
	const reported = body.usage;
	const { usage, estimated, outOfBounds } = boundedUsage(reported, bounds, {
		promptTokens: promptTokensEstimate,
		completionTokens: estimateTokens(outputChars(body.choices)),
	});
	// What the client sees is what is billed; extra engine fields (…_details) are kept.
	const extra = reported && typeof reported === "object" && !Array.isArray(reported) ? reported : {};
	body.usage = { ...extra, ...usage };
	return { body, usage, estimated, outOfBounds };
}
