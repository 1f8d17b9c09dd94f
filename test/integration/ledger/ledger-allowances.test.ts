/**
 * The ledger's side of edge allowances (src/ledger/durable/allowance-grants.ts), called over RPC at
 * times the test sets (test/support/clock.ts): grants and the headroom rule, settlement against an
 * allowance, adoption, expiry, revocation, and a seeded interleaving of several simulated isolates (the isolate arithmetic of
 * src/ledger/allowance.ts) against one ledger, checking the money invariants after every step.
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import * as A from "../../../src/ledger/allowance";
import type { KeyLedger } from "../../../src/ledger/durable/key-ledger";
import { at } from "../../support/clock";
import { freshKeyId, ledger, record } from "../../support/ledger";
import { seededRandom } from "../../support/seeded-random";

/** Far ahead of the real clock, so the runtime's own alarm never expires anything these tests time themselves. */
const BASE = Date.now() + 10 * 365 * 86_400_000;
const TTL = 30_000;

async function funded(label: string, balance: number) {
	const keyId = freshKeyId("alw", label);
	const stub = ledger(keyId);
	await at(BASE, () => stub.credit({ keyId, amountNanos: balance, idempotencyKey: "initial" }));
	return { keyId, stub };
}

function expire(stub: DurableObjectStub<KeyLedger>, now: number): Promise<number> {
	return at(now, () => runInDurableObject(stub, (instance: KeyLedger) => instance.expireAllowances()));
}

function amounts(stub: DurableObjectStub<KeyLedger>): Promise<Map<string, number>> {
	return runInDurableObject(stub, (_i, state) => {
		const m = new Map<string, number>();
		for (const r of state.storage.sql.exec<{ id: string; amount: number }>("SELECT id, amount FROM allowances"))
			m.set(r.id, r.amount);
		return m;
	});
}

const grantOf = (keyId: string, id: string, hold: number, want: number, extend = false, minHeadroom = 10) => ({
	payerKeyId: keyId,
	allowanceId: id,
	holdNanos: hold,
	wantNanos: want,
	ttlMs: TTL,
	minHeadroom,
	extend,
});

