/**
 * `GET /admin/keys` for the operator console: a `name` filter (a case-insensitive substring,
 * bounded like a name, a 400 naming `name` otherwise) that pages like the full list, and each
 * listed key's balance, spend and holds from its ledger, the same numbers `GET /admin/keys/{id}`
 * shows. Also the console page itself: public, under a strict CSP, while the admin API is not.
 */

import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { expect400 } from "../../support/admin-input";
import { admin, chat, createKey, gw, waitFor } from "../../support/gateway";

interface ListedKey {
	id: string;
	name: string;
	balance_usd: number | null;
	spent_usd: number | null;
	held_usd: number | null;
	open_holds: number | null;
	revoked: boolean;
}
interface KeyList {
	object: "list";
	data: ListedKey[];
	next_cursor: string | null;
}

async function list(query: string): Promise<KeyList> {
	const res = await admin(`/keys${query}`);
	expect(res.status, await res.clone().text()).toBe(200);
	return (await res.json()) as KeyList;
}

const tag = () => crypto.randomUUID().slice(0, 8);

type Json = Record<string, unknown>;

describe("GET /admin/keys name filter", () => {
	it("keeps the keys whose name contains the text, ignoring case", async () => {
		const t = tag();
		const a = await createKey({ name: `Console-${t}-Alpha` });
		const b = await createKey({ name: `console-${t}-beta` });
		await createKey({ name: `other-${t}` });
		const found = await list(`?name=${encodeURIComponent(`CONSOLE-${t}`)}`);
		expect(found.data.map((k) => k.id)).toEqual([b.id, a.id]);
		const middle = await list(`?name=${encodeURIComponent(`${t}-alp`)}`);
		expect(middle.data.map((k) => k.id)).toEqual([a.id]);
	});

	it("treats % and _ as plain characters", async () => {
		const t = tag();
		const pct = await createKey({ name: `pct-${t}-100%_off` });
		await createKey({ name: `pct-${t}-100xyoff` });
		const found = await list(`?name=${encodeURIComponent(`${t}-100%_`)}`);
		expect(found.data.map((k) => k.id)).toEqual([pct.id]);
		// Other tests' keys may carry a % too (the database is shared in the inner loop): all of them, and only them.
		const percent = (await list(`?name=${encodeURIComponent("%")}&limit=1000`)).data;
		expect(percent.map((k) => k.id)).toContain(pct.id);
		expect(percent.every((k) => k.name.includes("%"))).toBe(true);
	});

	it("pages a filtered list with next_cursor", async () => {
		const t = tag();
		const ids: string[] = [];
		for (let i = 0; i < 3; i++) ids.push((await createKey({ name: `paged-${t}-${i}` })).id);
		const first = await list(`?name=paged-${t}&limit=2`);
		expect(first.data).toHaveLength(2);
		expect(first.next_cursor).not.toBeNull();
		const second = await list(`?name=paged-${t}&limit=2&cursor=${encodeURIComponent(first.next_cursor ?? "")}`);
		expect(second.next_cursor).toBeNull();
		expect([...first.data, ...second.data].map((k) => k.id)).toEqual(ids.reverse());
	});

	it("lists every key for an empty name", async () => {
		// Two keys with nothing in common in their names. Other tests' keys are listed too, some
		// dated later than these (the database is shared in the inner loop): page the listing with
		// an empty name and the one without a name side by side until this test's keys went by.
		const t = tag();
		const older = await createKey({ name: `empty-${t}` });
		const newer = await createKey({ name: `vacant-${t}` });
		const seen: string[] = [];
		let cursor: string | null = null;
		do {
			const page = `limit=10${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`;
			const all = await list(`?name=&${page}`);
			const plain = await list(`?${page}`);
			expect([all.data.map((k) => k.id), all.next_cursor]).toEqual([plain.data.map((k) => k.id), plain.next_cursor]);
			seen.push(...all.data.map((k) => k.id));
			cursor = all.next_cursor;
		} while (cursor && !seen.includes(older.id));
		expect(seen).toContain(older.id);
		expect(seen.indexOf(newer.id)).toBe(seen.indexOf(older.id) - 1);
		expect(new Set(seen).size).toBe(seen.length);
	});

	it("answers 400 naming 'name' for a name too long or with a line break", async () => {
		for (const bad of ["x".repeat(201), "a\nb", "tab\there"]) {
			const res = await admin(`/keys?name=${encodeURIComponent(bad)}`);
			const body = (await res.json()) as { error: { param: string; type: string } };
			expect(res.status).toBe(400);
			expect(body.error).toMatchObject({ param: "name", type: "invalid_request_error" });
		}
	});
});

