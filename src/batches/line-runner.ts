/**
 * One batch line, run by the lane its endpoint names, with that lane's own runner (the one its
 * route calls: the same validation, allowlist, bounds, hold and settlement), as the caller who
 * submitted the batch stands now, at the batch price, on the node the dispatcher chose. What it
 * gives back is the line's answer as OpenAI writes it: a status code and a body.
 */
import type { Principal } from "../app-env";
import { authorizeChat, type ChatResult, type ChatRun, runAuthorized } from "../chat/run-chat";
import { authorizeCompletion } from "../completions/authorize-completion";
import type { GatewayConfig } from "../config";
import { runEmbeddings } from "../embeddings/run-embeddings";
import { GatewayError, toErrorResponse } from "../errors";
import { createMessage } from "../messages/run-messages";
import { errorText, logEvent } from "../observability/log-event";
import { type Lane, RequestLog } from "../observability/request-log";
import { validateResponsesRequest } from "../responses/request-schema";
import { currentPrincipal } from "../responses/run-background";
import { createResponse } from "../responses/run-response";
import type { Settled } from "../settlement/settlement";
import type { BatchEndpoint } from "./input";
import { batchPricedConfig } from "./price";

type Body = Record<string, unknown>;
type LaneRunner = (run: ChatRun, body: Body) => Promise<unknown>;

function completionBody(result: ChatResult): unknown {
	if (result.kind !== "completion") throw new Error("a batch line streamed");
	return result.body;
}

/** Each endpoint's lane: its runner and its name on the log line and usage record. Lines never stream. */
const LANES: Record<BatchEndpoint, { lane: Lane; run: LaneRunner }> = {
	"/v1/chat/completions": {
		lane: "chat",
		run: async (run, body) => completionBody(await runAuthorized(run, await authorizeChat(run, { ...body, stream: false }))),
	},
	"/v1/completions": {
		lane: "completions",
		run: async (run, body) =>
			completionBody(await runAuthorized(run, await authorizeCompletion(run, { ...body, stream: false }))),
	},
	"/v1/embeddings": { lane: "embeddings", run: async (run, body) => (await runEmbeddings(run, body)).body },
	"/v1/responses": {
		lane: "responses",
		run: async (run, body) => {
			const result = await createResponse(run, validateResponsesRequest({ ...body, stream: false, background: false }));
			if (result.kind !== "json") throw new Error("a batch line streamed");
			return result.body;
		},
	},
	"/v1/messages": {
		lane: "messages",
		run: async (run, body) => {
			const result = await createMessage(run, { ...body, stream: false });
			if (result.kind !== "json") throw new Error("a batch line streamed");
			return result.body;
		},
	},
};

export interface LineJob {
	batchId: string;
	customId: string;
	endpoint: BatchEndpoint;
	/** The line's body (JSON text). */
	body: string;
	/** The attempt's request id: its hold and settlement are keyed by it, so a rerun after a restart bills once. */
	requestId: string;
	/** The node the dispatcher placed it on. */
	node: string;
	/** The caller who submitted the batch, as stored (looked up again before the line runs). */
	principal: Principal;
	callerKeyId: string;
}

export interface LineAnswer {
	status: number;
	body: unknown;
	/** The error's `code` when the line failed. */
	code: string | null;
	/** What the line's settlement debited (nano-dollars; 0 when nothing was). */
	costNanos: number;
	/** Whether the engine call failed in a way another node may not (5xx, timeouts): the line is tried again. */
	retryable: boolean;
}

/** Runs one line to its answer; never throws. Its settlement has been written (or replayed) when it returns. */
export async function runLine(env: Env, config: GatewayConfig, job: LineJob, signal: AbortSignal): Promise<LineAnswer> {
	const { lane, run: runLane } = LANES[job.endpoint];
	const settlements: Promise<unknown>[] = [];
	const log = new RequestLog(job.requestId, lane);
	let answer: Omit<LineAnswer, "costNanos">;
	try {
		const principal = await currentPrincipal(env, job.principal, job.callerKeyId);
		const run: ChatRun = {
			env,
			config: batchPricedConfig(config),
			callerKeyId: job.callerKeyId,
			principal,
			requestId: job.requestId,
			clientSignal: signal,
			waitUntil: (p) => settlements.push(p),
			log,
			batchLine: { batchId: job.batchId, customId: job.customId, node: job.node },
		};
		const body = JSON.parse(job.body) as Body;
		log.asked(body);
		answer = { status: 200, body: await runLane(run, body), code: null, retryable: false };
	} catch (err) {
		if (!(err instanceof GatewayError)) {
			logEvent("error", "batch line failed", { request_id: job.requestId, batch_id: job.batchId, error: errorText(err) });
		}
		const failure = toErrorResponse(err);
		log.failed(failure.body.error.code, failure.status);
		// A node that failed or timed out, or an engine (or key) busy for now: another attempt, maybe on another node.
		const retryable = failure.status >= 500 || failure.status === 429;
		answer = { status: failure.status, body: failure.body, code: failure.body.error.code, retryable };
	}
	const costNanos = settledCost(await Promise.all(settlements), job.requestId);
	log.write(answer.status);
	return { ...answer, costNanos };
}

/** The debit of this request's settlement among what the run left under its `waitUntil`. */
function settledCost(results: unknown[], requestId: string): number {
	let cost = 0;
	for (const r of results as Settled[]) {
		if (r && typeof r === "object" && r.requestId === requestId && typeof r.costNanos === "number") cost = r.costNanos;
	}
	return cost;
}
