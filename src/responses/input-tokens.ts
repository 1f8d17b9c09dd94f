import { admitTokenCount } from "../chat/admit-count";
import { countTokens } from "../chat/count-tokens";
import type { ChatRun } from "../chat/run-chat";
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
	const { model, rateHeaders } = await admitTokenCount(run, req.model);
	const stub = responseStore(run.env, run.callerKeyId);
	const { prior, items } = await conversationBefore(stub, req, inputItems(req, itemIds), run.config);
	const count = await countTokens(model, chatBody(req, prior, items), { fetch: fetcher, secrets: run.env });
	return {
		body: { object: "response.input_tokens", input_tokens: count.input_tokens },
		headers: { ...rateHeaders, "x-request-id": run.requestId, "x-venym-token-count": count.source },
	};
}
