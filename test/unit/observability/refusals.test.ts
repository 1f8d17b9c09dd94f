import { describe, expect, it } from "vitest";
import { RefusalSampler, recordRefusal } from "../../../src/observability/refusals";

describe("RefusalSampler", () => {
	it("admits its bound a minute, counts the rest, and hands the count to the next admitted one", () => {
		const s = new RefusalSampler(3);
		const t0 = 10 * 60_000;
		const admitted = Array.from({ length: 5 }, (_, i) => s.admit(t0 + i));
		expect(admitted).toEqual([{ suppressed: 0 }, { suppressed: 0 }, { suppressed: 0 }, null, null]);
		// The next minute: three more, the first carrying the two left out.
		expect(s.admit(t0 + 60_000)).toEqual({ suppressed: 2 });
		expect(s.admit(t0 + 60_001)).toEqual({ suppressed: 0 });
	});
});

describe("RefusalSampler's share per source", () => {
	it("keeps a share of the bound for each source: a flood of bad keys cannot take it all", () => {
		const s = new RefusalSampler(5, 2);
		const t0 = 10 * 60_000;
		expect(s.admit(t0, null)).toEqual({ suppressed: 0 });
		expect(s.admit(t0, null)).toEqual({ suppressed: 0 });
		expect(s.admit(t0, null)).toBeNull();
		expect(s.admit(t0, null)).toBeNull();
		expect(s.admit(t0, "key_a")).toEqual({ suppressed: 2 });
		expect(s.admit(t0, "key_a")).toEqual({ suppressed: 0 });
		expect(s.admit(t0, "key_a")).toBeNull();
		expect(s.admit(t0, "key_b")).toEqual({ suppressed: 1 });
		// The isolate's bound still holds over all sources.
		expect(s.admit(t0, "key_c")).toBeNull();
		expect(s.admit(t0 + 60_000, null)).toEqual({ suppressed: 1 });
	});
});

describe("recordRefusal", () => {
	/** A D1 stand-in that keeps what was bound to each insert. */
	function fakeD1(fail = false) {
		const inserted: unknown[][] = [];
		const d1 = {
			prepare: () => ({
				bind: (...args: unknown[]) => ({
					run: async () => {
						if (fail) throw new Error("D1 down");
						inserted.push(args);
						return { meta: { changes: 1 } };
					},
				}),
			}),
		} as unknown as D1Database;
		return { d1, inserted };
	}

	const refusal = {
		requestId: "req_1",
		status: 401,
		code: "invalid_api_key",
		message: "x".repeat(1000),
		lane: "chat",
		keyId: null,
		model: "m",
	};

	it("writes a bounded message and the suppressed count, within the sampler's bound", async () => {
		const { d1, inserted } = fakeD1();
		const sampler = new RefusalSampler(1);
		await recordRefusal(d1, refusal, 1000, sampler);
		await recordRefusal(d1, { ...refusal, requestId: "req_2" }, 1001, sampler);
		await recordRefusal(d1, { ...refusal, requestId: "req_3" }, 61_000, sampler);
		expect(inserted.map((a) => a[0])).toEqual(["req_1", "req_3"]);
		expect(String(inserted[0]?.[4]).length).toBe(300);
		expect(inserted[1]?.[8]).toBe(1);
	});

	it("never throws when D1 fails: the answer has already gone out", async () => {
		const { d1 } = fakeD1(true);
		await expect(recordRefusal(d1, refusal, 1000, new RefusalSampler(1))).resolves.toBeUndefined();
	});
});
