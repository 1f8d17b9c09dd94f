import { describe, expect, it } from "vitest";
import type { ModelConfig } from "../../../src/config";
import { holdNanos } from "../../../src/ledger/ledger-client";
import { callsCostNanos, costNanos, nanosToUsd, usageCostNanos, usdToNanos } from "../../../src/money/pricing";

type Pricing = ModelConfig["pricing"];

const TEST_PRICING: Pricing = { input_usd_per_mtok: 1, output_usd_per_mtok: 2 };

/** A decimal price string as integer micro-dollars per Mtok (exact; up to 6 decimals). */
function microPerMtok(price: string): bigint {
	const [whole, frac = ""] = price.split(".");
	return BigInt(whole as string) * 1_000_000n + BigInt(`${frac}000000`.slice(0, 6));
}

/**
 * The exact cost in nano-dollars, rounded half up, computed with integers only:
 * tokens × micro$/Mtok = tokens × 1e-6 $ / 1e6 tokens… = tokens × micro / 1000 nano-dollars.
 */
function exactCostNanos(input: string, output: string, prompt: number, completion: number): number {
	const num = BigInt(prompt) * microPerMtok(input) + BigInt(completion) * microPerMtok(output);
	const den = 1000n;
	return Number((2n * num + den) / (2n * den));
}

function model(pricing: Pricing): ModelConfig {
	return {
		id: "test/price",
		engine_model: "engine-price",
		nodes: ["http://node.test/v1"],
		max_output_tokens: 1000,
		context_length: 8192,
		image_tokens_max: 16_384,
		pricing,
		capabilities: [],
		owned_by: "venym",
	};
}

describe("costNanos", () => {
	it("is prompt × input price + completion × output price, in integer nano-dollars", () => {
		// $1/Mtok = 1_000 nano$/token, $2/Mtok = 2_000 nano$/token.
		expect(costNanos(TEST_PRICING, 0, 0)).toBe(0);
		expect(costNanos(TEST_PRICING, 1, 0)).toBe(1_000);
		expect(costNanos(TEST_PRICING, 0, 1)).toBe(2_000);
		expect(costNanos(TEST_PRICING, 3, 3)).toBe(9_000);
		expect(costNanos(TEST_PRICING, 7, 5)).toBe(17_000);
		expect(costNanos(TEST_PRICING, 1, 40)).toBe(81_000);
		expect(costNanos(TEST_PRICING, 1_000_000, 1_000_000)).toBe(3_000_000_000);
	});

	it("is exact for common catalog prices", () => {
		const p = { input_usd_per_mtok: 0.3, output_usd_per_mtok: 1.2 };
		expect(costNanos(p, 1_000_000, 1_000_000)).toBe(1_500_000_000);
		expect(costNanos(p, 123_457, 98_765)).toBe(123_457 * 300 + 98_765 * 1_200);
		expect(costNanos({ input_usd_per_mtok: 0.07, output_usd_per_mtok: 0.7 }, 123_457, 98_765)).toBe(77_777_490);
		expect(costNanos({ input_usd_per_mtok: 0.15, output_usd_per_mtok: 0.6 }, 3, 7)).toBe(4_650);
		expect(costNanos({ input_usd_per_mtok: 15, output_usd_per_mtok: 75 }, 131_072, 8_192)).toBe(2_580_480_000);
	});

	it("returns an integer and agrees with exact integer arithmetic over a grid of prices and token counts", () => {
		const prices = [
			"0",
			"0.000001",
			"0.0001",
			"0.0005",
			"0.001",
			"0.01",
			"0.015",
			"0.07",
			"0.1",
			"0.123456",
			"0.15",
			"0.2",
			"0.3",
			"0.3333",
			"0.5",
			"0.6",
			"0.7",
			"1",
			"1.0005",
			"1.2",
			"2.5",
			"3",
			"15",
			"75",
		];
		const tokens = [0, 1, 2, 3, 7, 99, 101, 999, 1_001, 4_095, 8_192, 12_345, 99_999, 123_457, 131_072, 1_000_000, 10_000_000];
		let checked = 0;
		for (const a of prices) {
			for (const b of prices) {
				const pricing = { input_usd_per_mtok: Number(a), output_usd_per_mtok: Number(b) };
				for (const p of tokens) {
					for (const c of tokens) {
						const got = costNanos(pricing, p, c);
						const want = exactCostNanos(a, b, p, c);
						if (got !== want || !Number.isInteger(got)) {
							throw new Error(`costNanos(${a}, ${b}, ${p}, ${c}) = ${got}, exact ${want}`);
						}
						checked++;
					}
				}
			}
		}
		expect(checked).toBe(prices.length ** 2 * tokens.length ** 2);
	});

	it("rounds sub-nano totals half up to whole nano-dollars", () => {
		// $0.0001/Mtok is 0.1 nano$/token.
		const tiny = { input_usd_per_mtok: 0.0001, output_usd_per_mtok: 0.0001 };
		expect(costNanos(tiny, 4, 0)).toBe(0);
		expect(costNanos(tiny, 3, 2)).toBe(1); // 0.5 → 1
		expect(costNanos(tiny, 6, 0)).toBe(1);
		expect(costNanos(tiny, 15, 0)).toBe(2);
	});

	it("usageCostNanos prices a usage object the same way", () => {
		expect(usageCostNanos(TEST_PRICING, { prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 })).toBe(9_000);
		// total_tokens is not what is billed.
		expect(usageCostNanos(TEST_PRICING, { prompt_tokens: 7, completion_tokens: 5, total_tokens: 999 })).toBe(17_000);
	});
});

