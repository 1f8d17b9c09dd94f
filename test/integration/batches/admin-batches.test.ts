// The console's Batches view and its admin API: every key's batches with status, progress and cost
// so far (GET /admin/batches), and a cancel (POST /admin/batches/{id}/cancel).
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { admin, createKey, engineRequests, gw, releaseEngine, waitFor } from "../../support/gateway";
import { expectBooks } from "../../support/ledger";

interface AdminBatch {
	id: string;
	api_id: string;
	api: string;
	key_id: string;
	model: string;
	status: string;
	request_counts: { total: number; completed: number; failed: number };
	cost_usd: number;
	ended_at: number | null;
}

async function createMessageBatch(key: string, requests: unknown[]): Promise<{ id: string }> {
	const res = await gw("/v1/messages/batches", {
		method: "POST",
		headers: { "x-api-key": key, "content-type": "application/json" },
		body: JSON.stringify({ requests }),
	});
	expect(res.status).toBe(200);
	return (await res.json()) as { id: string };
}

async function listed(query = ""): Promise<AdminBatch[]> {
	const res = await admin(`/batches${query}`);
	expect(res.status).toBe(200);
	return ((await res.json()) as { data: AdminBatch[] }).data;
}

describe("admin batches (the console's Batches view)", () => {
	it("lists every key's batches with progress and cost so far, and cancels one", async () => {
		const key = await createKey({ balance_usd: 10 });
		const marker = `admin-${crypto.randomUUID()}`;
		const requests = Array.from({ length: 6 }, (_, i) => ({
			custom_id: `r${i}`,
			params: { model: "test/gated", max_tokens: 20, messages: [{ role: "user", content: `${marker} ${i}` }] },
		}));
		const created = await createMessageBatch(key.key, requests);
		await waitFor(async () => (await engineRequests({ contains: marker })).length === 4);
		const mine = (await listed(`?key_id=${key.id}`))[0];
		expect(mine).toMatchObject({
			id: created.id.slice(3),
			api_id: created.id,
			api: "anthropic",
			key_id: key.id,
			model: "test/gated",
			status: "in_progress",
			request_counts: { total: 6, completed: 0, failed: 0 },
			cost_usd: 0,
			ended_at: null,
		});
		expect((await admin(`/batches/${mine?.id}/cancel`, { method: "POST" })).status).toBe(200);
		expect((await listed(`?key_id=${key.id}`))[0]?.status).toBe("cancelling");
		await releaseEngine(marker);
		const done = await waitFor(async () => {
			const [b] = await listed(`?key_id=${key.id}&status=cancelled`);
			return b ?? null;
		});
		expect(done.request_counts).toEqual({ total: 6, completed: 4, failed: 2 });
		expect(done.ended_at).not.toBeNull();
		const { charged } = await expectBooks(key.id, 10e9);
		expect(done.cost_usd).toBe(charged / 1e9);
		expect((await admin("/batches/batch_nope/cancel", { method: "POST" })).status).toBe(404);
	});

	it("pages with after and needs the admin token", async () => {
		const key = await createKey({ balance_usd: 10 });
		for (const n of [1, 2, 3]) {
			await createMessageBatch(key.key, [
				{ custom_id: "x", params: { model: "test/ok", max_tokens: 5, messages: [{ role: "user", content: `page ${n}` }] } },
			]);
		}
		const first = (await (await admin(`/batches?key_id=${key.id}&limit=2`)).json()) as {
			data: AdminBatch[];
			has_more: boolean;
			last_id: string;
		};
		expect(first.data).toHaveLength(2);
		expect(first.has_more).toBe(true);
		const rest = (await (await admin(`/batches?key_id=${key.id}&limit=2&after=${first.last_id}`)).json()) as {
			data: AdminBatch[];
			has_more: boolean;
		};
		expect(rest.data).toHaveLength(1);
		expect(rest.has_more).toBe(false);
		expect((await gw("/admin/batches", { headers: { authorization: `Bearer ${key.key}` } })).status).toBe(401);
	});

	it("serves the view's module and its section in the console page", async () => {
		const page = await (await gw("/admin")).text();
		expect(page).toContain('id="batches-view"');
		expect(page).toContain('data-view="batches"');
		const js = await gw("/admin/js/batches.js");
		expect(js.status).toBe(200);
		expect(await js.text()).toContain("export async function loadBatches");
		expect(env.ASSETS).toBeDefined();
	});
});
