/**
 * Attack round six: the console's refused requests are bounded per isolate a minute
 * (observability/refusals.ts). A flood of bad keys, which costs an attacker nothing, used to take
 * the whole bound, so that a real key's refusals that minute (its 402s, its 429s) went unrecorded:
 * hidden from GET /admin/refusals. Each source (a paying key, or no key at all) now has a share
 * of the bound, so the flood cannot hide another key's refusals.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { admin, chat, createKey, waitFor } from "../../support/gateway";

const hi = { model: "test/ok", messages: [{ role: "user", content: "hi" }] };

beforeAll(() => {
	vi.spyOn(console, "log").mockImplementation(() => {});
});
afterAll(() => vi.restoreAllMocks());

describe("a flood of bad keys", () => {
	it("does not hide a real key's refusal recorded the same minute", async () => {
		const broke = await createKey({ name: "flood-victim", balance_usd: 0 });
		// Start just after a minute boundary would be ideal; the flood is fast enough to share its minute.
		const flood = await Promise.all(
			Array.from({ length: 40 }, () => chat("vk-flood-not-a-key-0123456789abcdef", hi).then((r) => r.text())),
		);
		expect(flood).toHaveLength(40);
		const res = await chat(broke.key, hi);
		expect(res.status).toBe(402);
		const id = res.headers.get("x-request-id");
		const rows = await waitFor(async () => {
			const r = await admin(`/refusals?key_id=${broke.id}`);
			const data = ((await r.json()) as { data: { request_id: string }[] }).data;
			return data.some((x) => x.request_id === id) ? data : null;
		}, 3000).catch(() => null);
		expect(rows, "the victim's 402 was not recorded").not.toBeNull();
	});
});
