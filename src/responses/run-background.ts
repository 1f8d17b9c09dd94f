/**
 * A background response's run, inside the key's ResponseStore Durable Object (from its alarm),
 * on the hold placed when it was queued.
 */
import type { Principal } from "../app-env";
import { assertUsable, payerKeyId } from "../auth/scopes";
import { type AuthorizedChat, authorizeChat, type ChatRun, runAuthorized } from "../chat/run-chat";
import type { GatewayConfig } from "../config";
import { keyStore } from "../db/keys";
import { GatewayError, toErrorResponse } from "../errors";
import { errorText, logEvent } from "../observability/log-event";
import { RequestLog } from "../observability/request-log";
import { releaseStoredHold } from "../settlement/settlement";
import type { BackgroundJob } from "./background-job";
import { failureOf } from "./failure";
import { responseFromCompletion } from "./from-chat";
import { hostedSearchTool } from "./hosted-search";
import type { ResponsesRequest } from "./request-schema";
import { failedResponse, itemIds, type ResponseMeta, type ResponseObject, servedMeta } from "./response-object";
import type { ResponseStoreApi } from "./store-api";
import { responsesToChat } from "./to-chat";

/**
 * The caller as it stands now, not as it stood when the job was queued: a key revoked, expired
 * or narrowed since (or a token whose parent was) runs nothing, or runs under its new scopes. A
 * job stored without its caller (`principal: null`, written before every run had one) runs as
 * the key that queued it, and its parent's when it is a token.
 */
export async function currentPrincipal(env: Env, queued: Principal | null, callerKeyId: string): Promise<Principal> {
	const store = keyStore(env.DB);
	const key = await store.byId(queued?.key.id ?? callerKeyId);
	if (!key) throw new GatewayError("invalid_api_key", "This API key no longer exists.");
	let principal: Principal = { ...queued, key };
	const parentId = queued ? queued.parent?.id : key.parentKeyId;
	if (parentId) {
		const parent = await store.byId(parentId);
		if (!parent) throw new GatewayError("invalid_api_key", "This API key has been revoked.");
		principal = { ...principal, parent };
	}
	assertUsable(principal, Date.now());
	return principal;
}

/**
 * Runs a background response inside the ResponseStore Durable Object (registered from
 * background.ts), on the hold placed when it was queued. A run that ends before the engine
 * (the key revoked meanwhile, a check that now fails) gives that hold back at once.
 */
export async function runBackground(
	env: Env,
	job: BackgroundJob,
	signal: AbortSignal,
	store: ResponseStoreApi,
	config: GatewayConfig,
): Promise<void> {
	const p = job.payload as {
		/** The validated request, its input left out (stored as the response's input items). */
		request: ResponsesRequest;
		createdAt: number;
		/** The caller's scopes, so a background run is held to them like any other (null in jobs stored before it was required). */
		principal: Principal | null;
	};
	const conversation = store.conversation(job.id);
	if (!conversation) throw new Error("the queued response is gone");
	if (!store.start(job.id)) return;
	const meta: ResponseMeta = { id: job.id, createdAt: p.createdAt, model: p.request.model, request: p.request, ids: itemIds };
	const settlements: Promise<unknown>[] = [];
	let response: ResponseObject;
	let authorized: AuthorizedChat | undefined;
	// Its own log line (the request that queued it wrote one with outcome "queued"), same request id.
	const log = new RequestLog(job.requestId, "responses");
	log.asked({ model: p.request.model });
	// The paying key, known before the key is looked up again (a job stored without its caller: after).
	if (p.principal) log.payerKeyId = payerKeyId(p.principal);
	let status = 200;
	try {
		const principal = await currentPrincipal(env, p.principal, job.callerKeyId);
		log.payerKeyId = payerKeyId(principal);
		const chatRun: ChatRun = {
			env,
			config,
			callerKeyId: job.callerKeyId,
			principal,
			requestId: job.requestId,
			clientSignal: signal,
			waitUntil: (q) => settlements.push(q),
			log,
		};
		const body = responsesToChat({ ...p.request, input: [], stream: false }, [...conversation.history, ...conversation.input]);
		// Finds the hold placed at enqueue (a replay: nothing counted twice) and extends it.
		authorized = await authorizeChat(chatRun, body, { synchronousHold: true, searchTool: hostedSearchTool(p.request, config) });
		const result = await runAuthorized(chatRun, authorized);
		if (result.kind !== "completion") throw new Error("background run streamed");
		response = responseFromCompletion(result.body, servedMeta(meta, authorized), result.search);
	} catch (err) {
		if (!(err instanceof GatewayError)) {
			logEvent("error", "background response failed", { request_id: job.requestId, response_id: job.id, error: errorText(err) });
		}
		const failure = toErrorResponse(err);
		status = failure.status;
		log.failed(failure.body.error.code, status);
		// Refused before the engine: nothing settles the hold placed at enqueue but this.
		if (!authorized && job.hold) settlements.push(releaseStoredHold(env, job.hold));
		response = failedResponse(meta, failureOf(err));
	}
	await Promise.all(settlements);
	log.write(status);
	store.finish(job.id, response);
}
