/**
 * BatchDispatcher: one Durable Object per model (named by its id) runs that model's batch lines
 * into the idle capacity of its fleet, from its alarm (docs/architecture.md says why an object
 * and not a Queue). The lines and their state are its SQLite (line-store.ts); D1 gets each
 * batch's status, counts and cost as they change, for the API and the console.
 *
 * Its public methods are its whole API, for the OpenAI surface (routes/batches.ts) and any other
 * (Anthropic's Message Batches): `submit` a batch of lines from an input file, `cancel` it.
 */
import { DurableObject } from "cloudflare:workers";
import type { Principal } from "../app-env";
import { loadConfig, type ModelConfig, modelNodes } from "../config";
import { batchLineBytes, MAX_BATCH_RESULT_BYTES, MAX_INLINE_RESULT_BYTES } from "../config-batches";
import { batchesStore } from "../db/batches";
import { errorText, logEvent } from "../observability/log-event";
import { isolateFleet } from "../routing/fleet";
import { newMemo, type ProbeMemo, readLoad } from "../routing/probe";
import { probeTargets, readSharedView } from "../routing/shared-view";
import { type FinalizeOptions, fileKey, finalizeBatch, resultKey } from "./finalize";
import { type BatchEndpoint, BatchInputCheck } from "./input";
import { jsonlLines } from "./jsonl";
import { type LineAnswer, runLine } from "./line-runner";
import { LineStore, type QueuedLine, unrunResult } from "./line-store";
import { homeNode, LOAD_READ_MS, type LoadRead, lineLimit, loadIsStale, prefixGroup, roomOn } from "./schedule";

/** How often a dispatcher whose nodes are all busy looks again. */
export const IDLE_POLL_MS = 1000;
/** A read of a node's gauges that takes longer than this is given up (the health check's copy is used). */
const LOAD_READ_TIMEOUT_MS = 1000;
/** Lines inserted per storage transaction while a file is read. */
const INSERT_CHUNK = 500;

export interface BatchSubmit {
	id: string;
	model: string;
	endpoint: BatchEndpoint;
	/** The input file's id (its bytes are in BATCH_FILES), already validated (input.ts). */
	inputFileId: string;
	/** The caller who submitted it and its key id (`callerKeyId`): each line runs as it stands then. */
	principal: Principal;
	callerKeyId: string;
	expiresAt: number;
}

const EXPIRED = unrunResult("batch_expired", "This request could not be executed before the completion window expired.");
const CANCELLED = unrunResult("batch_cancelled", "This request was not executed because the batch was cancelled.");

export class BatchDispatcher extends DurableObject<Env> {
	readonly #lines: LineStore;
	/** Lines this instance runs, by `batch:idx`, with the node each runs on. */
	readonly #running = new Map<string, { node: string; done: Promise<void> }>();
	readonly #abort = new AbortController();
	/** Each node's gauges as this object last read them (schedule.ts `LoadRead`), and what its load endpoint is. */
	readonly #loads = new Map<string, { memo: ProbeMemo; read?: LoadRead; triedAt: number }>();
	#pumping = false;
	/** Finalizes under way, by batch: a second caller waits for the first. */
	readonly #finalizing = new Map<string, Promise<void>>();
	/** What a test sets to page a finalize in small steps (finalize.ts). */
	finalizeOptions: FinalizeOptions = {};

	constructor(ctx: DurableObjectState, env: Env) {
		super(ctx, env);
		this.#lines = new LineStore(ctx.storage.sql, ctx.storage);
	}

