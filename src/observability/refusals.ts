/**
 * Refused requests (401, 402, 429, 400, … on the inference lanes) recorded in D1 for the
 * console, within a bound an attacker cannot push: each isolate records at most
 * `REFUSALS_PER_MINUTE` a minute, and each source (the paying key, or no key: a bad key's 401)
 * at most `REFUSALS_PER_SOURCE_PER_MINUTE` of them, so a flood of bad keys (free to send) or one
 * key's own refusals cannot take the whole bound and hide another key's refusals that minute.
 * The refusals over a bound are counted, and the count rides on the isolate's next recorded row
 * (`suppressed`). A flood therefore costs D1 a few rows a minute per isolate, and the maintenance
 * job deletes rows past their retention (maintenance/refusal-retention.ts). The request log line
 * still has every refusal.
 */
import { insertRefusal, type NewRefusal } from "../db/refusals";
import { errorText, logEvent } from "./log-event";

/** Most refusals one isolate records in a minute. */
export const REFUSALS_PER_MINUTE = 30;
/** Most refusals of one source (a paying key, or none) one isolate records in a minute. */
export const REFUSALS_PER_SOURCE_PER_MINUTE = 10;
/** Most sources counted apart in a minute (memory bound); past it, a new source is not recorded. */
const MAX_SOURCES = 1000;

/** Most characters of the error's message kept. */
const MAX_MESSAGE_CHARS = 300;

/** The per-isolate, per-minute bound (pure: `now` is a parameter). */
export class RefusalSampler {
	#minute = -1;
	#recorded = 0;
	#suppressed = 0;
	#bySource = new Map<string, number>();

	constructor(
		readonly perMinute = REFUSALS_PER_MINUTE,
		readonly perSource = REFUSALS_PER_SOURCE_PER_MINUTE,
	) {}

	/**
	 * Whether to record a refusal of `source` (its paying key id; null: no key) at `now`, and how
	 * many went unrecorded before it; null: over a bound.
	 */
	admit(now: number, source: string | null = null): { suppressed: number } | null {
		const minute = Math.floor(now / 60_000);
		if (minute !== this.#minute) {
			this.#minute = minute;
			this.#recorded = 0;
			this.#bySource.clear();
		}
		const id = source ?? "";
		const ofSource = this.#bySource.get(id) ?? 0;
		const newSource = ofSource === 0 && this.#bySource.size >= MAX_SOURCES;
		if (this.#recorded >= this.perMinute || ofSource >= this.perSource || newSource) {
			this.#suppressed += 1;
			return null;
		}
		this.#recorded += 1;
		this.#bySource.set(id, ofSource + 1);
		const suppressed = this.#suppressed;
		this.#suppressed = 0;
		return { suppressed };
	}
}

const isolateSampler = new RefusalSampler();

export type Refusal = Omit<NewRefusal, "suppressed" | "createdAt">;

/** Records `refusal` unless this isolate is over its bound; never throws (a refusal's answer is already out). */
export async function recordRefusal(d1: D1Database, refusal: Refusal, now = Date.now(), sampler = isolateSampler): Promise<void> {
	const admitted = sampler.admit(now, refusal.keyId);
	if (!admitted) return;
	try {
		await insertRefusal(d1, {
			...refusal,
			message: refusal.message === null ? null : refusal.message.slice(0, MAX_MESSAGE_CHARS),
			createdAt: now,
			suppressed: admitted.suppressed,
		});
	} catch (err) {
		logEvent("warn", "recording a refused request failed", { request_id: refusal.requestId, error: errorText(err) });
	}
}
