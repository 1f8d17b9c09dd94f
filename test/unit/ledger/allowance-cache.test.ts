/**
 * The isolate's allowances (src/ledger/edge-allowances.ts) against a fake ledger stub: which
 * reservations are given back, and when. The ledger's own arithmetic is tested in workerd
 * (test/integration/ledger/ledger-allowances.test.ts).
 */
import { afterEach, describe, expect, it } from "vitest";
import type { LedgerConfig } from "../../../src/config";
import { ALLOWANCE_WARMUP_REQUESTS } from "../../../src/ledger/allowance";
import type { KeyLedger, SettleResult } from "../../../src/ledger/durable/key-ledger";
import { localAllowance } from "../../../src/ledger/edge-allowance-state";
import { type AllowanceTicket, afterSettle, afterSyncHold, takeLocal } from "../../../src/ledger/edge-allowances";
import { forgetAllowances } from "../../support/reset-isolate";

const HOLD = 1_000;
const NOW = 1_000_000;

function fakeLedger() {
	const releases: Array<{ allowanceId: string; keepNanos: number }> = [];
	const stub = {
		grant: async (input: { wantNanos: number; ttlMs: number }) => ({
			ok: true,
			grantedNanos: input.wantNanos,
			amountNanos: input.wantNanos,
			ttlMs: input.ttlMs,
			balanceNanos: 1_000_000_000,
		}),
		release: async (input: { allowanceId: string; keepNanos: number }) => {
			releases.push(input);
		},
	};
	return { ledger: () => stub as unknown as DurableObjectStub<KeyLedger>, releases };
}

function edge() {
	const pending: Promise<unknown>[] = [];
	const ledger: LedgerConfig = { allowance_ttl_ms: 30_000, allowance_min_headroom: 2 };
	return { ctx: { ledger, waitUntil: (p: Promise<unknown>) => void pending.push(p) }, settle: () => Promise.all(pending) };
}

function settledWith(allowance: "live" | "revoked" | "gone", cost: number): SettleResult {
	return { requestId: "r", costNanos: cost, balanceNanos: 999_000_000, applied: true, allowance } as SettleResult;
}

async function warm(keyId: string, l: ReturnType<typeof fakeLedger>, e: ReturnType<typeof edge>) {
	for (let i = 0; i < ALLOWANCE_WARMUP_REQUESTS; i++) afterSyncHold(l.ledger, keyId, HOLD, 1e12, e.ctx, NOW + i);
	await e.settle();
	expect(localAllowance(keyId)).toBeDefined();
}

function take(keyId: string, l: ReturnType<typeof fakeLedger>, e: ReturnType<typeof edge>, n: number): AllowanceTicket {
	const taken = takeLocal(l.ledger, keyId, `req_${n}`, HOLD, 0, e.ctx, NOW + 10);
	if (!taken) throw new Error("nothing taken");
	return taken.ticket;
}

afterEach(() => forgetAllowances());

describe("allowances the isolate stops using", () => {
	it("are not asked for before the key is busy", async () => {
		const l = fakeLedger();
		const e = edge();
		for (let i = 0; i < ALLOWANCE_WARMUP_REQUESTS - 1; i++) afterSyncHold(l.ledger, "key_a", HOLD, 1e12, e.ctx, NOW + i);
		await e.settle();
		expect(localAllowance("key_a")).toBeUndefined();
	});

	it("keep only what running requests took, and are given back in full once the last one settles", async () => {
		const l = fakeLedger();
		const e = edge();
		await warm("key_b", l, e);
		const t1 = take("key_b", l, e, 1);
		const t2 = take("key_b", l, e, 2);
		const t3 = take("key_b", l, e, 3);
		// The ledger says the allowance was revoked (an admin change): the isolate stops using it and
		// keeps reserved only what t2 and t3 took.
		afterSettle(l.ledger, t1, settledWith("revoked", 10), 10, e.ctx);
		await e.settle();
		expect(localAllowance("key_b")).toBeUndefined();
		expect(l.releases).toEqual([{ allowanceId: t1.allowanceId, keepNanos: 2 * HOLD }]);
		afterSettle(l.ledger, t2, settledWith("revoked", 20), 20, e.ctx);
		await e.settle();
		expect(l.releases).toHaveLength(1);
		// The last request on it settled: what the holds did not use is not left reserved until expiry.
		afterSettle(l.ledger, t3, settledWith("revoked", 30), 30, e.ctx);
		await e.settle();
		expect(l.releases).toEqual([
			{ allowanceId: t1.allowanceId, keepNanos: 2 * HOLD },
			{ allowanceId: t1.allowanceId, keepNanos: 0 },
		]);
	});

	it("gives back an allowance nothing runs on at once when it is dropped", async () => {
		const l = fakeLedger();
		const e = edge();
		await warm("key_c", l, e);
		const t1 = take("key_c", l, e, 1);
		afterSettle(l.ledger, t1, settledWith("revoked", 10), 10, e.ctx);
		await e.settle();
		expect(l.releases).toEqual([{ allowanceId: t1.allowanceId, keepNanos: 0 }]);
	});
});
