/** Why an engine call ended without an answer, as the client sees it; the details go to the log. */
import { GatewayError } from "../errors";
import { hostOf, logEvent } from "../observability/log-event";
import { requestDeadlineError } from "./attempt-timer";

export interface NodeFailure {
	node: string;
	model: string;
	reason: string;
	status?: number;
}

function logFailures(failures: NodeFailure[], requestId: string | undefined): void {
	for (const f of failures) {
		logEvent("warn", "engine node failed", {
			request_id: requestId ?? null,
			node: hostOf(f.node),
			model: f.model,
			reason: f.reason,
		});
	}
}

/** The request's overall deadline passed before any node answered: 504, whatever the nodes did. */
export function deadlinePassed(failures: NodeFailure[], requestId: string | undefined): GatewayError {
	logFailures(failures, requestId);
	logEvent("warn", "request deadline passed before an engine answered", { request_id: requestId ?? null });
	return requestDeadlineError();
}

/** Why nothing answered, as the client sees it; the details go to the log. */
export function noNodeServed(failures: NodeFailure[], requestId: string | undefined): GatewayError {
	logFailures(failures, requestId);
	// Every node timed out before answering: the same 504 an engine going quiet later gets.
	if (failures.length > 0 && failures.every((f) => f.reason === "timeout")) {
		return new GatewayError("upstream_timeout", "No inference node answered in time. Please retry shortly.");
	}
	// 503 when every node said it was busy (overloaded, rate limited) or every node is drained;
	// 502 when they were broken or unreachable.
	const allBusy = failures.every((f) => f.status === 429 || f.status === 503);
	return new GatewayError("upstream_unavailable", "No inference node could serve this request. Please retry shortly.", {
		status: allBusy ? 503 : 502,
		headers: allBusy ? { "retry-after": "1" } : {},
	});
}