describe("GET /admin/keys balances", () => {
	it("shows each key's balance, spend and holds as GET /admin/keys/{id} does", async () => {
		const t = tag();
		const rich = await createKey({ name: `bal-${t}-rich`, balance_usd: 7.25 });
		const poor = await createKey({ name: `bal-${t}-poor`, balance_usd: 0 });
		const res = await chat(rich.key, { model: "test/ok", messages: [{ role: "user", content: "hello" }] });
		expect(res.status).toBe(200);
		await res.text();
		// Settlement runs under waitUntil after the answer.
		const listed = await waitFor(async () => {
			const page = await list(`?name=bal-${t}`);
			const r = page.data.find((k) => k.id === rich.id);
			return r && (r.spent_usd ?? 0) > 0 ? page : null;
		});
		const byId = new Map(listed.data.map((k) => [k.id, k]));
		const one = (await (await admin(`/keys/${rich.id}`)).json()) as ListedKey;
		expect(byId.get(rich.id)).toMatchObject({
			balance_usd: one.balance_usd,
			spent_usd: one.spent_usd,
			held_usd: 0,
			open_holds: 0,
		});
		expect(one.balance_usd).toBeCloseTo(7.25 - (one.spent_usd ?? 0), 9);
		expect(byId.get(poor.id)).toMatchObject({ balance_usd: 0, spent_usd: 0, held_usd: 0, open_holds: 0 });
	});

	it("shows the new balance after a top-up", async () => {
		const t = tag();
		const k = await createKey({ name: `topup-${t}`, balance_usd: 1 });
		const credit = await admin(`/keys/${k.id}/credits`, { method: "POST", body: JSON.stringify({ amount_usd: 2.5 }) });
		expect(credit.status).toBe(200);
		const listed = (await list(`?name=${encodeURIComponent(`topup-${t}`)}`)).data;
		expect(listed).toEqual([expect.objectContaining({ id: k.id, balance_usd: 3.5 })]);
	});
});

describe("the console page", () => {
	it("serves /admin and /admin/ without a token, under a strict Content-Security-Policy", async () => {
		for (const path of ["/admin", "/admin/"]) {
			const res = await gw(path);
			expect(res.status).toBe(200);
			expect(res.headers.get("content-type")).toMatch(/^text\/html/);
			const csp = res.headers.get("content-security-policy") ?? "";
			expect(csp).toContain("default-src 'none'");
			expect(csp).toContain("script-src 'self'");
			expect(csp).toContain("frame-ancestors 'none'");
			expect(res.headers.get("x-content-type-options")).toBe("nosniff");
			expect(res.headers.get("referrer-policy")).toBe("no-referrer");
			const html = await res.text();
			expect(html).toContain('<script type="module" src="/admin/js/app.js"></script>');
			// No inline script or style: the CSP would block them.
			expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
			expect(html).not.toMatch(/<style|\sstyle=/);
		}
	});

	it("serves its script and style, and nothing else, without a token", async () => {
		const js = await gw("/admin/js/app.js");
		expect(js.status).toBe(200);
		expect(js.headers.get("content-type")).toMatch(/javascript/);
		expect(js.headers.get("content-security-policy")).toContain("default-src 'none'");
		await js.text();
		const css = await gw("/admin/console.css");
		expect(css.status).toBe(200);
		expect(css.headers.get("content-type")).toMatch(/^text\/css/);
		await css.text();
		for (const path of ["/admin/js/nope.js", "/admin/index.html", "/console.css", "/js/app.js"]) {
			const res = await gw(path);
			expect(res.status, path).not.toBe(200);
			await res.text();
		}
	});

	it("still guards the admin API", async () => {
		const res = await gw("/admin/keys");
		expect(res.status).toBe(401);
		await res.text();
	});
});

