/**
 * What the ResponseStore keeps of a queued background response: the job and the hold it runs on.
 * Both are stored as JSON, so the readers here also accept the shapes written before the key ids
 * were named (`keyId` for what is now `callerKeyId` on a job and `payerKeyId` on a hold).
 */
import type { StoredHold } from "../settlement/settlement";

/** The hold a queued background response runs on: enough to release it if it never runs. */
export type HeldRequest = StoredHold;

/** A background run waiting for (or under) the alarm. */
export interface BackgroundJob {
	id: string;
	requestId: string;
	/** The calling key (a `vk-tmp-` token's own id): its scopes apply, its store keeps the response. */
	callerKeyId: string;
	/** What the runner needs to redo the request (the validated request without its input, which is stored as items). */
	payload: Record<string, unknown>;
	/** Placed when the job was queued; absent only while the slot is reserved. */
	hold?: HeldRequest;
}

type Legacy<T, K extends keyof T> = Omit<T, K> & Partial<Pick<T, K>> & { keyId?: string };

/** A stored hold (JSON text), in today's shape. */
export function readHold(text: string | null): HeldRequest | null {
	if (!text) return null;
	const { keyId, ...hold } = JSON.parse(text) as Legacy<HeldRequest, "payerKeyId">;
	return { ...hold, payerKeyId: hold.payerKeyId ?? (keyId as string) };
}

/** A stored job, in today's shape. */
export function readJob(stored: Legacy<BackgroundJob, "callerKeyId"> | null): BackgroundJob | null {
	if (!stored) return null;
	const { keyId, ...job } = stored;
	return { ...job, callerKeyId: job.callerKeyId ?? (keyId as string) };
}
