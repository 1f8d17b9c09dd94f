/** GET /admin/usage: filters, paging with next_cursor, since, and the admin token. Amounts as in test/support/billing.ts. */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { expect400 } from "../../support/admin-input";
import { type ErrorBody, ping, settledInfo, type UsagePage, usagePage } from "../../support/billing";
import { admin, type CreatedKey, chat, createKey, gw } from "../../support/gateway";

describe("GET /admin/usage", () => {
	async function fill(k: CreatedKey, n: number): Promise<string[]> {
		const ids = await Promise.all(
			Array.from({ length: n }, async () => {
				const res = await chat(k.key, { model: "test/ok", messages: [{ role: "user", content: ping() }] });
				expect(res.status).toBe(200);
				return res.headers.get("x-request-id") as string;
			}),
		);
		await settledInfo(k.id, n);
		return ids;
	}

	it("filters by key_id and pages with limit + next_cursor without duplicates or gaps", async () => {
		const a = await createKey({ balance_usd: 10 });
		const b = await createKey({ balance_usd: 10 });
		const [idsA, idsB] = await Promise.all([fill(a, 11), fill(b, 4)]);

		const all = await usagePage(`?key_id=${a.id}&limit=1000`);
		expect(all.next_cursor).toBeNull();
		expect(all.data.map((r) => r.request_id).sort()).toEqual([...idsA].sort());
		expect(all.data.every((r) => r.key_id === a.id)).toBe(true);

		for (const limit of [1, 3, 4, 11]) {
			const seen: string[] = [];
			let cursor: string | null = null;
			let pages = 0;
			do {
				const page: UsagePage = await usagePage(
					`?key_id=${a.id}&limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`,
				);
				expect(page.data.length).toBeLessThanOrEqual(limit);
				seen.push(...page.data.map((r) => r.request_id));
				cursor = page.next_cursor;
				pages++;
				expect(pages).toBeLessThanOrEqual(12);
			} while (cursor);
			expect(new Set(seen).size, `limit ${limit}: duplicates`).toBe(seen.length);
			expect(seen, `limit ${limit}: same order as one page`).toEqual(all.data.map((r) => r.request_id));
			expect(pages).toBe(Math.ceil(11 / limit));
		}

		// Newest first.
		const times = all.data.map((r) => r.created_at);
		expect([...times].sort((x, y) => y - x)).toEqual(times);

		const other = await usagePage(`?key_id=${b.id}`);
		expect(other.data.map((r) => r.request_id).sort()).toEqual([...idsB].sort());
	});

	it("filters by since (unix seconds or ISO 8601)", async () => {
		const k = await createKey({ balance_usd: 10 });
		const early = await fill(k, 2);
		// Records carry created_at in whole seconds. Date the early ones an hour back instead of
		// waiting for the clock to cross a second: the boundary falls between them and the rest.
		await env.DB.prepare("UPDATE usage_records SET created_at = created_at - 3600000 WHERE key_id = ?").bind(k.id).run();
		const boundary = Math.floor(Date.now() / 1000) - 60;
		const late = await fill(k, 3);

		const bySeconds = await usagePage(`?key_id=${k.id}&since=${boundary}`);
		expect(bySeconds.data.map((r) => r.request_id).sort()).toEqual([...late].sort());
		for (const r of bySeconds.data) expect(r.created_at).toBeGreaterThanOrEqual(boundary);

		const iso = new Date(boundary * 1000).toISOString();
		const byIso = await usagePage(`?key_id=${k.id}&since=${encodeURIComponent(iso)}`);
		expect(byIso.data.map((r) => r.request_id).sort()).toEqual([...late].sort());

		const everything = await usagePage(`?key_id=${k.id}&since=0`);
		expect(everything.data.map((r) => r.request_id).sort()).toEqual([...early, ...late].sort());

		const future = await usagePage(`?key_id=${k.id}&since=${boundary + 3600}`);
		expect(future.data).toEqual([]);
		expect(future.next_cursor).toBeNull();

		// since and paging together.
		const p1 = await usagePage(`?key_id=${k.id}&since=${boundary}&limit=2`);
		expect(p1.data).toHaveLength(2);
		expect(p1.next_cursor).not.toBeNull();
		const p2 = await usagePage(
			`?key_id=${k.id}&since=${boundary}&limit=2&cursor=${encodeURIComponent(p1.next_cursor as string)}`,
		);
		expect(p2.data).toHaveLength(1);
		expect(p2.next_cursor).toBeNull();
		expect([...p1.data, ...p2.data].map((r) => r.request_id).sort()).toEqual([...late].sort());

		const bad = await admin(`/usage?since=yesterday`);
		expect(bad.status).toBe(400);
		expect(((await bad.json()) as ErrorBody).error.param).toBe("since");
	});

	it("usage requires the admin token", async () => {
		const k = await createKey({ balance_usd: 1 });
		expect((await gw("/admin/usage")).status).toBe(401);
		expect((await gw("/admin/usage", { headers: { authorization: `Bearer ${k.key}` } })).status).toBe(401);
	});
});

describe("GET /admin/usage paging", () => {
	it.each([
		"Infinity:x",
		"1e400:x",
		"-1:x",
		"1.5:x",
		"1e3:x",
		"NaN:x",
		"0x10:x",
		" 5:x",
		"99999999999999999999:x",
		"5:",
		"1:\u0000",
		"1:req_x\nreq_y",
		"1:req x",
		`1:${"r".repeat(200)}`,
		"5",
		":x",
		"garbage",
	])("refuses the malformed cursor %s with 400", async (cursor) => {
		await expect400(await admin(`/usage?cursor=${encodeURIComponent(cursor)}`), "cursor");
	});

	it("accepts a well-formed cursor", async () => {
		const res = await admin(`/usage?cursor=${encodeURIComponent(`${Date.now()}:req_x`)}`);
		expect(res.status).toBe(200);
	});

	it.each(["99999999999999999999", "1e400", "9999-12-31", "9000000000000"])("refuses since=%s with 400", async (since) => {
		await expect400(await admin(`/usage?since=${since}`), "since");
		await expect400(await admin(`/usage?until=${since}`), "until");
	});
});
