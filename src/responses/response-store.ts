import { DurableObject } from "cloudflare:workers";
import { errorText, logEvent } from "../observability/log-event";
import { migrate } from "../storage/migrations";
import type { HeldRequest } from "./background-job";
// Background runs execute here, in the queue's pool, with the same chat pipeline as every other request.
import { BackgroundQueue, RESERVATION_TTL_MS } from "./background-queue";
import type { ResponseInputItem } from "./item-schema";
import { PayerSlots } from "./payer-slots";
import { responseStoreMigrations } from "./response-store-schema";
import { type BeginInput, type BeginResult, type HistoryResult, type ResponseStoreApi, responseStore } from "./store-api";
import { type Item, RESPONSE_TTL_MS, Turns } from "./turns";

/**
 * 1: one `responses` row per response, holding its input twice and every earlier turn again
 * (large ones failed to store), jobs in `jobs`. 2: turns.ts and stored-docs.ts, jobs in `queue`.
 * 3: `item_index` (stored-docs.ts), item id → where the item is, for `item_reference` inputs.
 */

/**
 * The stored responses of one API key (turns.ts): only that key's requests reach this object,
 * which is what keeps tenants apart. Background runs execute here, from the alarm, at most
 * BACKGROUND_CONCURRENCY at a time, so they outlive the request that queued them; the queue
 * holds at most the key's `max_queued_responses` (reserved, queued or running).
 */
export class ResponseStore extends DurableObject<Env> {
	readonly #sql: SqlStorage;
	readonly #turns: Turns;
	readonly #queue: BackgroundQueue;
	/** Jobs this key pays for in its tokens' stores (payer-slots.ts): they count towards its queue cap. */
	readonly #slots: PayerSlots;
	#planned = 0;

