/**
 * The Responses `response` object: its wire type, the meta a response is built from, and the
 * shells every status starts from (the request's settings echoed as OpenAI does).
 */
import type { ResponseStatus, ResponseUsage, Response as SdkResponse } from "openai/resources/responses/responses";
import { randomId } from "../ids";
import type { OutputItem } from "./item-schema";
import type { ResponsesRequest } from "./request-schema";
import { type EchoedTool, echoTool } from "./tools";

/** The response object on the wire. `output_text` is left out: the SDKs compute it. */
export type ResponseObject = Omit<
	SdkResponse,
	"output_text" | "access_programs" | "output" | "usage" | "error" | "tools" | "tool_choice"
> & {
	output: OutputItem[];
	tools: EchoedTool[];
	/** As sent: `{"type": "web_search"}` too, which the SDK's types do not list yet. */
	tool_choice: NonNullable<ResponsesRequest["tool_choice"]>;
	usage: ResponseUsage | null;
	error: { code: string; message: string } | null;
	store: boolean;
};

export interface StatusMeta {
	id: string;
	/** Unix seconds. */
	createdAt: number;
	/** The gateway model id: the one the client asked for, until a model serves (servedMeta). */
	model: string;
	request: ResponsesRequest;
}

export interface ResponseMeta extends StatusMeta {
	/** A fresh random suffix per call; item ids are `rs_…`, `msg_…`, `fc_…`. */
	ids: () => string;
}

/** The `ids` of a response's meta: a fresh random suffix for each of its items. */
export function itemIds(): string {
	return randomId("", 12);
}

/**
 * The meta naming the model that served: after the engine answered, the chat pipeline's request
 * names it (a fallback model, when one served; `:online` kept), as it does in chat's answer.
 */
export function servedMeta<T extends StatusMeta>(meta: T, authorized: { req: { requestedModel: string } }): T {
	const model = authorized.req.requestedModel;
	return model === meta.model ? meta : { ...meta, model };
}

export interface PartialOutput {
	output?: OutputItem[];
	usage?: ResponseUsage | null;
}
export interface Ending {
	status: "completed" | "incomplete";
	incomplete_details: { reason: "max_output_tokens" | "content_filter" } | null;
}

export function endingOf(finishReason: unknown): Ending {
	if (finishReason === "length") return { status: "incomplete", incomplete_details: { reason: "max_output_tokens" } };
	if (finishReason === "content_filter") return { status: "incomplete", incomplete_details: { reason: "content_filter" } };
	return { status: "completed", incomplete_details: null };
}
/** A response with no output yet: the request's settings echoed as OpenAI does. */
export function responseShell(meta: StatusMeta, status: ResponseStatus): ResponseObject {
	const r = meta.request;
	const text: ResponseObject["text"] = { format: r.text?.format ?? { type: "text" } };
	if (r.text?.verbosity) text.verbosity = r.text.verbosity;
	const out: ResponseObject = {
		id: meta.id,
		object: "response",
		created_at: meta.createdAt,
		status,
		background: r.background ?? false,
		error: null,
		incomplete_details: null,
		instructions: r.instructions ?? null,
		max_output_tokens: r.max_output_tokens ?? null,
		metadata: { ...r.metadata },
		model: meta.model,
		output: [],
		parallel_tool_calls: r.parallel_tool_calls ?? true,
		previous_response_id: r.previous_response_id ?? null,
		reasoning: { effort: r.reasoning?.effort ?? null, summary: r.reasoning?.summary ?? null },
		store: r.store,
		temperature: r.temperature ?? null,
		text,
		tool_choice: r.tool_choice ?? "auto",
		tools: (r.tools ?? []).map(echoTool),
		top_p: r.top_p ?? null,
		truncation: r.truncation ?? "disabled",
		usage: null,
	};
	if (r.user !== undefined) out.user = r.user;
	return out;
}
export function queuedResponse(meta: StatusMeta): ResponseObject {
	return responseShell(meta, "queued");
}

export function inProgressResponse(meta: StatusMeta): ResponseObject {
	return responseShell(meta, "in_progress");
}

export function failedResponse(
	meta: StatusMeta,
	error: { code: string; message: string },
	partial: PartialOutput = {},
): ResponseObject {
	return {
		...responseShell(meta, "failed"),
		error: { code: error.code, message: error.message },
		output: partial.output ?? [],
		usage: partial.usage ?? null,
	};
}

export function cancelledResponse(meta: StatusMeta, partial: PartialOutput = {}): ResponseObject {
	return { ...responseShell(meta, "cancelled"), output: partial.output ?? [], usage: partial.usage ?? null };
}
