/**
 * When a refused client may try again, as every OpenAI client reads it: `retry-after-ms` first
 * (openai-node and the AI SDK honour it when it is under a minute, where a `Retry-After: 60` is
 * ignored and the request retried at once), then `Retry-After` in whole seconds, rounded up.
 */
export function retryAfterHeaders(ms: number): Record<string, string> {
	const wait = Math.max(1, Math.ceil(ms));
	return { "retry-after": String(Math.ceil(wait / 1000)), "retry-after-ms": String(wait) };
}
