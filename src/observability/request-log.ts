/**
 * The one structured log line of a finished inference request. A `RequestLog` is made when the
 * request arrives (app.ts) and each layer notes what it learns: the route what was asked, the
 * engine call its attempts and first byte, settlement the outcome, tokens and cost. It is
 * written once, as `console.log(JSON.stringify(line))`: for a stream when the stream ends
 * (settlement), otherwise just after the response has gone out. Nothing of the body is kept but the model
 * id and the stream flag; nodes are kept as their host only.
 */
import { nanosToUsd } from "../money/pricing";
import type { Route } from "../routing/picker";
import type { Outcome, SettleStatus } from "../types";
import { hostOf } from "./log-event";
import { type GenAiOperation, type Lane, type LegacyLogFields, OPERATIONS, PROVIDER_NAME, serverOf } from "./log-names";
import { GatewayClock } from "./overhead";
import type { Refusal } from "./refusals";

export type { GenAiOperation, Lane, LegacyLogFields } from "./log-names";
export { PROVIDER_NAME } from "./log-names";

/**
 * How the request ended: settlement's status when money was held; `refused` when a check (or
 * the queue) turned it away before anything ran; `queued` for an accepted background response
 * (its run writes a line of its own, with the same request id).
 */
export type LogOutcome = SettleStatus | "refused" | "queued";

/**
 * The line, field by field (docs/operations.md "Logs"). Where an OpenTelemetry semantic
 * convention names a field (GenAI, HTTP, server, error), the line uses that name, so an OTLP
 * export carries each field as the attribute a collector already knows; the rest keep the
 * gateway's own names.
 */
export interface RequestLogLine {
	message: "request";
	request_id: string;
	/** The paying key (a `vk-tmp-` token's parent); null before authentication. */
	key_id: string | null;
	/** `chat`, `text_completion` or `embeddings` (Responses and Messages are `chat`). */
	"gen_ai.operation.name": GenAiOperation;
	/** Always `venym`: the gateway is the provider its clients see; the engine is `server.address`. */
	"gen_ai.provider.name": typeof PROVIDER_NAME;
	/** The `model` the client sent (`:online` included). */
	"gen_ai.request.model": string | null;
	/** The catalog model that served and was billed (a fallback's id when one served); null when refused before a hold. */
	"gen_ai.response.model": string | null;
	lane: Lane;
	/** The client asked for a stream. */
	stream: boolean;
	/** HTTP status (200 for a stream, however it ended). */
	"http.response.status_code": number;
	outcome: LogOutcome;
	/** The error's `code` when the answer was an error (`insufficient_balance`, `upstream_unavailable`, …). */
	"error.type": string | null;
	/** Host of the node that answered, else of the last one tried; null when none was. */
	"server.address": string | null;
	/** That node's port, when its URL names one. */
	"server.port": number | null;
	/** Engine attempts across nodes and fallback models. */
	attempts: number;
	/**
	 * How the last node tried was chosen: `affinity` (the conversation's own node), `spill` (its own
	 * node was full: the next of its order), `balanced` (by load: no affinity key, or no node free); null when none was.
	 */
	route: Route | null;
	/** From the request's arrival to the headers of the engine answer used (or refusal relayed); null when none came. */
	ttfb_ms: number | null;
	/** From the request's arrival to its end (a stream's last byte). */
	duration_ms: number;
	/** The gateway's own time, engine and search waits left out: the `x-venym-overhead-ms` the client got (overhead.ts). */
	overhead_ms: number;
	"gen_ai.usage.input_tokens": number;
	"gen_ai.usage.output_tokens": number;
	/** Some of the usage was the gateway's estimate. */
	estimated: boolean;
	/** What settlement debited, in USD (web search included). */
	cost_usd: number;
	/** The `x-venym-web-search` status (`ok`, `empty`, `failed`, …); null when search was not asked for. */
	web_search: string | null;
}

/** The fields of a RequestContext (ledger-client) the line takes from settlement. */
interface Settled {
	payerKeyId: string;
	/** The catalog model that served (a fallback's once one did). */
	model: { id: string };
	/** The id the client sent (`:online` included), or the serving fallback's. */
	requestedModel: string;
	/** Set when a fallback served: the id the client sent. */
	fallbackFrom?: string;
}

const LANES: Record<string, Lane> = {
	"/v1/chat/completions": "chat",
	"/v1/completions": "completions",
	"/v1/embeddings": "embeddings",
	"/v1/responses": "responses",
	"/v1/messages": "messages",
};

/** The inference lane of a request, or undefined for every other route (those get no line). */
export function laneOf(method: string, path: string): Lane | undefined {
	if (method !== "POST") return undefined;
	// The Gemini API's generation methods: `/v1beta/models/{model}:generateContent` and its stream.
	if (path.startsWith("/v1beta/models/") && /:(stream)?generateContent$/i.test(path)) return "gemini";
	return LANES[path];
}

