import { DurableObject } from "cloudflare:workers";
import { loadConfig } from "../config";
import { migrate } from "../storage/migrations";
import { type BackgroundJob, type HeldRequest, readHold, readJob } from "./background-job";
import { responseStoreMigrations } from "./response-store-schema";
// Background runs execute here with the same chat pipeline as every other request.
import { runBackground } from "./run-background";
import { releaseHold } from "./run-response";
import { JOB_SEQ } from "./stored-docs";
import { type ConversationRefusal, type Item, RESPONSE_TTL_MS, Turns } from "./turns";

export type { BackgroundJob, HeldRequest } from "./background-job";
export { RESPONSE_TTL_MS } from "./turns";

/** How many background responses of one key run at once; the others wait in the queue. */
export const BACKGROUND_CONCURRENCY = 4;
/** A queue slot reserved and never filled (the request that reserved it died) is freed after this long. */
const RESERVATION_TTL_MS = 5 * 60 * 1000;
/**
 * 1: one `responses` row per response, holding its input twice and every earlier turn again
 * (large ones failed to store), jobs in `jobs`. 2: turns.ts and stored-docs.ts, jobs in `queue`.
 * 3: `item_index` (stored-docs.ts), item id → where the item is, for `item_reference` inputs.
 */

export interface BeginInput {
	id: string;
	previousId: string | null;
	/** Unix milliseconds. */
	createdAt: number;
	/** The response object so far (queued or in_progress, no output yet). */
	response: Item;
	/** This turn's input items. */
	input: Item[];
	/** The largest conversation (earlier turns and this input, as JSON characters) accepted. */
	maxChars: number;
	/** A background response: reserves a queue slot, when fewer than `cap` are reserved, queued or running. */
	job?: { cap: number; job: BackgroundJob };
}

export type BeginResult = { ok: true; history: Item[] } | ConversationRefusal | { ok: false; reason: "queue_full" };

/** The conversation a request continues and the items its input references, in the order referenced. */
export type HistoryResult =
	| { ok: true; history: Item[]; referenced: Item[] }
	| ConversationRefusal
	/** No input or output item the client can see has this id. */
	| { ok: false; reason: "item_not_found"; id: string };

/** What a background run sees of the store: direct calls, it runs inside the object. */
export interface ResponseStoreApi {
	/** The earlier turns and this response's own input; null when it is gone. */
	conversation(id: string): { history: Item[]; input: Item[] } | null;
	/** Marks a queued response in progress; false when it was cancelled or deleted meanwhile. */
	start(id: string): boolean;
	finish(id: string, response: Item): void;
}

type QueueRow = { id: string; state: "reserved" | "queued" | "running"; hold: string | null };

function holdOf(row: { hold: string | null }): HeldRequest | null {
	return readHold(row.hold);
}

/**
 * The stored responses of one API key (turns.ts): only that key's requests reach this object,
 * which is what keeps tenants apart. Background runs execute here, from the alarm, at most
 * BACKGROUND_CONCURRENCY at a time, so they outlive the request that queued them; the queue
 * holds at most the key's `max_queued_responses` (reserved, queued or running).
 */
export class ResponseStore extends DurableObject<Env> {
	private readonly sql: SqlStorage;
	private readonly turns: Turns;
	private readonly running = new Map<string, AbortController>();
	/** Set while the alarm runs jobs: resolved when none run and none are queued. */
	private pool: { done: Promise<void>; resolve: () => void } | undefined;
	private planned = 0;

	constructor(ctx: DurableObjectState, env: Env) {
		super(ctx, env);
		this.sql = ctx.storage.sql;
		this.turns = new Turns(this.sql, (fn) => ctx.storage.transactionSync(fn));
		migrate(ctx.storage, responseStoreMigrations(this.turns));
	}

	/**
	 * Stores a new response with its input (before anything is run or billed) and returns the
	 * conversation it continues. Refuses an unknown previous response, a conversation too large
	 * to store, and a background response over the key's queue cap.
	 */
	begin(input: BeginInput): BeginResult {
		const texts = input.input.map((i) => JSON.stringify(i));
		const checked = this.turns.check(
			input.previousId,
			texts.reduce((n, t) => n + t.length, 0),
			input.maxChars,
		);
		if (!checked.ok) return checked;
		const { job } = input;
		if (job && this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM queue").one().n >= job.cap) {
			return { ok: false, reason: "queue_full" };
		}
		const history = input.previousId ? this.turns.chain(input.previousId) : [];
		const now = Date.now();
		this.turns.create(input.id, input.previousId, input.createdAt, input.response, { items: input.input, texts }, () => {
			if (!job) return;
			this.turns.docs.put(input.id, JOB_SEQ, "job", job.job);
			this.sql.exec("INSERT INTO queue (id, state, since) VALUES (?, 'reserved', ?)", input.id, now);
		});
		if (job) this.scheduleAlarm(now + RESERVATION_TTL_MS);
		this.scheduleAlarm(input.createdAt + RESPONSE_TTL_MS);
		return { ok: true, history };
	}

