import { env } from "cloudflare:test";
import type { UsageRecordInput } from "../../src/ledger/durable/usage-flush";

/**
 * Usage records a test writes straight to D1 (flushOutbox) and reads back, for keys of its own.
 * Other files share usage_records in the inner loop, so request ids carry `prefix` and a marker
 * of this run, and reads look at the given keys only.
 */
export function usageRecordsFor(prefix: string) {
	const run = crypto.randomUUID().slice(0, 8);
	let seq = 0;
	return {
		/** A completed record of `keyId` at `createdAt`: the i-th has i prompt tokens, 2i completion, 1000i nano-dollars, and alternates models. */
		rec(keyId: string, createdAt: number, i = ++seq): UsageRecordInput {
			return {
				request_id: `req_${prefix}_${run}_${String(i).padStart(6, "0")}`,
				key_id: keyId,
				model: i % 2 ? "test/ok" : "test/reasoning",
				node: "http://node.test/v1",
				prompt_tokens: i,
				completion_tokens: 2 * i,
				cost_nanos: 1000 * i,
				status: "completed",
				estimated: false,
				created_at: createdAt,
			};
		},
		/** The request ids of these two keys' records still in D1, sorted. */
		async ids(keyA: string, keyB: string): Promise<string[]> {
			const { results } = await env.DB.prepare(
				"SELECT request_id FROM usage_records WHERE key_id IN (?1, ?2) ORDER BY request_id",
			)
				.bind(keyA, keyB)
				.all<{ request_id: string }>();
			return results.map((r) => r.request_id);
		},
	};
}
