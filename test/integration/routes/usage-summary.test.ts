/**
 * GET /admin/usage/summary: hourly rollups written in the outbox flush's own D1 batch. Over an
 * hour-aligned window its sums equal the sums of the usage records (GET /admin/usage) over the
 * same filter, exactly, whatever the grouping; a retried flush never counts twice.
 */
import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { beforeAll, describe, expect, it } from "vitest";
import { flushOutbox, type UsageRecordInput } from "../../../src/ledger/durable/usage-flush";
import { admin, type CreatedKey, chat, createKey, gw, waitFor } from "../../support/gateway";
import { freshKeyId, ledger } from "../../support/ledger";
import { hideErrorsMentioning } from "../../support/quiet-errors";

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const APP = "https://app.example";

interface UsageRecord {
	request_id: string;
	key_id: string;
	model: string;
	prompt_tokens: number;
	completion_tokens: number;
	cost_nanos: number;
	search_count: number;
	cached_tokens: number;
	created_at: number;
}

interface SummaryRow {
	period: string;
	model?: string;
	key_id?: string;
	requests: number;
	prompt_tokens: number;
	completion_tokens: number;
	total_tokens: number;
	cost_usd: number;
	cost_nanos: number;
	search_count: number;
	cached_tokens: number;
	cache_hit_rate: number;
}

interface Summary {
	object: "list";
	granularity: string;
	group_by: string | null;
	since: string;
	until: string;
	data: SummaryRow[];
}

type ErrorBody = { error: { message: string; type: string; param: string | null; code: string | null } };

const iso = (ms: number) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");
const usd = (nanos: number) => Number((nanos / 1e9).toFixed(9));

/** Waits until the key's requests have settled and its outbox is flushed to D1. */
async function flushed(keyId: string, records: number): Promise<void> {
	await waitFor(async () => {
		const i = await ledger(keyId).info();
		if (i.openHolds !== 0 || i.outboxSize !== 0) {
			if (i.outboxSize > 0) await runDurableObjectAlarm(ledger(keyId));
			return false;
		}
		const n = await env.DB.prepare("SELECT COUNT(*) AS n FROM usage_records WHERE key_id = ?").bind(keyId).first<{ n: number }>();
		return (n?.n ?? 0) >= records;
	}, 10_000);
}

/** Every usage record GET /admin/usage lists for the query, all pages. */
type Query = Record<string, string | undefined>;

/** The query string of the defined entries. */
const qs = (query: Query) => new URLSearchParams(Object.entries(query).filter((e): e is [string, string] => e[1] !== undefined));

async function records(query: Query): Promise<UsageRecord[]> {
	const out: UsageRecord[] = [];
	let cursor: string | null = null;
	do {
		const res = await admin(`/usage?${qs({ ...query, limit: "1000", cursor: cursor ?? undefined })}`);
		expect(res.status).toBe(200);
		const page = (await res.json()) as { data: UsageRecord[]; next_cursor: string | null };
		out.push(...page.data);
		cursor = page.next_cursor;
	} while (cursor);
	return out;
}

async function summary(query: Query): Promise<Summary> {
	const res = await admin(`/usage/summary?${qs(query)}`);
	const body = (await res.json()) as Summary;
	expect(res.status, JSON.stringify(body)).toBe(200);
	return body;
}

async function expectError(query: string, param: string): Promise<ErrorBody> {
	const res = await admin(`/usage/summary?${query}`);
	const body = (await res.json()) as ErrorBody;
	expect(res.status, JSON.stringify(body)).toBe(400);
	expect(body.error.type).toBe("invalid_request_error");
	expect(body.error.param).toBe(param);
	return body;
}