describe("GET /admin/keys/{id}/credits", () => {
	interface Credit {
		amount_usd: number;
		balance_usd: number;
		note: string | null;
		created_at: number;
	}
	const credits = async (id: string, query = "") => {
		const res = await admin(`/keys/${id}/credits${query}`);
		expect(res.status, await res.clone().text()).toBe(200);
		return ((await res.json()) as { object: string; data: Credit[] }).data;
	};
	const credit = (id: string, amount_usd: number, note: string, idem: string) =>
		admin(`/keys/${id}/credits`, {
			method: "POST",
			headers: { "idempotency-key": idem },
			body: JSON.stringify({ amount_usd, note }),
		});

	it("lists the initial balance, top-ups and debits, newest first, each once", async () => {
		const k = await createKey({ balance_usd: 5 });
		const idem = `t-${tag()}`;
		expect((await credit(k.id, 2.5, "top-up", idem)).status).toBe(200);
		// A replay of the same top-up is not a second line.
		expect((await credit(k.id, 2.5, "top-up", idem)).status).toBe(200);
		expect((await credit(k.id, -1.25, "refund", `t-${tag()}`)).status).toBe(200);
		const data = await credits(k.id);
		expect(data.map((c) => [c.amount_usd, c.balance_usd, c.note])).toEqual([
			[-1.25, 6.25, "refund"],
			[2.5, 7.5, "top-up"],
			[5, 5, "initial balance"],
		]);
		for (const c of data) expect(Number.isInteger(c.created_at)).toBe(true);
		expect((await credits(k.id, "?limit=1")).map((c) => c.note)).toEqual(["refund"]);
	});

	it("treats an empty Idempotency-Key as none: every such credit applies", async () => {
		const k = await createKey({ balance_usd: 1 });
		for (const amount of [1, 1, 2]) {
			const res = await credit(k.id, amount, "blank key", "");
			expect(res.status, await res.clone().text()).toBe(200);
			expect(((await res.json()) as { applied: boolean }).applied).toBe(true);
		}
		expect((await credits(k.id)).map((c) => c.balance_usd)).toEqual([5, 3, 2, 1]);
	});

	it("refuses a debit that would take what running requests hold, then takes it once they settled", async () => {
		const k = await createKey({ balance_usd: 1 });
		const running = await chat(k.key, { model: "test/slow", stream: true, messages: [{ role: "user", content: "hi" }] });
		expect(running.status).toBe(200);
		const view = async () => (await (await admin(`/keys/${k.id}`)).json()) as { balance_usd: number; held_usd: number };
		const during = await view();
		expect(during.held_usd).toBeGreaterThan(0);
		const refused = await credit(k.id, -(during.balance_usd - during.held_usd / 2), "too much", `t-${tag()}`);
		expect(refused.status).toBe(409);
		expect(((await refused.json()) as { error: { code: string; param: string } }).error).toMatchObject({
			code: "balance_held",
			param: "amount_usd",
		});
		await running.text();
		await waitFor(async () => (await view()).held_usd === 0);
		const after = await view();
		const taken = await credit(k.id, -after.balance_usd, "all of it", `t-${tag()}`);
		expect(taken.status, await taken.clone().text()).toBe(200);
		expect((await view()).balance_usd).toBe(0);
	});

	it("is a 404 for an unknown key and a 400 for a bad limit", async () => {
		expect((await admin("/keys/key_nope/credits")).status).toBe(404);
		const k = await createKey({ balance_usd: 1 });
		const bad = await admin(`/keys/${k.id}/credits?limit=0`);
		expect(bad.status).toBe(400);
		expect(((await bad.json()) as { error: { param: string } }).error.param).toBe("limit");
	});
});