	/** Stores a validated batch's lines (read again from its file) and starts dispatching. Idempotent by batch id. */
	async submit(b: BatchSubmit): Promise<{ total: number }> {
		const config = loadConfig(this.env.GATEWAY_CONFIG);
		this.#lines.setMeta("model", b.model);
		if (!this.#lines.hasBatch(b.id)) {
			const object = await this.env.BATCH_FILES.get(fileKey(b.inputFileId));
			if (!object) throw new Error("the batch's input file is gone");
			const check = new BatchInputCheck(b.endpoint);
			let chunk: Array<{ idx: number; customId: string; body: string; grp: string }> = [];
			let idx = 0;
			this.#lines.addBatch({
				id: b.id,
				endpoint: b.endpoint,
				principal: JSON.stringify(b.principal),
				caller_key_id: b.callerKeyId,
				expires_at: b.expiresAt,
			});
			for await (const { text, n } of jsonlLines(object.body, batchLineBytes(config.max_body_bytes))) {
				const line = check.line(text, n);
				if (!line) continue;
				chunk.push({ idx: idx++, ...line, grp: prefixGroup(JSON.parse(line.body)) });
				if (chunk.length >= INSERT_CHUNK) {
					this.#lines.addLines(b.id, chunk);
					chunk = [];
				}
			}
			this.#lines.addLines(b.id, chunk);
		}
		const c = this.#lines.counts(b.id);
		// A cancel that came before or while the lines were stored: they end cancelled, none runs.
		if (this.#lines.meta(`cancel:${b.id}`) !== null || this.#lines.batch(b.id)?.state !== "running") {
			this.#lines.setState(b.id, "cancelling");
			this.#lines.endQueued(b.id, CANCELLED);
			await batchesStore(this.env.DB).progress(b.id, {
				status: "cancelling",
				total: c.total,
				completed: 0,
				failed: 0,
				costNanos: 0,
			});
			await this.#endIfIdle(b.id, b.callerKeyId);
			return { total: c.total };
		}
		await batchesStore(this.env.DB).progress(b.id, {
			status: "in_progress",
			total: c.total,
			completed: 0,
			failed: 0,
			costNanos: 0,
		});
		await this.ctx.storage.setAlarm(Date.now());
		return { total: c.total };
	}

	/** Stops dispatching a batch's lines: the queued ones end cancelled, the running ones finish; then it ends `cancelled`. */
	async cancel(batchId: string, keyId: string): Promise<void> {
		const b = this.#lines.batch(batchId);
		if (!b) {
			// Still validating (its submit on its way): kept for the submit, which ends its lines cancelled.
			this.#lines.setMeta(`cancel:${batchId}`, "1");
			await batchesStore(this.env.DB).setStatus(batchId, "cancelling", Date.now());
			return;
		}
		if (b.state !== "running") return;
		this.#lines.setState(batchId, "cancelling");
		this.#lines.endQueued(batchId, CANCELLED);
		await batchesStore(this.env.DB).setStatus(batchId, "cancelling", Date.now());
		await this.#endIfIdle(batchId, keyId);
	}

	override async alarm(): Promise<void> {
		// A watchdog: a run cut short (the object restarted mid-batch) is picked up again.
		await this.ctx.storage.setAlarm(Date.now() + 60_000);
		this.#lines.requeueOrphans(new Set(this.#running.keys()));
		await this.#pump();
		if (this.#lines.hasQueued()) await this.ctx.storage.setAlarm(Date.now() + IDLE_POLL_MS);
		else if (this.#running.size === 0 && this.#lines.batches().length === 0) await this.ctx.storage.deleteAlarm();
	}

	/** Starts lines while nodes have room, and waits for them; returns when none runs (or another pump runs). */
	async #pump(): Promise<void> {
		if (this.#pumping) return;
		this.#pumping = true;
		try {
			for (;;) {
				await this.#endDue();
				await this.#fill();
				if (this.#running.size === 0) return;
				// A line's end frees a slot; a node that went idle meanwhile is seen within the poll.
				let timer: ReturnType<typeof setTimeout> | undefined;
				const poll = new Promise<void>((resolve) => {
					timer = setTimeout(resolve, IDLE_POLL_MS);
				});
				await Promise.race([poll, ...[...this.#running.values()].map((r) => r.done)]);
				clearTimeout(timer);
			}
		} finally {
			this.#pumping = false;
		}
	}

	/** Expires batches past their window; ends the batches with nothing left to run. */
	async #endDue(): Promise<void> {
		const now = Date.now();
		for (const b of this.#lines.batches()) {
			const keyId = (JSON.parse(b.principal) as Principal).key.id;
			if (b.state === "running" && now >= b.expires_at) {
				this.#lines.setState(b.id, "expiring");
				this.#lines.endQueued(b.id, EXPIRED);
			}
			await this.#endIfIdle(b.id, keyId);
		}
	}

	async #endIfIdle(batchId: string, keyId: string): Promise<void> {
		const b = this.#lines.batch(batchId);
		if (!b) return;
		const c = this.#lines.counts(batchId);
		if (c.running > 0 || c.pending > 0) return;
		const status = b.state === "cancelling" ? "cancelled" : b.state === "expiring" ? "expired" : "completed";
		const running = this.#finalizing.get(batchId);
		if (running) return running;
		// The watchdog: a finalize cut short by a restart is resumed by the next alarm.
		if ((await this.ctx.storage.getAlarm()) === null) await this.ctx.storage.setAlarm(Date.now() + 60_000);
		const run = finalizeBatch(this.env, this.#lines, { id: batchId, keyId }, status, this.finalizeOptions).finally(() =>
			this.#finalizing.delete(batchId),
		);
		this.#finalizing.set(batchId, run);
		return run;
	}

	/** Places queued lines on nodes with room. */
	async #fill(): Promise<void> {
		const modelId = this.#lines.meta("model");
		const config = loadConfig(this.env.GATEWAY_CONFIG);
		const model = config.models.find((m) => m.id === modelId);
		if (!model || !this.#lines.hasQueued()) return;
		await this.#refreshView(config);
		const nodes = modelNodes(model).map((node) => {
			const view = isolateFleet.nodeView(model.id, node);
			const limit = lineLimit(config.batches.max_in_flight_per_node, node.maxNumSeqs ?? view.slots);
			return { node, view, limit, lines: this.#linesOn(node.url) };
		});
		await this.#readLoads(
			config,
			nodes.filter((n) => n.lines < n.limit && n.view.weight > 0).map((n) => n.node.url),
		);
		const now = Date.now();
		for (const { node, view, limit, lines } of nodes) {
			let room = roomOn(view, lines, limit, now, this.#loads.get(node.url)?.read);
			while (room > 0) {
				const line = this.#next(model, node.url);
				if (!line) break;
				this.#start(line, node.url);
				room--;
			}
		}
	}

	#linesOn(url: string): number {
		let n = 0;
		for (const r of this.#running.values()) if (r.node === url) n++;
		return n;
	}

	/**
	 * Reads the engine gauges of the nodes that may get lines, when this object's last read of a node
	 * is LOAD_READ_MS old (schedule.ts): the health check's copy may be `health_check_interval_ms`
	 * old, and a line placed on a stale "nothing waiting" makes interactive requests queue. A node
	 * whose read fails is placed on the health check's copy.
	 */
	async #readLoads(config: ReturnType<typeof loadConfig>, urls: string[]): Promise<void> {
		const now = Date.now();
		const targets = probeTargets(config);
		const deps = {
			fetch: (input: RequestInfo | URL, init?: RequestInit) => fetch(input, init),
			secrets: this.env,
			timeoutMs: LOAD_READ_TIMEOUT_MS,
			now: Date.now,
		};
		await Promise.all(
			urls.map(async (url) => {
				let entry = this.#loads.get(url);
				if (!entry) {
					entry = { memo: newMemo(), triedAt: Number.NEGATIVE_INFINITY };
					this.#loads.set(url, entry);
				}
				// A node whose last read failed is asked again no sooner than one that answered.
				if (!loadIsStale(entry.read, now) || now - entry.triedAt < LOAD_READ_MS) return;
				entry.triedAt = now;
				const lines = this.#linesOn(url);
				const target = targets.find((t) => t.url === url) ?? { url };
				try {
					const load = await readLoad(target, entry.memo, deps);
					entry.read = load
						? {
								at: Date.now(),
								waiting: load.waiting ?? 0,
								running: load.running ?? 0,
								kvCacheUsage: load.kv_cache_usage ?? 0,
								lines,
							}
						: undefined;
				} catch (err) {
					entry.read = undefined;
					logEvent("warn", "batch dispatcher: reading a node's load failed", { error: errorText(err) });
				}
			}),
		);
	}

	/**
	 * The next line for `node`: first of a group whose home it is (its prefix is cached there), else
	 * of the oldest group; a line that failed on this node waits for another while one it has not
	 * tried is left.
	 */
	#next(model: ModelConfig, node: string): QueuedLine | null {
		const nodes = modelNodes(model);
		const groups = this.#lines.queuedGroups(64);
		const own = groups.filter((g) => homeNode(g, nodes)?.url === node);
		for (const grp of [...own, ...groups.filter((g) => !own.includes(g))]) {
			for (const line of this.#lines.nextInGroup(grp, 16)) {
				const tried = JSON.parse(line.tried) as string[];
				if (!tried.includes(node) || nodes.every((n) => tried.includes(n.url))) return line;
			}
		}
		return null;
	}

	/**
	 * Reads the fleet's shared view (NodeHealth: probes, engine load) before placing lines: one small
	 * RPC per round, so a line never goes to a node on a view older than its last probe.
	 */
	async #refreshView(config: ReturnType<typeof loadConfig>): Promise<void> {
		try {
			isolateFleet.ingest(await readSharedView(this.env, config));
		} catch (err) {
			logEvent("warn", "batch dispatcher: reading the fleet view failed", { error: errorText(err) });
		}
	}

	#start(line: QueuedLine, node: string): void {
		const key = `${line.batch_id}:${line.idx}`;
		this.#lines.markRunning(line.batch_id, line.idx, node);
		const batch = this.#lines.batch(line.batch_id);
		if (!batch) return;
		const principal = JSON.parse(batch.principal) as Principal;
		const config = loadConfig(this.env.GATEWAY_CONFIG);
		const run = runLine(
			this.env,
			config,
			{
				batchId: line.batch_id,
				customId: line.custom_id,
				endpoint: batch.endpoint as BatchEndpoint,
				body: line.body,
				requestId: `${line.batch_id}-${line.idx}-${line.attempt}`,
				node,
				principal,
				callerKeyId: batch.caller_key_id,
			},
			this.#abort.signal,
		);
		const done = run
			.then((answer) => this.#record(line, node, answer, config.routing.max_attempts, principal.key.id))
			.catch((err) => logEvent("error", "batch line failed", { batch_id: line.batch_id, error: errorText(err) }))
			.finally(() => this.#running.delete(key));
		this.#running.set(key, { node, done });
	}

	/**
	 * Stores a line's result: in its SQLite row up to MAX_INLINE_RESULT_BYTES (a row holds 2 MB),
	 * in R2 (the row keeping its key) up to MAX_BATCH_RESULT_BYTES; a larger one is an error line
	 * `result_too_large`, its cost what the run settled: never a row that fails to store and a line that runs again.
	 */
	async #finish(line: QueuedLine, state: "ok" | "error", result: string, cost: number): Promise<void> {
		const bytes = new TextEncoder().encode(result);
		if (bytes.length <= MAX_INLINE_RESULT_BYTES) {
			this.#lines.finish(line.batch_id, line.idx, state, result, cost);
		} else if (bytes.length <= MAX_BATCH_RESULT_BYTES) {
			const key = resultKey(line.batch_id, line.idx);
			await this.env.BATCH_FILES.put(key, bytes);
			this.#lines.finishStored(line.batch_id, line.idx, state, key, bytes.length, cost);
		} else {
			const error = {
				code: "result_too_large",
				message: `This request's result was ${bytes.length} bytes, over the batch lane's ${MAX_BATCH_RESULT_BYTES}; it is not kept.`,
			};
			this.#lines.finish(line.batch_id, line.idx, "error", `"response":null,"error":${JSON.stringify(error)}`, cost);
		}
	}

	/** Stores the line's result (after its settlement), or queues another attempt; updates the batch's progress in D1. */
	async #record(line: QueuedLine, node: string, a: LineAnswer, maxAttempts: number, keyId: string): Promise<void> {
		const requestId = `${line.batch_id}-${line.idx}-${line.attempt}`;
		// A batch cancelled or expired meanwhile runs nothing more: its failed line is written as it ended, not queued again.
		const running = this.#lines.batch(line.batch_id)?.state === "running";
		if (a.retryable && running && line.attempt + 1 < maxAttempts) {
			this.#lines.retry(line.batch_id, line.idx, node, a.costNanos);
		} else if (a.status === 200) {
			const result = `"response":{"status_code":200,"request_id":${JSON.stringify(requestId)},"body":${JSON.stringify(a.body)}},"error":null`;
			await this.#finish(line, "ok", result, a.costNanos);
		} else if (a.code === "insufficient_balance") {
			const error = { code: "insufficient_quota", message: "The key's balance could not cover this request; it was not run." };
			this.#lines.finish(line.batch_id, line.idx, "error", `"response":null,"error":${JSON.stringify(error)}`, a.costNanos);
		} else {
			const response = { status_code: a.status, request_id: requestId, body: a.body };
			await this.#finish(line, "error", `"response":${JSON.stringify(response)},"error":null`, a.costNanos);
		}
		const c = this.#lines.counts(line.batch_id);
		await batchesStore(this.env.DB).progress(line.batch_id, { completed: c.completed, failed: c.failed, costNanos: c.cost });
		await this.#endIfIdle(line.batch_id, keyId);
	}
}
