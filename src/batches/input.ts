/**
 * A batch's input file, checked line by line before anything is stored or billed (pure): each
 * line `{custom_id, method: "POST", url, body}` with the batch's endpoint as its url, a unique
 * custom_id, and the same `body.model` on every line (one model per file, as OpenAI requires).
 * Every fault is named by its line number (1-based), as OpenAI's `errors.data[].line`.
 */

/** The endpoints a batch may run, and the lane each one runs on (batches/line-runner.ts). */
export const BATCH_ENDPOINTS = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"] as const;
/** `/v1/messages` is not offered to OpenAI clients: the Anthropic Message Batches surface submits lines for it. */
export type BatchEndpoint = (typeof BATCH_ENDPOINTS)[number] | "/v1/messages";

/** One validated line, as the dispatcher stores it. */
export interface BatchLineInput {
	customId: string;
	/** The request body, as JSON text (what the lane's runner reads). */
	body: string;
}

export type BatchInputError = {
	code: string;
	message: string;
	line: number | null;
	param: string | null;
};

/** Most validation errors a failed batch lists (the first ones). */
const MAX_ERRORS = 100;
/** The longest custom_id (OpenAI allows 64 characters in practice; kept generous, bounded). */
const MAX_CUSTOM_ID = 512;

export class BatchInputCheck {
	readonly errors: BatchInputError[] = [];
	readonly #seen = new Set<string>();
	model: string | undefined;
	lines = 0;

	constructor(private readonly endpoint: BatchEndpoint) {}

	/** Checks line `n` (1-based); returns the line when valid. Blank lines are skipped, as OpenAI does. */
	line(text: string, n: number): BatchLineInput | null {
		if (text.trim() === "") return null;
		this.lines += 1;
		let value: unknown;
		try {
			value = JSON.parse(text);
		} catch {
			return this.#fail(n, "invalid_json_line", `Line ${n} is not valid JSON.`);
		}
		if (value === null || typeof value !== "object" || Array.isArray(value))
			return this.#fail(n, "invalid_request", `Line ${n} must be a JSON object.`);
		const v = value as Record<string, unknown>;
		const customId = v.custom_id;
		if (typeof customId !== "string" || customId === "" || customId.length > MAX_CUSTOM_ID)
			return this.#fail(n, "missing_required_parameter", `Line ${n} needs a custom_id (a non-empty string).`, "custom_id");
		if (this.#seen.has(customId))
			return this.#fail(
				n,
				"duplicate_custom_id",
				`The custom_id '${customId}' on line ${n} is already used by another line.`,
				"custom_id",
			);
		this.#seen.add(customId);
		if (v.method !== undefined && v.method !== "POST")
			return this.#fail(n, "invalid_value", `Line ${n}: method must be 'POST'.`, "method");
		if (v.url !== this.endpoint)
			return this.#fail(n, "mismatched_endpoint", `Line ${n}: url must be the batch's endpoint, '${this.endpoint}'.`, "url");
		const body = v.body;
		if (body === null || typeof body !== "object" || Array.isArray(body))
			return this.#fail(n, "invalid_request", `Line ${n}: body must be a JSON object.`, "body");
		const model = (body as Record<string, unknown>).model;
		if (typeof model !== "string" || model === "")
			return this.#fail(n, "missing_required_parameter", `Line ${n}: body.model is required.`, "body.model");
		if (this.model === undefined) this.model = model;
		else if (model !== this.model)
			return this.#fail(
				n,
				"mismatched_model",
				`Line ${n}: every line of a batch must name the same model ('${this.model}').`,
				"body.model",
			);
		return { customId, body: JSON.stringify(body) };
	}

	/** The file's verdict once every line was read. */
	end(): BatchInputError[] {
		if (this.lines === 0 && this.errors.length === 0)
			this.errors.push({ code: "empty_file", message: "The input file has no lines.", line: null, param: null });
		return this.errors;
	}

	#fail(line: number, code: string, message: string, param: string | null = null): null {
		if (this.errors.length < MAX_ERRORS) this.errors.push({ code, message, line, param });
		return null;
	}
}