	constructor(ctx: DurableObjectState, env: Env) {
		super(ctx, env);
		this.#sql = ctx.storage.sql;
		this.#turns = new Turns(this.#sql, (fn) => ctx.storage.transactionSync(fn));
		migrate(ctx.storage, responseStoreMigrations(this.#turns));
		const api: ResponseStoreApi = {
			conversation: (id) => this.#turns.conversation(id),
			start: (id) => this.#turns.setStatus(id, "in_progress", "queued"),
			finish: (id, response) => this.finish(id, response),
		};
		this.#slots = new PayerSlots(this.#sql);
		this.#queue = new BackgroundQueue(
			env,
			this.#sql,
			this.#turns,
			api,
			(at) => this.#scheduleAlarm(at),
			(id, hold, caller) => {
				// A token's job gives its slot back to the key that pays for it.
				if (hold.payerKeyId === caller) return;
				responseStore(this.env, hold.payerKeyId)
					.releaseSlot(id)
					.catch((err: unknown) =>
						logEvent("warn", "background response: giving the payer's queue slot back failed", {
							response_id: id,
							error: errorText(err),
						}),
					);
			},
		);
	}

	/**
	 * How many background jobs this key pays for: its own queue and its tokens' (payer slots).
	 * At the cap, slots whose job is no longer queued in its token's store are dropped first.
	 */
	async #payerJobs(cap: number): Promise<number> {
		if (this.#queue.size() + this.#slots.count() < cap) return this.#queue.size() + this.#slots.count();
		for (const slot of this.#slots.checkable(Date.now())) {
			let alive = true;
			try {
				alive = await responseStore(this.env, slot.caller).holdsJob(slot.id);
			} catch (err) {
				logEvent("warn", "background response: checking a token's queue failed", { response_id: slot.id, error: errorText(err) });
			}
			if (!alive) this.#slots.remove(slot.id);
		}
		return this.#queue.size() + this.#slots.count();
	}

	/**
	 * Stores a new response with its input (before anything is run or billed) and returns the
	 * conversation it continues. Refuses an unknown previous response, a conversation too large
	 * to store, and a background response over the key's queue cap.
	 */
	begin(input: BeginInput): BeginResult {
		const texts = input.input.map((i) => JSON.stringify(i));
		const checked = this.#turns.check(
			input.previousId,
			texts.reduce((n, t) => n + t.length, 0),
			input.maxChars,
		);
		if (!checked.ok) return checked;
		const { job } = input;
		// Its own jobs and its tokens' (queueFull, just before, dropped the slots of jobs that are gone).
		if (job && this.#queue.size() + this.#slots.count() >= job.cap) {
			return { ok: false, reason: "queue_full" };
		}
		const history = input.previousId ? this.#turns.chain(input.previousId) : [];
		const now = Date.now();
		this.#turns.create(input.id, input.previousId, input.createdAt, input.response, { items: input.input, texts }, () => {
			if (job) this.#queue.reserve(input.id, job.job, now);
		});
		if (job) this.#scheduleAlarm(now + RESERVATION_TTL_MS);
		this.#scheduleAlarm(input.createdAt + RESPONSE_TTL_MS);
		return { ok: true, history };
	}

	/**
	 * The conversation a request continues, with the same checks as `begin` (the referenced items
	 * count towards its size), and the stored items its input references by id (`refs`, in input
	 * order), storing nothing: read before anything is held, so a refusal costs nothing.
	 */
	history(previousId: string | null, inputChars: number, maxChars: number, refs: readonly string[] = []): HistoryResult {
		const located = this.#turns.locate(refs, Date.now());
		let chars = inputChars;
		for (const id of refs) chars += located.get(id)?.chars ?? 0;
		const checked = this.#turns.check(previousId, chars, maxChars);
		if (!checked.ok) return checked;
		const referenced: ResponseInputItem[] = [];
		for (const id of refs) {
			const at = located.get(id);
			const item = at && this.#turns.item(at);
			if (!item) return { ok: false, reason: "item_not_found", id };
			referenced.push(item);
		}
		return { ok: true, history: previousId ? this.#turns.chain(previousId) : [], referenced };
	}

	/**
	 * Whether this key already pays for `cap` background jobs (reserved, queued or running, its
	 * own and its tokens'): a cheap check before a hold is placed.
	 */
	async queueFull(cap: number): Promise<boolean> {
		return (await this.#payerJobs(cap)) >= cap;
	}

	/**
	 * On the paying key's store: takes a queue slot for a job of its token `caller`, when the key
	 * pays for fewer than `cap` jobs; false when it is full.
	 */
	async claimSlot(id: string, caller: string, cap: number): Promise<boolean> {
		await this.#payerJobs(cap);
		// Recounted without awaiting, so two claims cannot both take the last slot.
		if (this.#queue.size() + this.#slots.count() >= cap) return false;
		this.#slots.add(id, caller, Date.now());
		return true;
	}

	/** On the paying key's store: gives back a token job's slot (it ended, or was never stored). */
	releaseSlot(id: string): void {
		this.#slots.remove(id);
	}

	/** Whether this store still holds a background job with this id (reserved, queued or running). */
	holdsJob(id: string): boolean {
		return this.#queue.has(id);
	}

	/** Fills a reserved queue slot once the hold is placed; false when the slot is gone. */
	commit(id: string, hold: HeldRequest): boolean {
		return this.#queue.commit(id, hold);
	}

	/** Forgets a response whose request was refused (or failed) before it produced anything. */
	abandon(id: string): void {
		this.#queue.unreserve(id);
		this.#turns.remove(id);
	}

	/** The final response: its output and status. A cancelled or deleted response stays as it is. */
	finish(id: string, response: Item): void {
		this.#turns.finish(id, response);
	}

	/** Marks a response failed (its output could not be stored). */
	markFailed(id: string, error: { code: string; message: string }): void {
		this.#turns.markFailed(id, error);
	}

	get(id: string): Item | null {
		return this.#turns.get(id, Date.now());
	}

	/** This response's input items (GET …/input_items), oldest first. */
	inputItems(id: string): Item[] | null {
		return this.#turns.inputItems(id, Date.now());
	}

	async delete(id: string): Promise<boolean> {
		if (!this.#turns.visible(id, Date.now())) return false;
		const dropped = this.#queue.stop(id, "deleted");
		this.#turns.remove(id);
		if (dropped) await this.#queue.release(dropped);
		return true;
	}

	/** Cancels a background response: a queued job never starts (its hold is released), a running one is aborted. Null when unknown. */
	async cancel(id: string): Promise<Item | null> {
		const turn = this.#turns.visible(id, Date.now());
		if (!turn) return null;
		if (turn.status !== "queued" && turn.status !== "in_progress") return this.get(id);
		const dropped = this.#queue.stop(id, "cancelled");
		this.#turns.setStatus(id, "cancelled");
		const response = this.get(id);
		if (dropped) await this.#queue.release(dropped);
		return response;
	}

	override async alarm(): Promise<void> {
		this.#planned = 0;
		const now = Date.now();
		this.#turns.collect(now);
		await this.#queue.onAlarm(now);
		const expiry = this.#turns.nextExpiry();
		if (expiry !== null) this.#scheduleAlarm(expiry);
	}

	/** Moves the alarm earlier when needed (the planned time is kept in memory; an evicted object re-plans on its next write). */
	#scheduleAlarm(at: number): void {
		if (this.#planned > 0 && this.#planned <= at) return;
		this.#planned = at;
		void this.ctx.storage.setAlarm(at);
	}
}
