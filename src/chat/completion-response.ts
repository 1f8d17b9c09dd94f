import { estimateTokens } from "../stream/estimate";
import type { Usage } from "../types";

export interface RewrittenCompletion {
	body: Record<string, unknown>;
	usage: Usage;
	estimated: boolean;
}

function isUsage(u: unknown): u is Usage {
	if (!u || typeof u !== "object") return false;
	const o = u as Record<string, unknown>;
	return typeof o.prompt_tokens === "number" && typeof o.completion_tokens === "number";
}

function outputChars(choices: unknown): number {
	if (!Array.isArray(choices)) return 0;
	let n = 0;
	for (const choice of choices) {
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
 * always present (estimated at ~4 characters a token when the engine reported none).
 */
export function rewriteCompletion(engineJson: unknown, model: string, promptTokensEstimate: number): RewrittenCompletion {
	const body = (engineJson && typeof engineJson === "object" ? engineJson : {}) as Record<string, unknown>;
	body.model = model;
	let estimated = false;
	let usage: Usage;
	if (isUsage(body.usage)) {
		const u = body.usage;
		usage = {
			prompt_tokens: u.prompt_tokens,
			completion_tokens: u.completion_tokens,
			total_tokens: u.prompt_tokens + u.completion_tokens,
		};
		if (typeof u.total_tokens !== "number") (body.usage as Usage).total_tokens = usage.total_tokens;
	} else {
		estimated = true;
		const completion = estimateTokens(outputChars(body.choices));
		usage = {
			prompt_tokens: promptTokensEstimate,
			completion_tokens: completion,
			total_tokens: promptTokensEstimate + completion,
		};
		body.usage = { ...usage };
	}
	return { body, usage, estimated };
}
