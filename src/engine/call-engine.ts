import type { EngineNode } from "../config";
import { GatewayError } from "../errors";
import { classifyStatus, parseEngineError } from "./classify";
import { readCapped, relayText } from "./relay-text";

export interface EngineCall {
	nodes: EngineNode[];
	/** Path under the node's /v1 base, e.g. "/chat/completions". */
	path: string;
	body: string;
	/** Secrets by name, for nodes that configure `api_key_env`. */
	secrets: Record<string, unknown>;
	/** Aborts the engine request when the client goes away. */
	clientSignal?: AbortSignal;
	firstByteTimeoutMs: number;
}

export interface EngineAnswer {
	response: Response;
	node: string;
	/** Aborts the engine request (used when the client disconnects mid-stream). */
	abort: (reason?: unknown) => void;
}

interface NodeFailure {
	node: string;
	reason: string;
	status?: number;
}

/** The secrets this call may send to its nodes: never to be relayed back to the client. */
function nodeSecrets(call: EngineCall): string[] {
	const out: string[] = [];
	for (const node of call.nodes) {
		const v = node.apiKeyEnv ? call.secrets[node.apiKeyEnv] : undefined;
		if (typeof v === "string" && v) out.push(v);
	}
	return out;
}

/**
 * Calls the nodes in order until one answers 2xx. Connection errors, first-byte timeouts,
 * 5xx and 429 move on to the next node (the failed body is cancelled first, since a Worker
 * has only six outbound connections); any other 4xx is the engine refusing the request and
 * goes back to the client with its status and message, not retried.
 */
export async function callEngine(call: EngineCall): Promise<EngineAnswer> {
	const failures: NodeFailure[] = [];
	for (const node of call.nodes) {
		if (call.clientSignal?.aborted) throw new GatewayError("client_closed", "The client closed the request");
		const controller = new AbortController();
		const onClientAbort = () => controller.abort(call.clientSignal?.reason);
		call.clientSignal?.addEventListener("abort", onClientAbort, { once: true });
		const timer = setTimeout(() => controller.abort(new Error("first byte timeout")), call.firstByteTimeoutMs);
		const headers: Record<string, string> = { "content-type": "application/json", accept: "application/json, text/event-stream" };
		const key = node.apiKeyEnv ? call.secrets[node.apiKeyEnv] : undefined;
		if (typeof key === "string" && key) headers.authorization = `Bearer ${key}`;
		let response: Response;
		try {
			response = await fetch(`${node.url}${call.path}`, {
				method: "POST",
				headers,
				body: call.body,
				redirect: "manual",
				signal: controller.signal,
			});
		} catch (err) {
			clearTimeout(timer);
			call.clientSignal?.removeEventListener("abort", onClientAbort);
			if (call.clientSignal?.aborted) throw new GatewayError("client_closed", "The client closed the request", { cause: err });
			failures.push({ node: node.url, reason: controller.signal.aborted ? "timeout" : `connection failed: ${String(err)}` });
			continue;
		}
		clearTimeout(timer);
		const verdict = classifyStatus(response.status);
		if (verdict === "ok") {
			return { response, node: node.url, abort: (reason) => controller.abort(reason) };
		}
		call.clientSignal?.removeEventListener("abort", onClientAbort);
		if (verdict === "next") {
			await response.body?.cancel().catch(() => {});
			failures.push({ node: node.url, reason: `status ${response.status}`, status: response.status });
			continue;
		}
		const info = parseEngineError(await readCapped(response));
		const secrets = nodeSecrets(call);
		throw new GatewayError("engine_refused", relayText(info.message, secrets), {
			status: response.status,
			param: info.param === null ? null : relayText(info.param, secrets, 200),
			code: info.code === null ? null : relayText(info.code, secrets, 100),
			type: info.type && /^[a-z_]{1,64}$/.test(info.type) ? info.type : "invalid_request_error",
		});
	}
	for (const f of failures) console.warn(`engine node ${f.node} failed: ${f.reason}`);
	// Every node timed out before answering: the same 504 an engine going quiet later gets.
	if (failures.length > 0 && failures.every((f) => f.reason === "timeout")) {
		throw new GatewayError("upstream_timeout", "No inference node answered in time. Please retry shortly.");
	}
	// 503 when every node said it was busy (overloaded, rate limited); 502 when they were broken or unreachable.
	const allBusy = failures.length > 0 && failures.every((f) => f.status === 429 || f.status === 503);
	throw new GatewayError("upstream_unavailable", "No inference node could serve this request. Please retry shortly.", {
		status: allBusy ? 503 : 502,
		headers: allBusy ? { "retry-after": "1" } : {},
	});
}