/** The summary rows the records should give: sums per bucket (and group), sorted as the API sorts. */
function expected(recs: UsageRecord[], unit: number, groupBy?: "model" | "key"): SummaryRow[] {
	const rows = new Map<string, SummaryRow & { start: number; group: string }>();
	for (const r of recs) {
		const start = Math.floor((r.created_at * 1000) / unit) * unit;
		const group = groupBy === "model" ? r.model : groupBy === "key" ? r.key_id : "";
		const k = `${start}\u0000${group}`;
		let row = rows.get(k);
		if (!row) {
			row = {
				start,
				group,
				period: iso(start),
				...(groupBy === "model" ? { model: group } : groupBy === "key" ? { key_id: group } : {}),
				requests: 0,
				prompt_tokens: 0,
				completion_tokens: 0,
				total_tokens: 0,
				cost_usd: 0,
				cost_nanos: 0,
				search_count: 0,
				cached_tokens: 0,
				cache_hit_rate: 0,
			};
			rows.set(k, row);
		}
		row.requests += 1;
		row.prompt_tokens += r.prompt_tokens;
		row.completion_tokens += r.completion_tokens;
		row.total_tokens += r.prompt_tokens + r.completion_tokens;
		row.cost_nanos += r.cost_nanos;
		row.search_count += r.search_count;
		row.cached_tokens += r.cached_tokens ?? 0;
	}
	return [...rows.values()]
		.sort((a, b) => a.start - b.start || (a.group < b.group ? -1 : a.group > b.group ? 1 : 0))
		.map(({ start: _s, group: _g, ...row }) => ({
			...row,
			cost_usd: usd(row.cost_nanos),
			cache_hit_rate: row.prompt_tokens > 0 ? Number((row.cached_tokens / row.prompt_tokens).toFixed(4)) : 0,
		}));
}

function totals(rows: { requests: number; prompt_tokens: number; completion_tokens: number; cost_nanos: number }[]) {
	return rows.reduce(
		(t, r) => ({
			requests: t.requests + r.requests,
			prompt_tokens: t.prompt_tokens + r.prompt_tokens,
			completion_tokens: t.completion_tokens + r.completion_tokens,
			cost_nanos: t.cost_nanos + r.cost_nanos,
		}),
		{ requests: 0, prompt_tokens: 0, completion_tokens: 0, cost_nanos: 0 },
	);
}

async function ask(key: string, model: string, text: string, init: RequestInit = {}): Promise<void> {
	const res = await chat(key, { model, messages: [{ role: "user", content: text }], max_tokens: 8 }, init);
	expect(res.status, await res.clone().text()).toBe(200);
	await res.text();
}

