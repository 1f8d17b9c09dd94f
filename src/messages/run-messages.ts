/**
 * The Messages lane: an Anthropic request translated to a chat body, run through the chat
 * pipeline (authorizeChat → runAuthorized: the same keys, scopes, hold, fleet routing,
 * fallbacks, settlement and usage record), answered as an Anthropic `message` or its events.
 */
import { assertModelAllowed, ledgerScopes, payerKeyId } from "../auth/scopes";
import { assertServes } from "../chat/authorize-chat";
import { countTokens, type TokenCount } from "../chat/count-tokens";
import { authorizeChat, type ChatRun, runAuthorized } from "../chat/run-chat";
import type { SearchRound, SearchUnderWay } from "../chat/search-tool";
import { resolveModel } from "../config";
import { countRequest } from "../ledger/ledger-client";
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
	const { model } = resolveModel(run.config, req.model);
	assertServes(model, "chat");
	assertModelAllowed(run.principal, model.id);
	// The engine tokenizes for free: the call still counts against the key's requests per minute.
	const rateHeaders = await countRequest(run.env, {
		payerKeyId: payerKeyId(run.principal),
		requestId: run.requestId,
		scopes: ledgerScopes(run.principal),
	});
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
