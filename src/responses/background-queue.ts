/**
 * The queue of one key's background responses and the pool that runs them, inside the
 * ResponseStore: at most BACKGROUND_CONCURRENCY run at once, oldest first. A slot is reserved
 * when the response is stored, filled with its hold once the hold is placed, and removed when
 * the run ends, is cancelled, or its owner is gone.
 */
import { loadConfig } from "../config";
import { errorText, logEvent } from "../observability/log-event";
import { releaseStoredHold } from "../settlement/settlement";
import { type BackgroundJob, type HeldRequest, readHold, readJob } from "./background-job";
import { runBackground } from "./run-background";
import type { ResponseStoreApi } from "./store-api";
import { JOB_SEQ } from "./stored-docs";
import type { Turns } from "./turns";

/** How many background responses of one key run at once; the others wait in the queue. */
export const BACKGROUND_CONCURRENCY = 4;
/** A queue slot reserved and never filled (the request that reserved it died) is freed after this long. */
export const RESERVATION_TTL_MS = 5 * 60 * 1000;

type QueueRow = { id: string; state: "reserved" | "queued" | "running"; hold: string | null };

export class BackgroundQueue {
	private readonly running = new Map<string, AbortController>();
	/** Set while the alarm runs jobs: resolved when none run and none are queued. */
	private pool: { done: Promise<void>; resolve: () => void } | undefined;

	constructor(
		private readonly env: Env,
		private readonly sql: SqlStorage,
		private readonly turns: Turns,
		private readonly api: ResponseStoreApi,
		/** Asks the store for an alarm at this time (the store keeps one alarm for everything). */
		private readonly wakeAt: (at: number) => void,
		/** A job with a hold left the queue (ended, cancelled, deleted or orphaned); `caller` is the key that queued it. */
		private readonly onLeave: (id: string, hold: HeldRequest, caller: string) => void = () => {},
	) {}

	/** Whether a job with this id is reserved, queued or running. */
	has(id: string): boolean {
		return this.sql.exec("SELECT 1 FROM queue WHERE id = ?", id).toArray().length > 0;
	}

	/** Takes a job's row and document out of the queue and reports it to `onLeave`. */
	private forget(id: string, hold: HeldRequest | null): void {
		const job = readJob(this.turns.docs.one(id, JOB_SEQ));
		this.sql.exec("DELETE FROM queue WHERE id = ?", id);
		this.turns.docs.remove(id, ["job"]);
		if (hold && job) this.onLeave(id, hold, job.callerKeyId);
	}

	/** Jobs reserved, queued or running. */
	size(): number {
		return this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM queue").one().n;
	}

	/** Reserves a slot for a response being stored (call inside the store's write). */
	reserve(id: string, job: BackgroundJob, now: number): void {
		this.turns.docs.put(id, JOB_SEQ, "job", job);
		this.sql.exec("INSERT INTO queue (id, state, since) VALUES (?, 'reserved', ?)", id, now);
	}

	/** Fills a reserved slot once the hold is placed; false when the slot is gone. */
	commit(id: string, hold: HeldRequest): boolean {
		const filled = this.sql.exec(
			"UPDATE queue SET state = 'queued', hold = ? WHERE id = ? AND state = 'reserved'",
			JSON.stringify(hold),
			id,
		).rowsWritten;
		if (filled === 0) return false;
		if (this.pool) this.pump();
		else this.wakeAt(Date.now());
		return true;
	}

	/** Frees a slot whose request was refused before its hold was placed. */
	unreserve(id: string): void {
		this.sql.exec("DELETE FROM queue WHERE id = ? AND state = 'reserved'", id);
	}

	/** Takes a job out of the queue and aborts it if it runs; returns a hold nothing will settle (the caller releases it). */
	stop(id: string, reason: string): HeldRequest | null {
		const dropped = this.dropQueued(id);
		this.running.get(id)?.abort(new Error(reason));
		return dropped;
	}

	/** Gives back a hold that will never be used; never throws. */
	async release(hold: HeldRequest): Promise<void> {
		try {
			await releaseStoredHold(this.env, hold);
		} catch (err) {
			logEvent("error", "releasing the hold failed", { request_id: hold.requestId, error: errorText(err) });
		}
	}

	/**
	 * The alarm's part: releases the holds of orphaned jobs, runs queued jobs until none are left
	 * (the alarm awaits this, which keeps the object alive), and asks for the next wake-up.
	 */
	async onAlarm(now: number): Promise<void> {
		for (const hold of this.orphans(now)) await this.release(hold);
		if (this.hasQueued()) await this.drain();
		if (this.hasQueued()) this.wakeAt(Date.now());
		const reserved = this.sql.exec<{ t: number | null }>("SELECT MIN(since) AS t FROM queue WHERE state = 'reserved'").one().t;
		if (reserved !== null) this.wakeAt(reserved + RESERVATION_TTL_MS);
	}

	private hasQueued(): boolean {
		return this.sql.exec("SELECT 1 FROM queue WHERE state = 'queued' LIMIT 1").toArray().length > 0;
	}

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
		const hold = readHold(row.hold);
		const controller = new AbortController();
		this.running.set(id, controller);
		const run = job
			? runBackground(
					this.env,
					{ ...job, hold: hold ?? undefined },
					controller.signal,
					this.api,
					loadConfig(this.env.GATEWAY_CONFIG),
				)
			: Promise.reject(new Error("the job is missing"));
		void run
			.catch(async (err) => {
				logEvent("error", "background response failed", {
					request_id: job?.requestId ?? null,
					response_id: id,
					error: errorText(err),
				});
				this.turns.markFailed(id, { code: "internal_error", message: "Internal error" });
				// Settling twice is a no-op, so this only frees a hold the run never reached.
				if (hold) await this.release(hold);
			})
			.finally(() => {
				this.running.delete(id);
				this.forget(id, hold);
				this.pump();
			});
	}

	/** Takes a job that has not started out of the queue; its hold (if placed) is for the caller to release. */
	private dropQueued(id: string): HeldRequest | null {
		const row = this.sql.exec<QueueRow>("SELECT id, state, hold FROM queue WHERE id = ?", id).toArray()[0];
		if (!row || row.state === "running") return null;
		const hold = readHold(row.hold);
		this.forget(id, hold);
		return hold;
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
			const hold = readHold(row.hold);
			this.forget(row.id, hold);
			if (row.state === "reserved") {
				this.turns.remove(row.id, now);
				continue;
			}
			this.turns.markFailed(row.id, { code: "server_error", message: "The background run was interrupted. Please retry." });
			if (hold) held.push(hold);
		}
		return held;
	}
}