describe("GET /admin/usage/summary", () => {
	let a: CreatedKey;
	let b: CreatedKey;
	let token: { id: string; token: string };
	/** An hour-aligned window holding every request these tests make. */
	let window: { since: number; until: number };
	/**
	 * In the inner loop (`npm run test:unit`) other test files' usage lands in the same hours as
	 * these tests' requests, so over `window` every sum is of this file's keys only: filtered by
	 * key_id, or grouped by key and the other keys' rows left out. The sums without a key filter
	 * are checked over PAST: two UTC days of 1999 that only this file writes usage into, seeded
	 * through the outbox flush (the same D1 batch a ledger's flush runs).
	 */
	const PAST = { since: Date.UTC(1999, 6, 7), until: Date.UTC(1999, 6, 9) };
	const MODELS = ["test/ok", "test/reasoning", "test/cumulative"];
	let seeded: UsageRecordInput[];

	beforeAll(async () => {
		const start = Date.now();
		a = await createKey({ name: "summary-a" });
		b = await createKey({ name: "summary-b" });
		const res = await gw("/v1/tokens", {
			method: "POST",
			headers: { authorization: `Bearer ${a.key}`, "content-type": "application/json" },
			body: JSON.stringify({ allowed_origins: [APP] }),
		});
		expect(res.status).toBe(201);
		token = (await res.json()) as { id: string; token: string };

		await ask(a.key, "test/ok", "hello there");
		await ask(a.key, "test/ok", "a somewhat longer prompt for the first key");
		await ask(a.key, "test/reasoning", "think about it");
		await ask(b.key, "test/ok", "from the other key");
		await ask(b.key, "test/cumulative", "count me");
		// A token's usage is its parent's: the paying key.
		await ask(token.token, "test/ok", "from the browser", { headers: { origin: APP } });
		await flushed(a.id, 4);
		await flushed(b.id, 2);
		window = {
			since: Math.floor(start / HOUR) * HOUR - HOUR,
			until: Math.ceil(Date.now() / HOUR) * HOUR + HOUR,
		};

		// Four records an hour in five hours over both days, some of a key and model sharing an hour.
		seeded = Array.from(
			{ length: 20 },
			(_, i): UsageRecordInput => ({
				request_id: `${a.id}-past-${i}`,
				key_id: i % 3 === 0 ? b.id : a.id,
				model: MODELS[Math.floor(i / 2) % 3] as string,
				node: null,
				prompt_tokens: i + 1,
				completion_tokens: 2 * i + 3,
				cost_nanos: 1000 * (i + 1) + 7,
				status: "completed",
				estimated: false,
				search_count: i % 3,
				created_at: PAST.since + Math.floor(i / 4) * 7 * HOUR + i * 61_000,
			}),
		);
		await flushOutbox(env.DB, seeded.slice(0, 11));
		await flushOutbox(env.DB, seeded.slice(11));
	});

	const inWindow = () => ({ since: String(window.since / 1000), until: String(window.until / 1000) });
	const inPast = () => ({ since: String(PAST.since / 1000), until: String(PAST.until / 1000) });
	const ownKey = (r: SummaryRow) => r.key_id === a.id || r.key_id === b.id;
	/** The records of both keys (GET /admin/usage takes one key_id). */
	const ownRecords = async (query: Query) => [
		...(await records({ ...query, key_id: a.id })),
		...(await records({ ...query, key_id: b.id })),
	];

	it("sums per hour equal the usage records' sums exactly", async () => {
		for (const [key, requests] of [
			[a, 4],
			[b, 2],
		] as const) {
			const recs = await records({ ...inWindow(), key_id: key.id });
			expect(recs).toHaveLength(requests);
			const s = await summary({ since: iso(window.since), until: iso(window.until), key_id: key.id });
			expect(s).toMatchObject({
				object: "list",
				granularity: "hour",
				group_by: null,
				since: iso(window.since),
				until: iso(window.until),
			});
			expect(s.data).toEqual(expected(recs, HOUR));
			expect(totals(s.data)).toEqual(totals(expected(recs, HOUR)));
		}
		// Without a filter: the seeded hours, which hold this file's records and nothing else.
		const recs = await records(inPast());
		expect(recs.map((r) => r.request_id).sort()).toEqual(seeded.map((r) => r.request_id).sort());
		const s = await summary(inPast());
		expect(s.data).toEqual(expected(recs, HOUR));
		expect(s.data).toHaveLength(5);
		expect(totals(s.data)).toEqual(totals(expected(recs, HOUR)));
	});

	it("groups by model and by paying key, the token's usage under its parent", async () => {
		const models = new Set<string | undefined>();
		for (const key of [a, b]) {
			const recs = await records({ ...inWindow(), key_id: key.id });
			const byModel = await summary({ ...inWindow(), key_id: key.id, group_by: "model" });
			expect(byModel.data).toEqual(expected(recs, HOUR, "model"));
			for (const r of byModel.data) models.add(r.model);
		}
		expect(models).toEqual(new Set(MODELS));

		const recs = await ownRecords(inWindow());
		const byKey = await summary({ ...inWindow(), group_by: "key" });
		expect(byKey.data.filter(ownKey)).toEqual(expected(recs, HOUR, "key"));
		const keys = new Set(byKey.data.map((r) => r.key_id));
		expect(keys.has(a.id) && keys.has(b.id)).toBe(true);
		expect(keys.has(token.id)).toBe(false);
		expect(totals(byKey.data.filter((r) => r.key_id === a.id)).requests).toBe(4);

		// Without a filter, over the seeded hours.
		const past = await records(inPast());
		for (const group_by of ["model", "key"] as const) {
			expect((await summary({ ...inPast(), group_by })).data).toEqual(expected(past, HOUR, group_by));
		}
	});

	it("filters by key_id and model like the records", async () => {
		const filters: Query[] = [
			{ key_id: a.id },
			{ key_id: b.id },
			{ model: "test/ok" },
			{ key_id: a.id, model: "test/ok" },
			{ key_id: b.id, model: "test/reasoning" },
		];
		for (const filter of filters) {
			// Over the requests' hours, a model alone also sums other files' usage: only by key, this file's rows.
			const mine = filter.key_id === undefined;
			const recs = mine ? await ownRecords({ ...inWindow(), ...filter }) : await records({ ...inWindow(), ...filter });
			for (const group_by of mine ? (["key"] as const) : ([undefined, "model", "key"] as const)) {
				const s = await summary({ ...inWindow(), ...filter, ...(group_by ? { group_by } : {}) });
				const data = mine ? s.data.filter(ownKey) : s.data;
				expect(data, JSON.stringify({ filter, group_by })).toEqual(expected(recs, HOUR, group_by));
			}
			const past = await records({ ...inPast(), ...filter });
			expect(past.length, JSON.stringify(filter)).toBeGreaterThan(0);
			for (const group_by of [undefined, "model", "key"] as const) {
				const s = await summary({ ...inPast(), ...filter, ...(group_by ? { group_by } : {}) });
				expect(s.data, JSON.stringify({ past: true, filter, group_by })).toEqual(expected(past, HOUR, group_by));
			}
		}
		expect((await summary({ ...inWindow(), key_id: freshKeyId("summary", "nobody") })).data).toEqual([]);
		// An empty parameter is an absent one, as on GET /admin/usage.
		const all = await summary(inPast());
		expect(all.data.length).toBeGreaterThan(0);
		expect((await summary({ ...inPast(), key_id: "", model: "" })).data).toEqual(all.data);
		expect((await summary({ ...inWindow(), key_id: a.id, model: "" })).data).toEqual(
			(await summary({ ...inWindow(), key_id: a.id })).data,
		);
	});

	it("by day sums the hours of each UTC day", async () => {
		const dayWindow = {
			since: String((Math.floor(window.since / DAY) * DAY) / 1000),
			until: String((Math.ceil(window.until / DAY) * DAY) / 1000),
		};
		// The requests' days by key, and the seeded days without a filter.
		const spans: [Query, UsageRecord[]][] = [
			[{ ...dayWindow, key_id: a.id }, await records({ ...dayWindow, key_id: a.id })],
			[{ ...dayWindow, key_id: b.id }, await records({ ...dayWindow, key_id: b.id })],
			[inPast(), await records(inPast())],
		];
		for (const [span, recs] of spans) {
			for (const group_by of [undefined, "model", "key"] as const) {
				const g = group_by ? { group_by } : {};
				const days = await summary({ ...span, granularity: "day", ...g });
				expect(days.data).toEqual(expected(recs, DAY, group_by));
				const hours = await summary({ ...span, ...g });
				expect(totals(days.data)).toEqual(totals(hours.data));
				for (const d of days.data) expect(d.period).toMatch(/T00:00:00Z$/);
			}
		}
		expect((await summary({ ...inPast(), granularity: "day" })).data).toHaveLength(2);
	});

	it("widens an unaligned window to whole hours, and defaults to the last 24 hours", async () => {
		const past = await records(inPast());
		const unaligned = await summary({ since: iso(PAST.since + 1234), until: iso(PAST.until - HOUR + 1000) });
		expect(unaligned.since).toBe(iso(PAST.since));
		expect(unaligned.until).toBe(iso(PAST.until));
		expect(unaligned.data).toEqual(expected(past, HOUR));
		const recs = await records({ ...inWindow(), key_id: a.id });
		const keyed = await summary({ since: iso(window.since + 1234), until: iso(window.until - HOUR + 1000), key_id: a.id });
		expect([keyed.since, keyed.until]).toEqual([iso(window.since), iso(window.until)]);
		expect(keyed.data).toEqual(expected(recs, HOUR));

		const last24 = await summary({});
		expect(Date.parse(last24.until) - Date.parse(last24.since)).toBe(DAY);
		expect(Date.parse(last24.until)).toBeGreaterThan(Date.now());
		for (const key of [a, b]) {
			const mine = await summary({ key_id: key.id });
			expect([mine.since, mine.until]).toEqual([last24.since, last24.until]);
			expect(totals(mine.data)).toEqual(totals(expected(await records({ ...inWindow(), key_id: key.id }), HOUR)));
		}
		const last30 = await summary({ granularity: "day" });
		expect(Date.parse(last30.until) - Date.parse(last30.since)).toBe(30 * DAY);
	});

	it("refuses bad parameters with a 400 naming them", async () => {
		await expectError("granularity=week", "granularity");
		await expectError("group_by=node", "group_by");
		await expectError("since=yesterday", "since");
		await expectError("until=2026-13-45T00:00:00Z", "until");
		await expectError(`since=${window.until / 1000}&until=${window.since / 1000}`, "since");
		await expectError(`since=${window.since / 1000}&until=${window.since / 1000}`, "since");
		await expectError(`since=${Math.floor(Date.now() / 1000) + 7200}`, "since");
		// Past year 9999 a period would print as `+010000-…` (or not at all): refused, not rounded into it.
		await expectError("until=9999-12-31", "until");
		await expectError("until=9999-12-31&granularity=day", "until");
		await expectError("until=9999-12-31T23:00:00-05:00", "until");
		await expectError("since=9999-12-31T10:00:00Z", "since");
		await expectError("until=9000000000000", "until");
		await expectError("since=9000000000000&granularity=day", "since");
		const last = await summary({ until: "9999-12-30T23:59:59Z", granularity: "day" });
		expect(last.until).toBe("9999-12-31T00:00:00Z");
		const long = await expectError("since=2020-01-01&until=2021-06-01", "since");
		expect(long.error.message).toContain("granularity=day");
		// The same window by day is fine.
		await summary({ since: "2020-01-01", until: "2021-06-01", granularity: "day" });
		const res = await gw("/admin/usage/summary");
		expect(res.status).toBe(401);
	});

	it("refuses a grouped summary of more than 10,000 rows, naming group_by", async () => {
		// 10,001 keys with usage in one hour of 2019, written straight into the rollups.
		const hour = Date.UTC(2019, 0, 1, 5);
		await env.DB.prepare(
			`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10001)
			 INSERT INTO usage_hourly (hour, key_id, model, requests, prompt_tokens, completion_tokens, cost_nanos, search_count)
			 SELECT ?1, 'key_many_' || i, 'test/ok', 1, 1, 1, 1, 0 FROM n`,
		)
			.bind(hour)
			.run();
		const q = `since=${iso(hour)}&until=${iso(hour + HOUR)}`;
		await expectError(`${q}&group_by=key`, "group_by");
		const one = await summary({ since: iso(hour), until: iso(hour + HOUR) });
		expect(one.data).toEqual([
			expect.objectContaining({ period: iso(hour), requests: 10001, cost_nanos: 10001, cost_usd: 0.000010001 }),
		]);
	});
});