	/**
	 * The conversation a request continues, with the same checks as `begin` (the referenced items
	 * count towards its size), and the stored items its input references by id (`refs`, in input
	 * order), storing nothing: read before anything is held, so a refusal costs nothing.
	 */
	history(previousId: string | null, inputChars: number, maxChars: number, refs: readonly string[] = []): HistoryResult {
		const located = this.turns.locate(refs, Date.now());
		let chars = inputChars;
		for (const id of refs) chars += located.get(id)?.chars ?? 0;
		const checked = this.turns.check(previousId, chars, maxChars);
		if (!checked.ok) return checked;
		const referenced: Item[] = [];
		for (const id of refs) {
			const at = located.get(id);
			const item = at && this.turns.item(at);
			if (!item) return { ok: false, reason: "item_not_found", id };
			referenced.push(item);
		}
		return { ok: true, history: previousId ? this.turns.chain(previousId) : [], referenced };
	}

	/** Whether the queue already holds `cap` jobs (reserved, queued or running): a cheap check before a hold is placed. */
	queueFull(cap: number): boolean {
		return this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM queue").one().n >= cap;
	}

	/** Fills a reserved queue slot once the hold is placed; false when the slot is gone. */
	commit(id: string, hold: HeldRequest): boolean {
		const filled = this.sql.exec(
			"UPDATE queue SET state = 'queued', hold = ? WHERE id = ? AND state = 'reserved'",
			JSON.stringify(hold),
			id,
		).rowsWritten;
		if (filled === 0) return false;
		if (this.pool) this.pump();
		else this.scheduleAlarm(Date.now());
		return true;
	}

	/** Forgets a response whose request was refused (or failed) before it produced anything. */
	abandon(id: string): void {
		this.sql.exec("DELETE FROM queue WHERE id = ? AND state = 'reserved'", id);
		this.turns.remove(id);
	}

	/** The final response: its output and status. A cancelled or deleted response stays as it is. */
	finish(id: string, response: Item): void {
		this.turns.finish(id, response);
	}

	/** Marks a response failed (its output could not be stored). */
	markFailed(id: string, error: { code: string; message: string }): void {
		this.turns.markFailed(id, error);
	}

	get(id: string, now: number = Date.now()): Item | null {
		return this.turns.get(id, now);
	}

	/** This response's input items (GET …/input_items), oldest first. */
	inputItems(id: string, now: number = Date.now()): Item[] | null {
		return this.turns.inputItems(id, now);
	}

	async delete(id: string): Promise<boolean> {
		if (!this.turns.visible(id, Date.now())) return false;
		const dropped = this.dropQueued(id);
		this.running.get(id)?.abort(new Error("deleted"));
		this.turns.remove(id);
		if (dropped) await this.release(dropped);
		return true;
	}

	/** Cancels a background response: a queued job never starts (its hold is released), a running one is aborted. Null when unknown. */
	async cancel(id: string): Promise<Item | null> {
		const turn = this.turns.visible(id, Date.now());
		if (!turn) return null;
		if (turn.status !== "queued" && turn.status !== "in_progress") return this.get(id);
		const dropped = this.dropQueued(id);
		this.running.get(id)?.abort(new Error("cancelled"));
		this.turns.setStatus(id, "cancelled");
		const response = this.get(id);
		if (dropped) await this.release(dropped);
		return response;
	}

	override async alarm(): Promise<void> {
		this.planned = 0;
		const now = Date.now();
		this.turns.collect(now);
		for (const hold of this.orphans(now)) await this.release(hold);
		// The alarm awaits every run, which keeps the object alive until they end.
		if (this.sql.exec("SELECT 1 FROM queue WHERE state = 'queued' LIMIT 1").toArray().length) await this.drain();
		if (this.sql.exec("SELECT 1 FROM queue WHERE state = 'queued' LIMIT 1").toArray().length) this.scheduleAlarm(Date.now());
		const reserved = this.sql.exec<{ t: number | null }>("SELECT MIN(since) AS t FROM queue WHERE state = 'reserved'").one().t;
		if (reserved !== null) this.scheduleAlarm(reserved + RESERVATION_TTL_MS);
		const expiry = this.turns.nextExpiry();
		if (expiry !== null) this.scheduleAlarm(expiry);
	}

