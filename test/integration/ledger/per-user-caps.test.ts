/**
 * A key's per-end-user caps (`per_user_rpm`, `per_user_daily_usd`): the end user is the request's
 * `safety_identifier`, else `user` (OpenAI lanes), or Messages' `metadata.user_id`; each user's share
 * is a scope of its own in the key's ledger, so a user's daily spend is exact under concurrency. Over
 * a cap is 429 naming the limit; usage records carry the end user, and the summary groups by it.
 */
import { env, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { admin, chat, createKey, gw, releaseEngine, waitFor } from "../../support/gateway";
import { flushUsage, freshKeyId, ledger } from "../../support/ledger";

type ErrorBody = { error: { message: string; type: string; code: string | null } };

function body(extra: Record<string, unknown> = {}) {
	return { model: "test/ok", messages: [{ role: "user", content: "hi" }], max_tokens: 5, ...extra };
}

function messages(key: string, userId: string | undefined) {
	return gw("/v1/messages", {
		method: "POST",
		headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
		body: JSON.stringify({
			model: "test/ok",
			max_tokens: 5,
			messages: [{ role: "user", content: "hi" }],
			...(userId ? { metadata: { user_id: userId } } : {}),
		}),
	});
}

async function expectUserLimit(res: Response, limit: "per_user_rpm" | "per_user_daily_usd"): Promise<void> {
	const json = (await res.json()) as ErrorBody;
	expect(res.status, JSON.stringify(json)).toBe(429);
	expect(json.error).toMatchObject({ type: "rate_limit_error", code: `${limit}_exceeded` });
	expect(json.error.message).toContain(limit);
	expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
}

async function expectMessagesUserLimit(res: Response, limit: string): Promise<void> {
	const json = (await res.json()) as { type: string; error: { type: string; message: string } };
	expect(res.status, JSON.stringify(json)).toBe(429);
	expect(json).toMatchObject({ type: "error", error: { type: "rate_limit_error" } });
	expect(json.error.message).toContain(limit);
}

/** What one `body()` request holds: measured on a key of its own, with the request held open by the engine. */
async function holdOfOneRequest(): Promise<number> {
	const k = await createKey();
	const marker = `hold-${crypto.randomUUID()}`;
	const pending = chat(k.key, body({ model: "test/gated", messages: [{ role: "user", content: marker }] }));
	const held = await waitFor(async () => {
		const info = await ledger(k.id).info();
		return info.openHolds === 1 ? info.heldNanos : undefined;
	});
	await waitFor(async () => (await releaseEngine(marker)) === 1);
	await (await pending).text();
	return held;
}

async function setUserDailyCap(keyId: string, nanos: number): Promise<void> {
	const res = await admin(`/keys/${keyId}`, { method: "PATCH", body: JSON.stringify({ per_user_daily_usd: nanos / 1e9 }) });
	expect(res.status).toBe(200);
}

describe("per_user_rpm", () => {
	it("counts each end user of a chat key apart; a request naming none is not counted", async () => {
		const k = await createKey({ per_user_rpm: 2 });
		for (let i = 0; i < 2; i++) expect((await chat(k.key, body({ user: "alice" }))).status).toBe(200);
		const refused = await chat(k.key, body({ user: "alice" }));
		await expectUserLimit(refused, "per_user_rpm");
		// safety_identifier names the end user first: here alice again.
		await expectUserLimit(await chat(k.key, body({ user: "bob", safety_identifier: "alice" })), "per_user_rpm");
		expect((await chat(k.key, body({ user: "bob" }))).status).toBe(200);
		expect((await chat(k.key, body({ safety_identifier: "carol" }))).status).toBe(200);
		for (let i = 0; i < 3; i++) expect((await chat(k.key, body())).status).toBe(200);
		// Nothing is held for a refusal.
		await waitFor(async () => (await ledger(k.id).info()).openHolds === 0);
	});

	it("is exact under concurrency: 10 requests of one user at once on per_user_rpm 3 give three 200s", async () => {
		const k = await createKey({ per_user_rpm: 3 });
		const statuses = await Promise.all(
			Array.from({ length: 10 }, () => chat(k.key, body({ user: "eve" })).then((r) => r.status)),
		);
		expect(statuses.filter((s) => s === 200)).toHaveLength(3);
		expect(statuses.filter((s) => s === 429)).toHaveLength(7);
	});

	it("reads Messages' metadata.user_id", async () => {
		const k = await createKey({ per_user_rpm: 1 });
		expect((await messages(k.key, "dave")).status).toBe(200);
		await expectMessagesUserLimit(await messages(k.key, "dave"), "per_user_rpm");
		expect((await messages(k.key, "erin")).status).toBe(200);
		expect((await messages(k.key, undefined)).status).toBe(200);
	});
});

describe("per_user_daily_usd", () => {
	it("holds a user's daily spend to the cap under 20 concurrent requests, exactly as recorded", async () => {
		const hold = await holdOfOneRequest();
		// Room for two requests' holds, not three.
		const capNanos = Math.floor(hold * 2.5);
		const k = await createKey({ per_user_daily_usd: capNanos / 1e9 });
		// 20 at once, held open by the engine until released: each admitted one holds its worst case.
		const marker = `daily-${crypto.randomUUID()}`;
		const gated = body({ user: "alice", stream: true, model: "test/gated", messages: [{ role: "user", content: marker }] });
		const responses = await Promise.all(Array.from({ length: 20 }, () => chat(k.key, gated)));
		const admitted = responses.filter((r) => r.status === 200);
		expect(admitted).toHaveLength(3);
		for (const r of responses.filter((r) => r.status !== 200)) await expectUserLimit(r, "per_user_daily_usd");
		expect(await releaseEngine(marker)).toBe(3);
		await Promise.all(admitted.map((r) => r.text()));
		await waitFor(async () => (await ledger(k.id).info()).openHolds === 0);
		const { spentNanos } = await ledger(k.id).spend({ scope: `${k.id}/user:alice`, period: "daily" });
		expect(spentNanos).toBeGreaterThan(0);
		// A cap lowered to what alice spent today: her next request is refused, before anything is held.
		await setUserDailyCap(k.id, spentNanos);
		await expectUserLimit(await chat(k.key, body({ user: "alice" })), "per_user_daily_usd");
		expect((await ledger(k.id).info()).openHolds).toBe(0);
		// Another user of the key is untouched.
		expect((await chat(k.key, body({ user: "bob" }))).status).toBe(200);

		// The usage records name the end user, and add up to what the ledger counted.
		await waitFor(async () => (await ledger(k.id).info()).openHolds === 0);
		await flushUsage(ledger(k.id));
		const row = await env.DB.prepare(
			"SELECT SUM(cost_nanos) AS c, COUNT(*) AS n FROM usage_records WHERE key_id = ? AND end_user = 'alice'",
		)
			.bind(k.id)
			.first<{ c: number; n: number }>();
		expect(row?.c).toBe(spentNanos);
		const listed = (await (await admin(`/usage?key_id=${k.id}&end_user=bob`)).json()) as {
			data: Array<{ end_user: string | null }>;
		};
		expect(listed.data.map((r) => r.end_user)).toEqual(["bob"]);
		const summary = (await (await admin(`/usage/summary?key_id=${k.id}&group_by=end_user&granularity=day`)).json()) as {
			group_by: string;
			data: Array<{ end_user: string | null; cost_nanos: number; requests: number }>;
		};
		expect(summary.group_by).toBe("end_user");
		const alice = summary.data.filter((r) => r.end_user === "alice");
		expect(alice.reduce((a, r) => a + r.cost_nanos, 0)).toBe(spentNanos);
		expect(alice.reduce((a, r) => a + r.requests, 0)).toBe(row?.n);
		expect(summary.data.some((r) => r.end_user === "bob")).toBe(true);
	});

	it("refuses a Messages user over the cap in Anthropic's shape", async () => {
		const k = await createKey({ per_user_daily_usd: 1 });
		expect((await messages(k.key, "dave")).status).toBe(200);
		await waitFor(async () => (await ledger(k.id).info()).openHolds === 0);
		const spent = await ledger(k.id).spend({ scope: `${k.id}/user:dave`, period: "daily" });
		expect(spent.spentNanos).toBeGreaterThan(0);
		await setUserDailyCap(k.id, spent.spentNanos);
		await expectMessagesUserLimit(await messages(k.key, "dave"), "per_user_daily_usd");
		expect((await messages(k.key, "erin")).status).toBe(200);
		expect((await messages(k.key, undefined)).status).toBe(200);
	});

	it("forgets end users' daily spend from earlier days at the ledger's hourly prune, and nothing else", async () => {
		const keyId = freshKeyId("peruser", "prune");
		const stub = ledger(keyId);
		const day = 86_400_000;
		const today = Math.floor(Date.now() / day) * day;
		const row = (scope: string, dayStart: number) =>
			`INSERT INTO spend_periods (scope, total, day_start, day, week_start, week, month_start, month) VALUES ('${scope}', 5, ${dayStart}, 5, 0, 5, 0, 5)`;
		const scopes = () =>
			runInDurableObject(stub, (_i, state) =>
				state.storage.sql
					.exec<{ scope: string }>("SELECT scope FROM spend_periods ORDER BY scope")
					.toArray()
					.map((r) => r.scope),
			);
		await runInDurableObject(stub, (_i, state) => {
			state.storage.sql.exec(row(`${keyId}/user:old`, today - day));
			state.storage.sql.exec(row(`${keyId}/user:new`, today));
			// The key's own spend (weekly, monthly, lifetime caps) is never pruned, whatever its day.
			state.storage.sql.exec(row(keyId, today - day));
		});
		await runInDurableObject(stub, (instance) => instance.alarm());
		expect(await scopes()).toEqual([keyId, `${keyId}/user:new`]);
	});
});