describe("key names stay readable", () => {
	it("refuses bidirectional controls and zero-width characters in a name, naming the field", async () => {
		for (const name of ["\u202Egnp.exe", "a\u200Bb", "x\u2066y\u2069", "\uFEFFkey"]) {
			const res = await admin("/keys", { method: "POST", body: JSON.stringify({ name }) });
			expect(res.status, JSON.stringify(name)).toBe(400);
			expect(((await res.json()) as { error: { param: string } }).error.param).toBe("name");
		}
		const k = await createKey({ name: `plain-${tag()}` });
		const patched = await admin(`/keys/${k.id}`, { method: "PATCH", body: JSON.stringify({ name: "evil\u202E" }) });
		expect(patched.status).toBe(400);
	});
});

describe("key names", () => {
	const BAD: Array<[string, string, string?]> = [
		["a NUL", "a\u0000b"],
		["a newline", "a\nb"],
		["a tab", "a\tb"],
		["DEL", "a\u007fb"],
		["a C1 control", "a\u0085b"],
		["a line separator", "a\u2028b"],
		// Refused when the body is read (http/lone-surrogate.ts), with the code of an invalid value.
		["a lone high surrogate", "a\ud800b", "invalid_value"],
		["a lone low surrogate", "\udfff", "invalid_value"],
	];

	it.each(BAD)("POST refuses a name with %s", async (_label, name, code) => {
		await expect400(await admin("/keys", { method: "POST", body: JSON.stringify({ name }) }), "name", code ?? null);
	});

	it.each(BAD)("PATCH refuses a name with %s and keeps the old one", async (_label, name, code) => {
		const { id } = await createKey({ name: "before" });
		await expect400(await admin(`/keys/${id}`, { method: "PATCH", body: JSON.stringify({ name }) }), "name", code ?? null);
		expect(((await (await admin(`/keys/${id}`)).json()) as Json).name).toBe("before");
	});

	it("keeps names with accents, CJK and emoji (surrogate pairs) intact", async () => {
		const name = "Café 東京 🚀 — prod";
		const { id } = await createKey({ name });
		expect(((await (await admin(`/keys/${id}`)).json()) as Json).name).toBe(name);
	});
});

describe("GET /admin/keys paging", () => {
	type Page = { data: Array<{ id: string; created_at: number }>; next_cursor: string | null };

	it("returns every key exactly once when many share a created_at millisecond", async () => {
		const ids = new Set<string>();
		for (let i = 0; i < 7; i++) ids.add((await createKey({ name: `same-ms-${i}` })).id);
		// Newer than anything else in this file, all in one millisecond.
		const sameMs = Date.now() + 86_400_000;
		for (const id of ids) await env.DB.prepare("UPDATE api_keys SET created_at = ? WHERE id = ?").bind(sameMs, id).run();

		const seen: string[] = [];
		let cursor: string | null = null;
		let pages = 0;
		do {
			const res = await admin(`/keys?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`);
			expect(res.status).toBe(200);
			const page = (await res.json()) as Page;
			seen.push(...page.data.map((k) => k.id));
			cursor = page.next_cursor;
			pages++;
		} while (cursor && pages < 100);
		expect(seen.filter((id) => ids.has(id)).sort()).toEqual([...ids].sort());
		expect(new Set(seen).size).toBe(seen.length);
		// Newest first: the seven same-millisecond keys lead, in descending id order.
		expect(seen.slice(0, 7)).toEqual([...ids].sort().reverse());
	});

	it.each([
		"garbage",
		"123",
		":key_x",
		"12x:key_a",
		"-5:key_a",
		"1e3:key_a",
		"99999999999999999999:key_a",
		"1:\u0000",
		"1:key a",
	])("refuses the malformed cursor %s with 400", async (cursor) => {
		await createKey();
		await expect400(await admin(`/keys?cursor=${encodeURIComponent(cursor)}`), "cursor");
	});
});
