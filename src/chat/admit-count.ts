/**
 * What every lane's token count (Messages' count_tokens, Responses' input_tokens, Gemini's
 * countTokens) checks before it asks a node: the model serves chat, the key may use it, and the
 * call counts against the key's requests per minute (the engine tokenizes for free).
 */
import { assertModelAllowed, ledgerScopes, payerKeyId } from "../auth/scopes";
import { type ModelConfig, resolveModel } from "../config";
import { countRequest } from "../ledger/ledger-client";
import { assertServes } from "./authorize-chat";
import type { ChatRun } from "./run-chat";

export async function admitTokenCount(
	run: ChatRun,
	modelId: string,
): Promise<{ model: ModelConfig; rateHeaders: Awaited<ReturnType<typeof countRequest>> }> {
	const { model } = resolveModel(run.config, modelId);
	assertServes(model, "chat");
	assertModelAllowed(run.principal, model.id);
	const rateHeaders = await countRequest(run.env, {
		payerKeyId: payerKeyId(run.principal),
		requestId: run.requestId,
		scopes: ledgerScopes(run.principal),
	});
	return { model, rateHeaders };
}
