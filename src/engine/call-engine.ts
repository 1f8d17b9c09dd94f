import { ROUTING_DEFAULTS } from "../config-schema";
import { GatewayError } from "../errors";
import { clientLeft } from "../http/client-gone";
import { errorText } from "../observability/log-event";
import { redactForms, rememberSentSecrets, secretForms } from "../redact";
import { type Fleet, isolateFleet } from "../routing/fleet";
import { secretNamed } from "../secrets";
import { AttemptTimer, pastDeadline } from "./attempt-timer";
import { CACHE_SALT_SECRET, cacheSaltFor, withCacheSalt } from "./cache-salt";
import type { EngineAnswer, EngineCall, EngineObserver, EngineTarget } from "./call-types";
import { classifyStatus, parseEngineError } from "./classify";
import { deadlinePassed, type NodeFailure, noNodeServed } from "./no-answer";
import { readEngineBody } from "./read-body";
import { readCapped, relayText } from "./relay-text";

/** A request stops at this many 5xx answers (across nodes and fallback models): more would be the request's doing. */
export const MAX_SERVER_ERRORS = 2;

/** Names each engine call, so a node's 5xx answers are told apart by request (routing/node-state.ts). */
let callSeq = 0;

/**
 * The secrets this call may send to its nodes: never to be relayed back to the client, nor
 * logged (the isolate's log lines are scrubbed of every one it has sent).
 */
function nodeSecrets(call: EngineCall): string[] {
	const out: string[] = [];
	for (const target of call.targets) {
		for (const node of target.nodes) {
			const v = node.apiKeyEnv ? secretNamed(call.secrets, node.apiKeyEnv) : undefined;
			if (typeof v === "string" && v && !out.includes(v)) out.push(v);
		}
	}
	rememberSentSecrets(out);
	return out;
}

/**
 * The client left; `beforeEngine` when no node had been asked yet (settlement charges nothing then),
 * else `target`, the model whose engine was last asked (its price is the estimate's).
 */
function clientClosed(cause: unknown, asked: number | null): GatewayError {
	return new GatewayError("client_closed", "The client closed the request", {
		cause,
		...(asked === null ? { beforeEngine: true } : { target: asked }),
	});
}

/**
 * A 2xx answer, its node counted in flight until its body has been read: by the stream layer
 * (`takeBody`, which reports the end) or as text (`readBody`).
 */
function answerOf(
	response: Response,
	url: string,
	target: number,
	controller: AbortController,
	fleet: Fleet,
	secrets: readonly string[],
	observer: EngineObserver | undefined,
): EngineAnswer {
	let finished = false;
	const finish = () => {
		if (finished) return;
		finished = true;
		fleet.finished(url);
		observer?.engineEnded?.();
	};
	return {
		takeBody: () => {
			if (!response.body) finish();
			return { body: response.body, done: finish };
		},
		readBody: (opts) => {
			const read = readEngineBody(response, opts).finally(finish);
			// An engine that echoes its Authorization puts it in the answer: never relayed.
			const forms = secrets.length ? secretForms(secrets) : [];
			return forms.length ? read.then((text) => redactForms(text, forms)) : read;
		},
		node: url,
		target,
		abort: (reason) => controller.abort(reason),
		secrets,
	};
}

/**
 * Tries the targets in order, each on up to `max_attempts` of its nodes as the router picks
 * them (src/routing/picker.ts), until one answers 2xx. Connection errors, first-token timeouts
 * (`first_byte_timeout_ms` plus the prompt's prefill time: engine/attempt-timer.ts), 429, 503,
 * 401, 403 and 3xx are the node's: it cools down at once and the next node is tried
 * (the failed body is cancelled first, since a Worker has only six outbound connections). Any
 * other 5xx may be the request's: the next node is tried, a second such answer ends the request
 * (502), and the node is held to it only when the request got no other (it is then counted
 * against the node, which cools once different requests got one: routing/node-state.ts). When a
 * model's attempts are used up the next target (a fallback model) gets its own. Any other 4xx
 * is the engine refusing the request and goes back to the client with its status and message:
 * not retried, no fallback. A client that leaves is never the node's failure. A long prompt's
 * timeout cools its node only when short prompts time out there too (routing/node-state.ts), and
 * the request's overall deadline (`deadlineAt`) ends it as 504 without blaming any node.
 */