export class RequestLog {
	readonly requestId: string;
	readonly lane: Lane;
	/** The paying key (the line's `key_id`). */
	payerKeyId: string | null = null;
	model: string | null = null;
	requestedModel: string | null = null;
	stream = false;
	webSearch: string | null = null;
	/** The request's own time against its engine and search waits (`overhead_ms`). */
	readonly clock: GatewayClock;
	private node: string | null = null;
	private attempts = 0;
	private route: Route | null = null;
	private ttfbMs: number | null = null;
	private outcome: Outcome | null = null;
	private costNanos = 0;
	private error: { code: string | null; status: number; message: string | null } | null = null;
	private isQueued = false;
	private isStreaming = false;
	private written = false;
	private resolveSettled!: () => void;
	private readonly settledOnce = new Promise<void>((resolve) => {
		this.resolveSettled = resolve;
	});

	/** `clock`: the request's (app.ts); a background run, which has no request of its own, starts one. */
	constructor(requestId: string, lane: Lane, clock = new GatewayClock()) {
		this.requestId = requestId;
		this.lane = lane;
		this.clock = clock;
	}

	private get startedAt(): number {
		return this.clock.startedAt;
	}

	/** An engine attempt's fetch was sent: the wait lasts until `engineEnded` (its body read, or its failure). */
	engineStarted(): void {
		this.clock.waitBegin();
	}

	engineEnded(): void {
		this.clock.waitEnd();
	}

	/** What the client asked for, from its parsed body: the model id and the stream flag, nothing else. */
	asked(body: unknown): void {
		if (body === null || typeof body !== "object") return;
		const { model, stream } = body as { model?: unknown; stream?: unknown };
		if (typeof model === "string") this.requestedModel = model.slice(0, 256);
		this.stream = stream === true;
	}

	/** An engine attempt on `node` (a URL; only its host is kept). */
	attempt(node: string, route?: Route): void {
		this.attempts += 1;
		this.node = hostOf(node);
		this.route = route ?? null;
	}

	/** `node` sent the headers of the answer the client gets. */
	answered(node: string): void {
		this.node = hostOf(node);
		this.ttfbMs = Date.now() - this.startedAt;
	}

	/** Settlement's outcome and what it debits: called once, when the request's end is known. */
	settled(req: Settled, outcome: Outcome, costNanos: number): void {
		this.payerKeyId = req.payerKeyId;
		this.model = req.model.id;
		this.requestedModel = req.fallbackFrom ?? req.requestedModel;
		if (outcome.node) this.node = hostOf(outcome.node);
		this.outcome = outcome;
		this.costNanos = costNanos;
		this.resolveSettled();
	}

	/** The answer was an error (app.onError): its code, status and the message the client got. */
	failed(code: string | null, status: number, message: string | null = null): void {
		this.error = { code, status, message };
	}

	/** What the console's refused requests keep of this request, when a check refused it; else null. */
	refusal(status: number): Refusal | null {
		if (this.outcomeOf(status) !== "refused") return null;
		return {
			requestId: this.requestId,
			status,
			code: this.error?.code ?? null,
			message: this.error?.message ?? null,
			lane: this.lane,
			keyId: this.payerKeyId,
			model: this.requestedModel,
		};
	}

	/** A background response was accepted: its run, later, writes the line of how it ended. */
	queued(): void {
		this.isQueued = true;
	}

	/** The answer is a stream: the request ends when the stream does, which settlement marks. */
	streaming(): void {
		this.isStreaming = true;
	}

	/** For a stream, resolves when it has ended (settled); undefined when the request ends with its response. */
	ended(): Promise<void> | undefined {
		return this.isStreaming ? this.settledOnce : undefined;
	}

	line(status: number): RequestLogLine & LegacyLogFields {
		const usage = this.outcome?.usage;
		const server = serverOf(this.node);
		const inputTokens = usage?.prompt_tokens ?? 0;
		const outputTokens = usage?.completion_tokens ?? 0;
		const errorType = this.error?.code ?? null;
		return {
			message: "request",
			request_id: this.requestId,
			key_id: this.payerKeyId,
			"gen_ai.operation.name": OPERATIONS[this.lane],
			"gen_ai.provider.name": PROVIDER_NAME,
			"gen_ai.request.model": this.requestedModel,
			"gen_ai.response.model": this.model,
			lane: this.lane,
			stream: this.stream,
			"http.response.status_code": status,
			outcome: this.outcomeOf(status),
			"error.type": errorType,
			"server.address": server.address,
			"server.port": server.port,
			attempts: this.attempts,
			route: this.route,
			ttfb_ms: this.ttfbMs,
			duration_ms: Math.max(0, Date.now() - this.startedAt),
			overhead_ms: this.clock.overheadMs(),
			"gen_ai.usage.input_tokens": inputTokens,
			"gen_ai.usage.output_tokens": outputTokens,
			estimated: this.outcome?.estimated ?? false,
			cost_usd: nanosToUsd(this.costNanos),
			web_search: this.webSearch,
			model: this.model,
			requested_model: this.requestedModel,
			status,
			error_code: errorType,
			node: this.node,
			prompt_tokens: inputTokens,
			completion_tokens: outputTokens,
		};
	}

	/** Writes the line, once (a second call does nothing). */
	write(status: number): void {
		if (this.written) return;
		this.written = true;
		console.log(JSON.stringify(this.line(status)));
	}

	private outcomeOf(status: number): LogOutcome {
		if (this.outcome) return this.outcome.status;
		if (this.error?.code === "client_closed_request") return "client_disconnected";
		if (status >= 500) return "failed";
		if (status >= 400) return "refused";
		return this.isQueued ? "queued" : "completed";
	}
}