describe("callsCostNanos", () => {
	const usage = (p: number, c: number) => ({ prompt_tokens: p, completion_tokens: c, total_tokens: p + c });

	it("prices each call at its model's prices, rounded once", () => {
		const dear: Pricing = { input_usd_per_mtok: 10, output_usd_per_mtok: 20 };
		const calls = [
			{ pricing: TEST_PRICING, usage: usage(100, 10) },
			{ pricing: dear, usage: usage(50, 5) },
		];
		expect(callsCostNanos(calls)).toBe(100 * 1_000 + 10 * 2_000 + 50 * 10_000 + 5 * 20_000);
		// Half a nano each way: rounded once, not per call.
		const half: Pricing = { input_usd_per_mtok: 0.0005, output_usd_per_mtok: 0 };
		const other: Pricing = { input_usd_per_mtok: 0.0025, output_usd_per_mtok: 0 };
		expect(
			callsCostNanos([
				{ pricing: half, usage: usage(1, 0) },
				{ pricing: other, usage: usage(1, 0) },
			]),
		).toBe(3);
		expect(callsCostNanos([])).toBe(0);
	});

	it("costs what the summed usage costs when every call has the same prices, so it never exceeds a hold for both", () => {
		const odd: Pricing = { input_usd_per_mtok: 0.0015, output_usd_per_mtok: 0.0015 };
		// Per call, 1.5 nanos would round to 2 each (4); the hold for both calls is costNanos(2) = 3.
		const calls = [
			{ pricing: odd, usage: usage(1, 0) },
			{ pricing: { ...odd }, usage: usage(1, 0) },
		];
		expect(callsCostNanos(calls)).toBe(costNanos(odd, 2, 0));
		expect(callsCostNanos(calls)).toBe(3);
	});
});

describe("holdNanos", () => {
	it("is the prompt estimate plus the capped output at the model's prices", () => {
		expect(holdNanos(model(TEST_PRICING), 5, 1000)).toBe(2_005_000);
		expect(holdNanos(model(TEST_PRICING), 5, 40)).toBe(85_000);
		expect(holdNanos(model(TEST_PRICING), 7, 1000, 3_000_000)).toBe(5_007_000);
		expect(holdNanos(model({ input_usd_per_mtok: 0.3, output_usd_per_mtok: 1.2 }), 100, 8192)).toBe(30_000 + 9_830_400);
	});
});

