/**
 * `POST /v1/responses/input_tokens`: how many input tokens a Responses request would use, the
 * earlier turns of `previous_response_id` and the tools included, counted as count_tokens counts
 * (chat/count-tokens.ts: the model's tokenizing node, else the estimate, the
 * `x-venym-token-count` header saying which). Free: nothing is held, billed, recorded or stored;
 * it counts against the key's requests per minute, as the engine's tokenizer is asked.
 */
import { assertModelAllowed, ledgerScopes, payerKeyId } from "../auth/scopes";
import { assertServes } from "../chat/authorize-chat";
import { countTokens } from "../chat/count-tokens";
import type { ChatRun } from "../chat/run-chat";
import { resolveModel } from "../config";
import { countRequest } from "../ledger/ledger-client";
import type { ResponsesRequest } from "./request-schema";
import { itemIds } from "./response-object";
import { chatBody, conversationBefore } from "./run-response";
import { responseStore } from "./store-api";
import { inputItems } from "./to-chat";

export interface InputTokens {
	body: { object: "response.input_tokens"; input_tokens: number };
	headers: Record<string, string>;
}

export async function countResponseInputTokens(
	run: ChatRun,
	req: ResponsesRequest,
	fetcher: typeof fetch = fetch,
): Promise<InputTokens> {
	const { model } = resolveModel(run.config, req.model);
	assertServes(model, "chat");
	assertModelAllowed(run.principal, model.id);
	const rateHeaders = await countRequest(run.env, {
		payerKeyId: payerKeyId(run.principal),
		requestId: run.requestId,
		scopes: ledgerScopes(run.principal),
	});
	const stub = responseStore(run.env, run.callerKeyId);
	const { prior, items } = await conversationBefore(stub, req, inputItems(req, itemIds), run.config);
	const count = await countTokens(model, chatBody(req, prior, items), { fetch: fetcher, secrets: run.env });
	return {
		body: { object: "response.input_tokens", input_tokens: count.input_tokens },
		headers: { ...rateHeaders, "x-request-id": run.requestId, "x-venym-token-count": count.source },
	};
}
