import { admitTokenCount } from "../chat/admit-count";
import { countTokens, type TokenCount } from "../chat/count-tokens";
import { authorizeChat, type ChatRun, runAuthorized } from "../chat/run-chat";
import type { SearchRound, SearchUnderWay } from "../chat/search-tool";
import { resolveModel } from "../config";
import type { Source } from "../types";
import { type AnthropicMessageOut, messageFromCompletion } from "./from-chat";
import { validateCountTokensRequest, validateMessagesRequest } from "./request-schema";
import { MessagesStreamEncoder } from "./stream-encoder";
import { messagesToChat } from "./to-chat";
import { serverSearchTool } from "./web-search";

const REASONING = "reasoning";

export type MessagesResult =
	| { kind: "json"; body: AnthropicMessageOut; headers: Record<string, string> }
	| { kind: "stream"; stream: ReadableStream<Uint8Array>; headers: Record<string, string> };

/** Response headers every Messages answer carries: Anthropic's `request-id`, and the fields ignored. */
function laneHeaders(requestId: string, ignored: string[]): Record<string, string> {
	const headers: Record<string, string> = { "request-id": requestId };
	if (ignored.length) headers["x-venym-ignored-fields"] = ignored.join(", ");
	return headers;
}

function chatBodyOf(run: ChatRun, req: Parameters<typeof messagesToChat>[0]): Record<string, unknown> {
	const { model } = resolveModel(run.config, req.model);
	return messagesToChat(req, { reasoning: model.capabilities.includes(REASONING), webSearch: !!run.config.web_search });
}

/** POST /v1/messages */
export async function createMessage(run: ChatRun, body: unknown): Promise<MessagesResult> {
	const { req, ignored } = validateMessagesRequest(body);
	const authorized = await authorizeChat(run, chatBodyOf(run, req), { searchTool: serverSearchTool(req, run.config) });
	const stopSequences = req.stop_sequences ?? [];
	const chatRun: ChatRun = {
		...run,
		// Made once the engine answered: `requestedModel` is then the model that serves (a fallback, maybe).
		streamEncoder: (sources: Source[], search?: SearchRound, underWay?: SearchUnderWay) =>
			new MessagesStreamEncoder({
				model: authorized.req.requestedModel,
				inputTokens: authorized.promptTokens,
				requestId: run.requestId,
				stopSequences,
				sources,
				search,
				underWay,
			}),
	};
	const result = await runAuthorized(chatRun, authorized);
	const headers = { ...result.headers, ...laneHeaders(run.requestId, ignored) };
	if (result.kind === "stream") return { kind: "stream", stream: result.stream, headers };
	return { kind: "json", body: messageFromCompletion(result.body, stopSequences, result.search), headers };
}

/** POST /v1/messages/count_tokens: free, unrecorded; the key must be allowed the model. */
export async function countMessageTokens(
	run: ChatRun,
	body: unknown,
	fetcher: typeof fetch = fetch,
): Promise<{ body: { input_tokens: number }; headers: Record<string, string> }> {
	const { req, ignored } = validateCountTokensRequest(body);
	const { model, rateHeaders } = await admitTokenCount(run, req.model);
	const chatBody = messagesToChat({ ...req, max_tokens: 1 }, { reasoning: false, webSearch: !!run.config.web_search });
	const count: TokenCount = await countTokens(model, chatBody, {
		fetch: fetcher,
		secrets: run.env,
	});
	return {
		body: { input_tokens: count.input_tokens },
		headers: { ...rateHeaders, ...laneHeaders(run.requestId, ignored), "x-venym-token-count": count.source },
	};
}