describe("rollups and retried flushes", () => {
	// The ledger logs every failed flush; keep the injected ones out of the test output.
	hideErrorsMentioning("injected");

	const at = Date.UTC(2020, 2, 3, 4, 5);

	function rec(keyId: string, i: number, createdAt: number, model = "test/ok"): UsageRecordInput {
		return {
			request_id: `${keyId}-${i}`,
			key_id: keyId,
			model,
			node: null,
			prompt_tokens: i,
			completion_tokens: 2 * i,
			cost_nanos: 1000 * i,
			status: "completed",
			estimated: false,
			search_count: i % 2,
			created_at: createdAt,
		};
	}

	async function rollup(keyId: string) {
		const { results } = await env.DB.prepare(
			"SELECT hour, model, requests, prompt_tokens, completion_tokens, cost_nanos, search_count FROM usage_hourly WHERE key_id = ? ORDER BY hour, model",
		)
			.bind(keyId)
			.all();
		return results;
	}

	it("flushing the same records again adds nothing to the rollups", async () => {
		const keyId = freshKeyId("summary", "retry_same");
		const batch = [rec(keyId, 1, at), rec(keyId, 2, at + 10), rec(keyId, 3, at + HOUR, "test/reasoning")];
		await flushOutbox(env.DB, batch);
		const once = await rollup(keyId);
		expect(once).toEqual([
			{
				hour: Date.UTC(2020, 2, 3, 4),
				model: "test/ok",
				requests: 2,
				prompt_tokens: 3,
				completion_tokens: 6,
				cost_nanos: 3000,
				search_count: 1,
			},
			{
				hour: Date.UTC(2020, 2, 3, 5),
				model: "test/reasoning",
				requests: 1,
				prompt_tokens: 3,
				completion_tokens: 6,
				cost_nanos: 3000,
				search_count: 1,
			},
		]);
		await flushOutbox(env.DB, batch);
		await flushOutbox(env.DB, batch);
		expect(await rollup(keyId)).toEqual(once);
		// A retry with new records among the old adds only the new ones.
		await flushOutbox(env.DB, [...batch, rec(keyId, 4, at + 20)]);
		expect((await rollup(keyId))[0]).toMatchObject({ requests: 3, prompt_tokens: 7, cost_nanos: 7000 });
		const s = await summary({ key_id: keyId, since: "2020-03-03", until: "2020-03-04", granularity: "day" });
		expect(s.data).toEqual([
			expect.objectContaining({
				period: "2020-03-03T00:00:00Z",
				requests: 4,
				prompt_tokens: 10,
				completion_tokens: 20,
				cost_nanos: 10_000,
			}),
		]);
	});

	it("a flush whose D1 reply is lost and is retried counts each record once", async () => {
		const keyId = freshKeyId("summary", "retry_lost");
		const stub = ledger(keyId);
		// The ledger's D1 writes and then throws, twice: the alarm flushes the same records again.
		const faults = { failed: 0 };
		await runInDurableObject(stub, (instance) => {
			const holder = instance as unknown as { env: Env };
			const real = holder.env.DB;
			const batch = async (statements: D1PreparedStatement[]) => {
				const out = await real.batch(statements);
				if (faults.failed < 2) {
					faults.failed += 1;
					throw new Error("D1_ERROR: injected lost reply");
				}
				return out;
			};
			const wrapped = new Proxy(real, {
				get(target, prop) {
					if (prop === "batch") return batch;
					const v = Reflect.get(target, prop, target);
					return typeof v === "function" ? v.bind(target) : v;
				},
			});
			holder.env = { ...holder.env, DB: wrapped };
		});
		await stub.credit({ keyId, amountNanos: 1_000_000_000, idempotencyKey: "initial" });
		for (let i = 1; i <= 5; i++) {
			const requestId = `${keyId}-${i}`;
			await stub.authorize({ payerKeyId: keyId, requestId, holdNanos: 10_000_000 });
			const record = rec(keyId, i, Date.now());
			await stub.settle({ requestId, costNanos: 1000 * i, record });
		}
		await flushed(keyId, 5);
		expect(faults.failed).toBe(2);
		const recs = await records({ key_id: keyId });
		expect(recs).toHaveLength(5);
		const rows = await rollup(keyId);
		expect(totals(rows as never)).toEqual({ requests: 5, prompt_tokens: 15, completion_tokens: 30, cost_nanos: 15_000 });
		await runInDurableObject(stub, (instance) => {
			(instance as unknown as { env: Env }).env = env;
		});
	});
});