export async function callEngine(call: EngineCall): Promise<EngineAnswer> {
	const routing = call.routing;
	const fleet = routing?.fleet ?? isolateFleet;
	const random = routing?.random ?? Math.random;
	const { cooldown_ms: cooldownMs, max_attempts: maxAttempts } = routing?.settings ?? ROUTING_DEFAULTS;
	routing?.refresh?.();
	const request = ++callSeq;
	/** The target whose node was last sent the request (it may have read it), or null before any. */
	let asked: number | null = null;
	const failures: NodeFailure[] = [];
	/** Nodes that answered this request with a 5xx that may be its own doing. */
	const serverErrors: NodeFailure[] = [];
	/** The request's one 5xx, if it had only one, counts against its node: the request was not the cause. */
	const holdServerError = () => {
		const failure = serverErrors.length === 1 ? serverErrors[0] : undefined;
		if (failure) fleet.serverError(failure.node, request, failure.reason, Date.now(), cooldownMs);
	};
	for (let t = 0; t < call.targets.length; t++) {
		const target = call.targets[t] as EngineTarget;
		const tried = new Set<string>();
		let body: string | undefined;
		let saltedBody: string | undefined;
		for (let attempt = 0; attempt < maxAttempts; attempt++) {
			if (call.clientSignal?.aborted) throw clientClosed(undefined, asked);
			if (pastDeadline(call.deadlineAt, Date.now())) throw deadlinePassed(failures, call.observer?.requestId);
			const picked = fleet.route(target.model, target.nodes, {
				now: Date.now(),
				random,
				tried,
				affinityKey: call.affinityKey,
				loadFactor: routing?.settings.affinity_load_factor,
			});
			if (!picked) break;
			const node = picked.node;
			tried.add(node.url);
			call.observer?.attempt(node.url, picked.route);
			body ??= typeof target.body === "string" ? target.body : target.body();
			// Only a salted node pays for a second body; the client's own cache_salt never reaches it.
			if (node.cacheSalt) {
				saltedBody ??= withCacheSalt(
					body,
					await cacheSaltFor(secretNamed(call.secrets, CACHE_SALT_SECRET), call.payerKeyId ?? ""),
				);
			}

			const controller = new AbortController();
			const onClientAbort = () => controller.abort(call.clientSignal?.reason);
			call.clientSignal?.addEventListener("abort", onClientAbort, { once: true });
			const timer = new AttemptTimer(controller, {
				firstByteTimeoutMs: call.firstByteTimeoutMs,
				promptTokens: call.promptTokens ?? 0,
				prefillTokensPerS: fleet.prefillRate(node),
				deadlineAt: call.deadlineAt,
				now: Date.now(),
			});
			/** The attempt timed out: the request's deadline ends it; a first-token timeout is the node's. */
			const timeout = () => {
				if (timer.expired === "request") throw deadlinePassed(failures, call.observer?.requestId);
				fleet.timedOut(node.url, timer.long, Date.now(), cooldownMs);
				failures.push({ node: node.url, model: target.model, reason: "timeout" });
			};
			const headers: Record<string, string> = {
				"content-type": "application/json",
				accept: "application/json, text/event-stream",
			};
			const key = node.apiKeyEnv ? secretNamed(call.secrets, node.apiKeyEnv) : undefined;
			if (typeof key === "string" && key) headers.authorization = `Bearer ${key}`;
			const init: RequestInit = {
				method: "POST",
				headers,
				body: node.cacheSalt ? saltedBody : body,
				redirect: "manual",
				signal: controller.signal,
			};
			const started = Date.now();
			fleet.started(node.url);
			call.observer?.engineStarted?.();
			asked = t;
			let response: Response;
			try {
				response = await (call.fetch ? call.fetch(`${node.url}${call.path}`, init) : fetch(`${node.url}${call.path}`, init));
			} catch (err) {
				timer.clear();
				fleet.finished(node.url);
				call.observer?.engineEnded?.();
				const timedOut = controller.signal.aborted && !call.clientSignal?.aborted;
				// A client that left is not the node failing, even when the runtime broke the
				// connection before it fired the client's signal.
				const gone = !timedOut && (await clientLeft(call.clientSignal));
				call.clientSignal?.removeEventListener("abort", onClientAbort);
				if (gone) throw clientClosed(err, asked);
				if (timedOut) {
					timeout();
					continue;
				}
				fleet.failed(node.url, "connection failed", Date.now(), cooldownMs);
				failures.push({ node: node.url, model: target.model, reason: `connection failed: ${errorText(err)}` });
				continue;
			}
			const verdict = classifyStatus(response.status);
			if (verdict === "ok") {
				const answer = answerOf(response, node.url, t, controller, fleet, nodeSecrets(call), call.observer);
				// The first-byte timeout runs on until the first token: headers, a role chunk and
				// keep-alives from a node that then says nothing are not an answer.
				const first = call.firstToken ? await call.firstToken(answer) : "token";
				timer.clear();
				if (first === "token") {
					answer.firstTokenMs = Date.now() - started;
					fleet.succeeded(node.url, answer.firstTokenMs, Date.now());
					holdServerError();
					call.observer?.answered(node.url);
					return answer;
				}
				call.clientSignal?.removeEventListener("abort", onClientAbort);
				const timedOut = controller.signal.aborted && !call.clientSignal?.aborted;
				answer.abort(new Error("no first token"));
				if (!timedOut && (await clientLeft(call.clientSignal))) throw clientClosed(undefined, asked);
				if (timedOut) {
					timeout();
					continue;
				}
				if (first === "error") {
					// Nothing reached the client: the next node may serve. An error in place of an answer
					// may be the request's doing, so it is weighed as a 5xx is (a second one stops here).
					const failure = { node: node.url, model: target.model, reason: "engine error before the first token", status: 502 };
					failures.push(failure);
					serverErrors.push(failure);
					if (serverErrors.length >= MAX_SERVER_ERRORS) throw noNodeServed(failures, call.observer?.requestId);
					continue;
				}
				fleet.failed(node.url, "connection failed", Date.now(), cooldownMs);
				failures.push({ node: node.url, model: target.model, reason: "stream failed before the first token" });
				continue;
			}
			timer.clear();
			call.clientSignal?.removeEventListener("abort", onClientAbort);
			fleet.finished(node.url);
			call.observer?.engineEnded?.();
			if (verdict === "next" || verdict === "server_error") {
				await response.body?.cancel().catch(() => {});
				const failure = { node: node.url, model: target.model, reason: `status ${response.status}`, status: response.status };
				failures.push(failure);
				if (verdict === "next") {
					fleet.failed(node.url, failure.reason, Date.now(), cooldownMs);
					continue;
				}
				serverErrors.push(failure);
				// Two nodes failed this one request: more would be the request's doing, and
				// trying every node (and every fallback) would only spread it.
				if (serverErrors.length >= MAX_SERVER_ERRORS) throw noNodeServed(failures, call.observer?.requestId);
				continue;
			}
			call.observer?.answered(node.url);
			const info = parseEngineError(await readCapped(response));
			const secrets = nodeSecrets(call);
			throw new GatewayError("engine_refused", relayText(info.message, secrets), {
				status: response.status,
				param: info.param === null ? null : relayText(info.param, secrets, 200),
				code: info.code === null ? null : relayText(info.code, secrets, 100),
				type: info.type && /^[a-z_]{1,64}$/.test(info.type) ? info.type : "invalid_request_error",
			});
		}
	}
	holdServerError();
	throw noNodeServed(failures, call.observer?.requestId);
}
