import { DurableObject } from "cloudflare:workers";

/** Stored responses live this long (OpenAI keeps them for 30 days). */
export const RESPONSE_TTL_MS = 30 * 24 * 60 * 60 * 1000;

export interface StoredResponse {
	id: string;
	/** The Response object as last seen by the client (status, output, usage…). */
	response: Record<string, unknown>;
	/** This turn's input, in item form with ids (GET …/input_items). */
	inputItems: Record<string, unknown>[];
	/** The whole conversation up to and including this turn's output, for previous_response_id. */
	contextItems: Record<string, unknown>[];
	createdAt: number;
}

/** A background run waiting for (or under) the alarm. */
export interface BackgroundJob {
	id: string;
	requestId: string;
	keyId: string;
	/** What the runner needs to redo the request (the validated Responses request and history). */
	payload: Record<string, unknown>;
}

export interface ResponseStoreApi {
	put(record: StoredResponse): void;
	get(id: string): StoredResponse | null;
}

export type BackgroundRunner = (env: Env, job: BackgroundJob, signal: AbortSignal, store: ResponseStoreApi) => Promise<void>;

let runner: BackgroundRunner | undefined;

/** The worker registers how a background job runs (the chat pipeline), keeping this class free of route code. */
export function registerBackgroundRunner(fn: BackgroundRunner): void {
	runner = fn;
}

/**
 * The stored responses of one API key: only that key's requests reach this object, which is
 * what keeps tenants apart. Background runs execute here, from the alarm, so they outlive the
 * request that started them; cancel aborts a running job or drops a queued one.
 */
export class ResponseStore extends DurableObject<Env> {
	private readonly sql: SqlStorage;
	private readonly running = new Map<string, AbortController>();

	constructor(ctx: DurableObjectState, env: Env) {
		super(ctx, env);
		this.sql = ctx.storage.sql;
		this.sql.exec(`
			CREATE TABLE IF NOT EXISTS responses (id TEXT PRIMARY KEY, record TEXT NOT NULL, created_at INTEGER NOT NULL);
			CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, job TEXT NOT NULL, state TEXT NOT NULL);
		`);
	}

	put(record: StoredResponse): void {
		this.write(record);
		this.scheduleAlarm(record.createdAt + RESPONSE_TTL_MS);
	}

	get(id: string, now: number = Date.now()): StoredResponse | null {
		const row = this.sql
			.exec<{ record: string; created_at: number }>("SELECT record, created_at FROM responses WHERE id = ?", id)
			.toArray()[0];
		if (!row || row.created_at + RESPONSE_TTL_MS < now) return null;
		return JSON.parse(row.record) as StoredResponse;
	}

	delete(id: string): boolean {
		this.running.get(id)?.abort(new Error("deleted"));
		this.sql.exec("DELETE FROM jobs WHERE id = ?", id);
		return this.sql.exec("DELETE FROM responses WHERE id = ?", id).rowsWritten > 0;
	}

	/** Stores the queued response and runs the job from the alarm, right away. */
	enqueue(record: StoredResponse, job: BackgroundJob): void {
		this.write(record);
		this.sql.exec("INSERT OR REPLACE INTO jobs (id, job, state) VALUES (?, ?, 'queued')", job.id, JSON.stringify(job));
		this.scheduleAlarm(Date.now());
	}

	/** Cancels a background response: a queued job never starts, a running one is aborted. Null when unknown. */
	cancel(id: string): StoredResponse | null {
		const record = this.get(id);
		if (!record) return null;
		const status = record.response.status;
		if (status !== "queued" && status !== "in_progress") return record;
		this.sql.exec("DELETE FROM jobs WHERE id = ? AND state = 'queued'", id);
		this.running.get(id)?.abort(new Error("cancelled"));
		record.response = { ...record.response, status: "cancelled" };
		this.write(record);
		return record;
	}

	override async alarm(): Promise<void> {
		const now = Date.now();
		this.sql.exec("DELETE FROM responses WHERE created_at + ? < ?", RESPONSE_TTL_MS, now);
		const jobs = this.sql.exec<{ job: string }>("SELECT job FROM jobs WHERE state = 'queued'").toArray();
		const api: ResponseStoreApi = {
			// A cancelled response stays cancelled whatever the run reports afterwards.
			put: (r) => {
				if (this.get(r.id)?.response.status !== "cancelled") this.write(r);
			},
			get: (id) => this.get(id),
		};
		const runs = jobs.map((row) => {
			const job = JSON.parse(row.job) as BackgroundJob;
			this.sql.exec("UPDATE jobs SET state = 'running' WHERE id = ?", job.id);
			const controller = new AbortController();
			this.running.set(job.id, controller);
			const run = runner
				? runner(this.env, job, controller.signal, api)
				: Promise.reject(new Error("no background runner registered"));
			return run
				.catch((err) => console.error(`background response ${job.id} failed`, err))
				.finally(() => {
					this.running.delete(job.id);
					this.sql.exec("DELETE FROM jobs WHERE id = ?", job.id);
				});
		});
		// The alarm awaits every run, which keeps the object alive until they end.
		await Promise.all(runs);
		this.planned = 0;
		const queued = this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM jobs WHERE state = 'queued'").one().n;
		if (queued > 0) this.scheduleAlarm(Date.now());
		const oldest = this.sql.exec<{ t: number | null }>("SELECT MIN(created_at) AS t FROM responses").one().t;
		if (oldest !== null) this.scheduleAlarm(oldest + RESPONSE_TTL_MS);
	}

	private planned = 0;

	private write(record: StoredResponse): void {
		this.sql.exec(
			"INSERT INTO responses (id, record, created_at) VALUES (?, ?, ?) ON CONFLICT(id) DO UPDATE SET record = excluded.record",
			record.id,
			JSON.stringify(record),
			record.createdAt,
		);
	}

	/** Moves the alarm earlier when needed (the planned time is kept in memory; an evicted object re-plans on its next write). */
	private scheduleAlarm(at: number): void {
		if (this.planned > 0 && this.planned <= at) return;
		this.planned = at;
		void this.ctx.storage.setAlarm(at);
	}
}
