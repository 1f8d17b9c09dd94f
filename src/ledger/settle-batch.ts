/**
 * Settlements leave an isolate in batches: while one request's settlement call to a key's ledger
 * is on its way, the settlements of that key that finish meanwhile wait in module memory, and the
 * same request sends them all in its next call (`KeyLedger.settleMany`, one storage commit for the
 * lot). Under load that is one ledger call for several requests instead of one each; a request
 * alone still makes exactly one call, at once.
 *
 * workerd lets no request wait on another's I/O or promise (bench/README.md), so the queue is plain
 * data: the request that sends a batch writes each entry's answer into it, and every other request
 * polls its own entry with its own timer (1 ms, doubling to 32 ms), under its own `waitUntil`. Money stays exact because the
 * ledger settles once per request id (a replay debits nothing and returns the stored result): an
 * entry whose batch failed, or whose sender vanished (a stuck batch is given up after
 * STUCK_AFTER_MS), is settled again with a call of its own.
 */
import type { SettleInput, SettleManyAnswer, SettleResult } from "./durable/rpc-types";

/** What the queue needs of a key's ledger (a fresh stub per call: after an exception a stub may be broken). */
export interface SettleManyLedger {
	settleMany(inputs: SettleInput[]): Promise<SettleManyAnswer[]>;
	settle(input: SettleInput): Promise<SettleResult>;
}

/** The most settlements in one call. */
export const MAX_BATCH = 64;
/**
 * How often a waiting request looks at its entry: after 1 ms, then twice as long each time, up
 * to 32 ms. A ledger call takes about a millisecond next to the ledger but 50–150 ms from another
 * continent; polling every millisecond through that would cost each waiting request a hundred
 * timer wake-ups per call, this about eight.
 */
const POLL_FIRST_MS = 1;
const POLL_MAX_MS = 32;
/** A batch unanswered this long is given up: its entries settle on their own (a replay costs nothing). */
export const STUCK_AFTER_MS = 5_000;

interface Entry {
	input: SettleInput;
	answer?: SettleManyAnswer;
	error?: unknown;
}

interface KeyQueue {
	waiting: Entry[];
	/** When the batch under way was sent (unix ms); 0 when none is. */
	sendingSince: number;
}

const queues = new Map<string, KeyQueue>();

/** What this isolate did, for tests and the benchmark rig. */
export const settleCounters = { calls: 0, settlements: 0, largest: 0, alone: 0 };

/**
 * Settles `input` on `payerKeyId`'s ledger, in a batch with whatever else of this key is waiting;
 * resolves with this request's result, or rejects as a single settle call would.
 */
export async function settleInBatch(
	ledger: () => SettleManyLedger,
	payerKeyId: string,
	input: SettleInput,
): Promise<SettleResult> {
	let q = queues.get(payerKeyId);
	if (!q) {
		q = { waiting: [], sendingSince: 0 };
		queues.set(payerKeyId, q);
	}
	const entry: Entry = { input };
	q.waiting.push(entry);
	const started = Date.now();
	let pollMs = POLL_FIRST_MS;
	while (entry.answer === undefined && entry.error === undefined) {
		const now = Date.now();
		// Nobody is sending (or the one who was is stuck) and this entry is still waiting: send.
		if ((q.sendingSince === 0 || now - q.sendingSince > STUCK_AFTER_MS) && q.waiting.includes(entry)) {
			await send(ledger, payerKeyId, q);
			continue;
		}
		if (now - started > STUCK_AFTER_MS) {
			const i = q.waiting.indexOf(entry);
			if (i >= 0) q.waiting.splice(i, 1);
			break;
		}
		await new Promise((resolve) => setTimeout(resolve, pollMs));
		pollMs = Math.min(pollMs * 2, POLL_MAX_MS);
	}
	if (entry.answer === undefined) {
		// Its batch failed as a whole or is stuck: on its own, as without batching.
		settleCounters.alone++;
		return ledger().settle(input);
	}
	if ("failed" in entry.answer) throw new Error(`settlement failed: ${entry.answer.failed}`);
	return entry.answer;
}

/**
 * Sends one batch: the oldest waiting entries. The request that sends it stops there, once its own
 * entry is answered (its settlement is done; a request does not carry the others' for ever, and
 * its `waitUntil` has a limit): one of the requests still waiting sends the next.
 */
async function send(ledger: () => SettleManyLedger, payerKeyId: string, q: KeyQueue): Promise<void> {
	const since = Date.now();
	q.sendingSince = since;
	const batch = q.waiting.splice(0, MAX_BATCH);
	settleCounters.calls++;
	settleCounters.settlements += batch.length;
	settleCounters.largest = Math.max(settleCounters.largest, batch.length);
	try {
		const answers = await ledger().settleMany(batch.map((e) => e.input));
		batch.forEach((e, i) => {
			e.answer = answers[i] ?? { failed: "no answer" };
		});
	} catch (err) {
		for (const e of batch) e.error = err;
	}
	// Unless another request took over meanwhile (thinking this call stuck), nobody is sending now.
	if (q.sendingSince !== since) return;
	q.sendingSince = 0;
	if (q.waiting.length === 0 && queues.get(payerKeyId) === q) queues.delete(payerKeyId);
}

/** Only for tests (through test/support/reset-isolate.ts): forget every queue and counter of this isolate. */
export function forgetSettleQueues(): void {
	queues.clear();
	for (const k of Object.keys(settleCounters)) settleCounters[k as keyof typeof settleCounters] = 0;
}