describe("KeyLedger allowances", () => {
	it("grants only with the headroom, never reserving into its lower half, and counts the grant as held", async () => {
		const { keyId, stub } = await funded("grant", 10_000);
		// 10 holds of 1,000 needed; the grant may leave no less than 5 holds unreserved.
		const g = await at(BASE, () => stub.grant(grantOf(keyId, "a1", 1000, 8000)));
		expect(g).toMatchObject({ ok: true, grantedNanos: 5000, amountNanos: 5000, ttlMs: TTL, balanceNanos: 10_000 });
		expect((await stub.info()).heldNanos).toBe(5000);
		// Now 5,000 available: below 10 holds, nothing more is granted, to this isolate or another.
		expect(await at(BASE + 1, () => stub.grant(grantOf(keyId, "a1", 1000, 8000, true)))).toMatchObject({
			ok: false,
			reason: "headroom",
		});
		expect(await at(BASE + 1, () => stub.grant(grantOf(keyId, "a2", 1000, 8000)))).toMatchObject({
			ok: false,
			reason: "headroom",
		});
		// The synchronous path sees the reservation.
		const auth = await at(BASE + 2, () => stub.authorize({ payerKeyId: keyId, requestId: "sync1", holdNanos: 1000 }));
		expect(auth).toMatchObject({ ok: true, availableNanos: 4000 });
		expect(await stub.allowanceInfo()).toEqual({ allowances: 1, allowanceNanos: 5000 });
	});

	it("refuses to extend an allowance that is gone, and a fresh id reserves anew", async () => {
		const { keyId, stub } = await funded("gone", 1_000_000);
		expect((await at(BASE, () => stub.grant(grantOf(keyId, "b1", 1000, 10_000)))).ok).toBe(true);
		expect(await expire(stub, BASE + TTL)).toBe(10_000);
		expect((await stub.info()).heldNanos).toBe(0);
		expect(await at(BASE + TTL + 1, () => stub.grant(grantOf(keyId, "b1", 1000, 10_000, true)))).toMatchObject({
			ok: false,
			reason: "gone",
		});
		expect(await at(BASE + TTL + 1, () => stub.grant(grantOf(keyId, "b2", 1000, 10_000)))).toMatchObject({
			ok: true,
			amountNanos: 10_000,
		});
		// An extension tops up to what is wanted and moves the expiry later.
		expect(await at(BASE + TTL + 5000, () => stub.grant(grantOf(keyId, "b2", 1000, 15_000, true)))).toMatchObject({
			ok: true,
			grantedNanos: 5000,
			amountNanos: 15_000,
		});
		expect(await expire(stub, BASE + 2 * TTL + 1)).toBe(0);
		expect(await expire(stub, BASE + 2 * TTL + 5000)).toBe(15_000);
	});

	it("lowers the reservation by what a served request cost; a settlement after the allowance expired still debits exactly once", async () => {
		const { keyId, stub } = await funded("late", 1_000_000);
		await at(BASE, () => stub.grant(grantOf(keyId, "c1", 1000, 10_000)));
		const s1 = await at(BASE + 10, () =>
			stub.settle({ requestId: "r1", costNanos: 400, record: record(keyId), allowanceId: "c1" }),
		);
		expect(s1).toMatchObject({ applied: true, balanceNanos: 999_600, allowance: "live" });
		expect((await stub.info()).heldNanos).toBe(9600);
		await expire(stub, BASE + TTL);
		expect((await stub.info()).heldNanos).toBe(0);
		const late = await at(BASE + TTL + 5, () =>
			stub.settle({
				requestId: "r2",
				costNanos: 700,
				record: record(keyId),
				allowanceId: "c1",
			}),
		);
		expect(late).toMatchObject({ applied: true, balanceNanos: 998_900, allowance: "gone" });
		const replay = await at(BASE + TTL + 9, () =>
			stub.settle({
				requestId: "r2",
				costNanos: 700,
				record: record(keyId),
				allowanceId: "c1",
			}),
		);
		expect(replay).toMatchObject({ applied: false, balanceNanos: 998_900 });
		const info = await stub.info();
		expect(info.balanceNanos).toBe(998_900);
		expect(info.heldNanos).toBe(0);
		expect(info.outboxSize).toBe(2);
	});

	it("moves a running request into a hold of its own; its settlement then leaves the allowance alone", async () => {
		const { keyId, stub } = await funded("adopt", 1_000_000);
		await at(BASE, () => stub.grant(grantOf(keyId, "d1", 1000, 10_000)));
		expect(await at(BASE + 25_000, () => stub.adopt({ allowanceId: "d1", requestId: "long", holdNanos: 3000 }))).toEqual({
			adopted: true,
			allowance: "live",
		});
		expect(await at(BASE + 25_001, () => stub.adopt({ allowanceId: "d1", requestId: "long", holdNanos: 3000 }))).toMatchObject({
			adopted: true,
		});
		let info = await stub.info();
		expect(info).toMatchObject({ heldNanos: 10_000, openHolds: 1 });
		expect((await amounts(stub)).get("d1")).toBe(7000);
		// The allowance expires; the adopted request is still covered by its hold.
		await expire(stub, BASE + TTL);
		expect((await stub.info()).heldNanos).toBe(3000);
		const s = await at(BASE + 40_000, () =>
			stub.settle({
				requestId: "long",
				costNanos: 2500,
				record: record(keyId),
				allowanceId: "d1",
			}),
		);
		expect(s).toMatchObject({ applied: true, balanceNanos: 997_500 });
		info = await stub.info();
		expect(info).toMatchObject({ heldNanos: 0, openHolds: 0, balanceNanos: 997_500 });
		// Adopting after settlement does nothing.
		expect(await at(BASE + 40_001, () => stub.adopt({ allowanceId: "d1", requestId: "long", holdNanos: 3000 }))).toMatchObject({
			adopted: false,
		});
		expect((await stub.info()).heldNanos).toBe(0);
	});

	it("revokes every allowance on an admin change, pauses grants, and refuses new holds for a revoked key or token", async () => {
		const { keyId, stub } = await funded("revoke", 1_000_000);
		await at(BASE, () => stub.grant(grantOf(keyId, "e1", 1000, 10_000)));
		await at(BASE, () => stub.authorize({ payerKeyId: keyId, requestId: "held", holdNanos: 500 }));
		expect(await at(BASE + 1, () => stub.revoke({ change: "revoked", scope: "key_token_1" }))).toEqual({ allowancesRevoked: 1 });
		// The reservation stays (requests may be running on it) until the isolate gives it back or it expires.
		expect((await stub.info()).heldNanos).toBe(10_500);
		const s = await at(BASE + 2, () =>
			stub.settle({ requestId: "r1", costNanos: 100, record: record(keyId), allowanceId: "e1" }),
		);
		expect(s.allowance).toBe("revoked");
		await stub.release({ allowanceId: "e1", keepNanos: 0 });
		expect((await stub.info()).heldNanos).toBe(500);
		expect(await at(BASE + 3, () => stub.grant(grantOf(keyId, "e2", 1000, 10_000)))).toMatchObject({
			ok: false,
			reason: "paused",
		});
		expect((await at(BASE + 80_000, () => stub.grant(grantOf(keyId, "e2", 1000, 10_000)))).ok).toBe(true);
		// The token is refused; the key itself is not; a hold placed before stays usable (its keep-alive replay).
		const token = await at(BASE + 4, () =>
			stub.authorize({
				payerKeyId: keyId,
				requestId: "t1",
				holdNanos: 10,
				scopes: [{ scope: "key_token_1" }],
			}),
		);
		expect(token).toMatchObject({ ok: false, refused: "revoked", scope: "key_token_1" });
		expect(
			(
				await at(BASE + 4, () =>
					stub.authorize({ payerKeyId: keyId, requestId: "k1", holdNanos: 10, scopes: [{ scope: keyId }] }),
				)
			).ok,
		).toBe(true);
		await at(BASE + 5, () => stub.revoke({ change: "revoked", scope: keyId }));
		expect(await at(BASE + 6, () => stub.authorize({ payerKeyId: keyId, requestId: "k2", holdNanos: 10 }))).toMatchObject({
			ok: false,
			refused: "revoked",
		});
		expect((await at(BASE + 6, () => stub.authorize({ payerKeyId: keyId, requestId: "held", holdNanos: 0 }))).ok).toBe(true);
		expect(await at(BASE + 200_000, () => stub.grant(grantOf(keyId, "e3", 1000, 10_000)))).toMatchObject({
			ok: false,
			reason: "revoked",
		});
	});

	it("revokes allowances when credit is taken back", async () => {
		const { keyId, stub } = await funded("debit", 1_000_000);
		await at(BASE, () => stub.grant(grantOf(keyId, "f1", 1000, 10_000)));
		await at(BASE + 1, () => stub.credit({ keyId, amountNanos: -900_000, idempotencyKey: "take-back" }));
		const s = await at(BASE + 2, () =>
			stub.settle({ requestId: "r1", costNanos: 100, record: record(keyId), allowanceId: "f1" }),
		);
		expect(s.allowance).toBe("revoked");
	});

	// 300 seeded steps of ledger calls: CPU-bound, so a busy machine gets more than the default 20 s.
	it("never overspends for any interleaving of isolates' takes, synchronous holds, settlements, adoptions, expiry and revocation", async () => {
		const HEAD = 8;
		const MAX_HOLD = 5000;
		const { keyId, stub } = await funded("model", 400_000);
		let credited = 400_000;
		let now = BASE;
		const random = seededRandom(20_261_201);
		const rand = (n: number) => Math.floor(random() * n);
		interface Running {
			requestId: string;
			hold: number;
			allowanceId: string | null;
			isolate: number;
			adopted: boolean;
		}
		const isolates: (A.LocalAllowance | null)[] = [null, null, null];
		const running: Running[] = [];
		let n = 0;
		let costs = 0;
		const seen = { takes: 0, grants: 0, adoptions: 0, syncs: 0 };

		const drop = async (i: number, a: A.LocalAllowance) => {
			if (isolates[i] !== a) return;
			isolates[i] = null;
			await stub.release({ allowanceId: a.id, keepNanos: a.inFlight });
		};
		const check = async (step: string) => {
			const info = await stub.info();
			// Overspend: never below minus one hold; reservations exceed the balance by at most one admission.
			expect(info.balanceNanos, step).toBeGreaterThanOrEqual(-MAX_HOLD);
			expect(info.heldNanos, step).toBeLessThanOrEqual(Math.max(0, info.balanceNanos) + MAX_HOLD);
			const reserved = await amounts(stub);
			for (const a of isolates) {
				if (!a) continue;
				expect(a.remaining + a.inFlight, step).toBeLessThanOrEqual(reserved.get(a.id) ?? 0);
			}
		};

		for (let step = 0; step < 300; step++) {
			const op = rand(100);
			const i = rand(isolates.length);
			if (op < 40) {
				// A request arrives at isolate i.
				const hold = 500 + rand(MAX_HOLD - 500);
				const requestId = `m${n++}`;
				const a = isolates[i];
				if (a && A.take(a, hold, 0, now)) {
					seen.takes++;
					running.push({ requestId, hold, allowanceId: a.id, isolate: i, adopted: false });
					if (A.needsRefill(a, now)) {
						a.refillSince = now;
						const g = await at(now, () => stub.grant(grantOf(keyId, a.id, hold, a.targetNanos, true, HEAD)));
						if (g.ok) A.refilled(a, g, now);
						else await drop(i, a);
					}
				} else {
					const r = await at(now, () => stub.authorize({ payerKeyId: keyId, requestId, holdNanos: hold }));
					if (r.ok) {
						seen.syncs++;
						running.push({ requestId, hold, allowanceId: null, isolate: i, adopted: false });
						if (r.availableNanos >= HEAD * hold && (!a || A.isStale(a, now))) {
							const id = `alw_${step}`;
							const g = await at(now, () => stub.grant(grantOf(keyId, id, hold, A.ALLOWANCE_HOLDS * hold, false, HEAD)));
							if (g.ok) {
								seen.grants++;
								isolates[i] = A.startAllowance(id, g, now, A.ALLOWANCE_HOLDS * hold);
							}
						}
					}
				}
			} else if (op < 75 && running.length) {
				// A running request ends and settles, at any cost up to its hold.
				const r = running.splice(rand(running.length), 1)[0] as Running;
				const cost = rand(r.hold + 1);
				const s = await at(now, () =>
					stub.settle({
						requestId: r.requestId,
						costNanos: cost,
						record: record(keyId),
						...(r.allowanceId ? { allowanceId: r.allowanceId } : {}),
					}),
				);
				expect(s.applied).toBe(true);
				costs += cost;
				const a = isolates[r.isolate];
				if (r.allowanceId && a?.id === r.allowanceId) {
					if (!r.adopted) A.settled(a, r.hold, cost, true);
					if (s.allowance === "revoked" || s.allowance === "gone") await drop(r.isolate, a);
				}
			} else if (op < 90) {
				// Time passes: requests near their allowance's expiry adopt, then the alarm expires what is due.
				now += rand(8000);
				for (const r of running) {
					const a = isolates[r.isolate];
					if (!r.allowanceId || r.adopted) continue;
					if (a?.id === r.allowanceId ? A.adoptAt(a) <= now : true) {
						const adopt = { allowanceId: r.allowanceId, requestId: r.requestId, holdNanos: r.hold };
						const res = await at(now, () => stub.adopt(adopt));
						expect(res.adopted).toBe(true);
						r.adopted = true;
						seen.adoptions++;
						if (a?.id === r.allowanceId) A.adopted(a, r.hold);
					}
				}
				await expire(stub, now);
				for (let j = 0; j < isolates.length; j++) {
					const a = isolates[j];
					if (a && a.expiresAt <= now) isolates[j] = null;
				}
			} else if (op < 95) {
				await at(now, () => stub.credit({ keyId, amountNanos: 20_000, idempotencyKey: `top${step}` }));
				credited += 20_000;
			} else {
				await at(now, () => stub.revoke({ change: "changed", scope: keyId, pauseMs: 10_000 }));
			}
			await check(`step ${step} op ${op}`);
		}
		// The interleaving exercised every path.
		expect(seen.takes).toBeGreaterThan(20);
		expect(seen.grants).toBeGreaterThan(2);
		expect(seen.adoptions).toBeGreaterThan(0);
		expect(seen.syncs).toBeGreaterThan(20);
		// Everything running settles; the allowances expire.
		for (const r of running.splice(0)) {
			const cost = rand(r.hold + 1);
			await at(now, () =>
				stub.settle({
					requestId: r.requestId,
					costNanos: cost,
					record: record(keyId),
					...(r.allowanceId ? { allowanceId: r.allowanceId } : {}),
				}),
			);
			costs += cost;
		}
		await expire(stub, now + 10 * TTL);
		const info = await stub.info();
		expect(info.heldNanos).toBe(0);
		expect(info.openHolds).toBe(0);
		expect(info.balanceNanos).toBe(credited - costs);
		expect(info.balanceNanos).toBeGreaterThanOrEqual(-MAX_HOLD);
		const debited = await runInDurableObject(
			stub,
			(_i, state) => state.storage.sql.exec<{ t: number }>("SELECT COALESCE(SUM(cost), 0) AS t FROM settlements").one().t,
		);
		expect(debited).toBe(costs);
	}, 60_000);
});
