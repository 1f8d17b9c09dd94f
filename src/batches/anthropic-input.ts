/**
 * An Anthropic Message Batches create body (`{requests: [{custom_id, params}]}`), checked whole
 * before anything is stored (pure): 1 to 50,000 requests, each custom_id 1-64 characters of
 * `[a-zA-Z0-9_-]` and unique in the batch, each params a JSON object naming the batch's one model
 * and not streaming, each line at most `max_body_bytes` and the whole at most
 * `batches.max_file_bytes`. The rest of a params is the Messages lane's to check when the line
 * runs: a fault there is that request's `errored` result, as Anthropic validates params
 * asynchronously. What it gives back is the batch store's input file: one OpenAI-style line a
 * request, `url: "/v1/messages"`.
 */
import { MAX_BATCH_LINES } from "../config-batches";
import { GatewayError } from "../errors";

const CUSTOM_ID = /^[a-zA-Z0-9_-]{1,64}$/;

export interface MessageBatchLimits {
	/** A line's bound (the gateway's `max_body_bytes`, at most MAX_BATCH_LINE_BYTES: config-batches.ts). */
	maxLineBytes: number;
	/** The batch's bound (`batches.max_file_bytes`). */
	maxFileBytes: number;
}

export interface MessageBatchInput {
	/** The one model every params names. */
	model: string;
	/** The store's input file (JSONL), UTF-8. */
	bytes: Uint8Array;
	count: number;
}

function invalid(message: string, param: string): GatewayError {
	return new GatewayError("invalid_request", `${param}: ${message}`, { param });
}

function tooLarge(message: string, param: string): GatewayError {
	return new GatewayError("request_too_large", message, { param });
}

export function messageBatchInput(body: unknown, limits: MessageBatchLimits): MessageBatchInput {
	if (body === null || typeof body !== "object" || Array.isArray(body))
		throw new GatewayError("invalid_request", "The request body must be a JSON object.");
	const { requests, ...rest } = body as Record<string, unknown>;
	const extra = Object.keys(rest)[0];
	if (extra !== undefined) throw invalid("Extra inputs are not permitted", extra);
	if (!Array.isArray(requests)) throw invalid("Field required (an array of {custom_id, params})", "requests");
	if (requests.length === 0) throw invalid("List should have at least 1 item", "requests");
	if (requests.length > MAX_BATCH_LINES)
		throw tooLarge(`A batch may hold at most ${MAX_BATCH_LINES} requests; this one has ${requests.length}.`, "requests");
	const encoder = new TextEncoder();
	const seen = new Set<string>();
	const lines: Uint8Array[] = [];
	let size = 0;
	let model: string | undefined;
	for (const [i, r] of requests.entries()) {
		const at = `requests.${i}`;
		if (r === null || typeof r !== "object" || Array.isArray(r)) throw invalid("Input should be an object", at);
		const { custom_id: customId, params, ...other } = r as Record<string, unknown>;
		const otherKey = Object.keys(other)[0];
		if (otherKey !== undefined) throw invalid("Extra inputs are not permitted", `${at}.${otherKey}`);
		if (typeof customId !== "string" || !CUSTOM_ID.test(customId))
			throw invalid("String should match pattern '^[a-zA-Z0-9_-]{1,64}$'", `${at}.custom_id`);
		if (seen.has(customId))
			throw invalid(`Duplicate custom_id '${customId}': each must be unique in the batch`, `${at}.custom_id`);
		seen.add(customId);
		if (params === null || typeof params !== "object" || Array.isArray(params))
			throw invalid("Input should be an object", `${at}.params`);
		const p = params as Record<string, unknown>;
		if (typeof p.model !== "string" || p.model === "") throw invalid("Field required", `${at}.params.model`);
		if (p.stream === true) throw invalid("Streaming is not supported in a batch", `${at}.params.stream`);
		if (model === undefined) model = p.model;
		else if (p.model !== model)
			throw invalid(
				`Every request of a batch must name the same model ('${model}'); this one names '${p.model}'`,
				`${at}.params.model`,
			);
		const line = encoder.encode(`${JSON.stringify({ custom_id: customId, method: "POST", url: "/v1/messages", body: p })}\n`);
		if (line.length > limits.maxLineBytes)
			throw tooLarge(`${at} is over ${limits.maxLineBytes} bytes (a batch line's bound).`, `${at}.params`);
		size += line.length;
		if (size > limits.maxFileBytes) throw tooLarge(`A batch may be at most ${limits.maxFileBytes} bytes.`, "requests");
		lines.push(line);
	}
	const bytes = new Uint8Array(size);
	let offset = 0;
	for (const l of lines) {
		bytes.set(l, offset);
		offset += l.length;
	}
	return { model: model as string, bytes, count: lines.length };
}