	// ---- the pool of background runs ----

	private drain(): Promise<void> {
		if (!this.pool) {
			let resolve!: () => void;
			const done = new Promise<void>((r) => {
				resolve = r;
			});
			this.pool = { done, resolve };
		}
		const { done } = this.pool;
		this.pump();
		return done;
	}

	/** Starts queued jobs, oldest first, while fewer than BACKGROUND_CONCURRENCY run; ends the pool when none are left. */
	private pump(): void {
		while (this.running.size < BACKGROUND_CONCURRENCY) {
			const next = this.sql
				.exec<QueueRow>("SELECT id, state, hold FROM queue WHERE state = 'queued' ORDER BY since, id LIMIT 1")
				.toArray()[0];
			if (!next) break;
			this.start(next);
		}
		if (this.running.size === 0 && this.pool) {
			const { resolve } = this.pool;
			this.pool = undefined;
			resolve();
		}
	}

	private start(row: QueueRow): void {
		const { id } = row;
		this.sql.exec("UPDATE queue SET state = 'running' WHERE id = ?", id);
		const job = readJob(this.turns.docs.one(id, JOB_SEQ));
		const hold = holdOf(row);
		const controller = new AbortController();
		this.running.set(id, controller);
		const run = job
			? runBackground(this.env, { ...job, hold: hold ?? undefined }, controller.signal, this.api, {
					config: loadConfig(this.env.GATEWAY_CONFIG),
				})
			: Promise.reject(new Error("the job is missing"));
		void run
			.catch(async (err) => {
				console.error(`background response ${id} failed`, err);
				this.turns.markFailed(id, { code: "internal_error", message: "Internal error" });
				// Settling twice is a no-op, so this only frees a hold the run never reached.
				if (hold) await this.release(hold);
			})
			.finally(() => {
				this.running.delete(id);
				this.sql.exec("DELETE FROM queue WHERE id = ?", id);
				this.turns.docs.remove(id, ["job"]);
				this.pump();
			});
	}

	private readonly api: ResponseStoreApi = {
		conversation: (id) => this.turns.conversation(id),
		start: (id) => this.turns.setStatus(id, "in_progress", "queued"),
		finish: (id, response) => this.finish(id, response),
	};

	/** Takes a job that has not started out of the queue; its hold (if placed) is for the caller to release. */
	private dropQueued(id: string): HeldRequest | null {
		const row = this.sql.exec<QueueRow>("SELECT id, state, hold FROM queue WHERE id = ?", id).toArray()[0];
		if (!row || row.state === "running") return null;
		this.sql.exec("DELETE FROM queue WHERE id = ?", id);
		this.turns.docs.remove(id, ["job"]);
		return holdOf(row);
	}

	private async release(hold: HeldRequest): Promise<void> {
		try {
			await releaseHold(this.env, hold);
		} catch (err) {
			console.error(`releasing the hold of ${hold.requestId} failed`, err);
		}
	}

	/**
	 * Jobs marked running that no run of this instance owns (the instance that ran them is
	 * gone: they fail, their holds to be released), and slots reserved by requests that died.
	 */
	private orphans(now: number): HeldRequest[] {
		const held: HeldRequest[] = [];
		const stale = this.sql
			.exec<QueueRow>(
				"SELECT id, state, hold FROM queue WHERE state = 'running' OR (state = 'reserved' AND since < ?)",
				now - RESERVATION_TTL_MS,
			)
			.toArray();
		for (const row of stale) {
			if (this.running.has(row.id)) continue;
			this.sql.exec("DELETE FROM queue WHERE id = ?", row.id);
			this.turns.docs.remove(row.id, ["job"]);
			if (row.state === "reserved") {
				this.turns.remove(row.id, now);
				continue;
			}
			this.turns.markFailed(row.id, { code: "server_error", message: "The background run was interrupted. Please retry." });
			const hold = holdOf(row);
			if (hold) held.push(hold);
		}
		return held;
	}

	/** Moves the alarm earlier when needed (the planned time is kept in memory; an evicted object re-plans on its next write). */
	private scheduleAlarm(at: number): void {
		if (this.planned > 0 && this.planned <= at) return;
		this.planned = at;
		void this.ctx.storage.setAlarm(at);
	}
}