describe("usd ↔ nanos", () => {
	it("usdToNanos rounds to the nearest nano-dollar", () => {
		expect(usdToNanos(0)).toBe(0);
		expect(usdToNanos(1)).toBe(1_000_000_000);
		expect(usdToNanos(10)).toBe(10_000_000_000);
		expect(usdToNanos(1e-9)).toBe(1);
		expect(usdToNanos(0.000009)).toBe(9_000);
		expect(usdToNanos(0.1 + 0.2)).toBe(300_000_000);
		expect(usdToNanos(19.99)).toBe(19_990_000_000);
		expect(usdToNanos(4.35)).toBe(4_350_000_000);
		expect(usdToNanos(1.005)).toBe(1_005_000_000);
		expect(usdToNanos(0.0000000004)).toBe(0);
		expect(usdToNanos(0.0000000006)).toBe(1);
		expect(usdToNanos(-0.5)).toBe(-500_000_000);
		expect(usdToNanos(-0.000009)).toBe(-9_000);
		for (const n of [1, 2, 3, 7, 9_000, 81_000, 2_005_000]) expect(Number.isInteger(usdToNanos(n / 1e9))).toBe(true);
	});

	it("nanosToUsd gives a decimal number with at most 9 decimal places", () => {
		expect(nanosToUsd(0)).toBe(0);
		expect(nanosToUsd(1)).toBe(0.000000001);
		expect(nanosToUsd(9_000)).toBe(0.000009);
		expect(nanosToUsd(2_005_000)).toBe(0.002005);
		expect(nanosToUsd(123_456_789)).toBe(0.123456789);
		expect(nanosToUsd(9_999_991_000)).toBe(9.999991);
		expect(nanosToUsd(-5_000)).toBe(-0.000005);
		expect(nanosToUsd(1_000_000_000_000_001)).toBe(1_000_000.000000001);
		expect(String(nanosToUsd(9_000))).toBe("0.000009");
		expect(String(nanosToUsd(9_999_991_000))).toBe("9.999991");
	});

	it("round-trips every integer nano amount up to ±$1,000,000", () => {
		const samples = [
			0, 1, -1, 2, 9, 10, 99, 999, 1_000, 9_000, 123_456_789, 999_999_999, 1_000_000_001, 9_999_991_000, 10_000_000_007,
			123_456_789_012_345, 999_999_999_999_999, 1_000_000_000_000_000, -1_000_000_000_000_000, -123_456_789_012_345,
		];
		// A deterministic spread of awkward values (LCG).
		let x = 123_456_789;
		for (let i = 0; i < 5_000; i++) {
			x = (x * 1_103_515_245 + 12_345) % 2_147_483_648;
			samples.push(((x * 465_661) % 2_000_000_000_000_000) - 1_000_000_000_000_000);
		}
		for (const n of samples) {
			const back = usdToNanos(nanosToUsd(n));
			if (back !== n) throw new Error(`round trip of ${n}: ${nanosToUsd(n)} → ${back}`);
		}
	});

	it("round-trips USD amounts with up to 9 decimals", () => {
		for (const usd of [0.000001, 0.000009, 0.002005, 0.081, 1.5, 9.999991, 10, 19.99, 123.456789012, 5_000.5]) {
			expect(nanosToUsd(usdToNanos(usd))).toBe(usd);
		}
	});
});

describe("costNanos with cached prompt tokens", () => {
	const pricing: Pricing = { input_usd_per_mtok: 1, output_usd_per_mtok: 2, cached_input_usd_per_mtok: 0.1 };

	it("bills (prompt − cached) × input + cached × cached_input + completion × output", () => {
		expect(costNanos(pricing, 1000, 10, 600)).toBe(400 * 1000 + 600 * 100 + 10 * 2000);
		expect(usageCostNanos(pricing, { prompt_tokens: 1000, completion_tokens: 10, total_tokens: 1010, cached_tokens: 600 })).toBe(
			460_000 + 20_000,
		);
	});

	it("bills cached tokens at the input price when no cached price is set, and never more than the prompt", () => {
		expect(costNanos(TEST_PRICING, 1000, 0, 600)).toBe(1_000_000);
		expect(costNanos(pricing, 100, 0, 5_000)).toBe(100 * 100);
		expect(costNanos(pricing, 100, 0, -5)).toBe(100 * 1000);
	});
});
