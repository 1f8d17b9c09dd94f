// Runs pieces of the gateway's hot path in isolation, inside the gateway's own workerd,
// so their cost is measured without a Node-to-workerd proxy in the way. It is bound to the
// gateway's KeyLedger class (by script name) and to the same D1 database.
//   POST /credit?key=             fund a key's ledger
//   GET  /info?key=               the ledger's info()
//   GET  /ledger?key=&ms=&inflight=   authorize+settle pairs for `ms`, `inflight` at a time
//   GET  /op?name=&n=&key=&hash=  `n` sequential runs of one operation (see OPS)
const record = (keyId) => ({
	key_id: keyId,
	model: "venym/bench",
	node: "http://engine.bench/v1",
	prompt_tokens: 12,
	completion_tokens: 34,
	status: "completed",
	estimated: false,
	search_count: 0,
});

const ledger = (env, keyId) => env.LEDGER.get(env.LEDGER.idFromName(keyId));

const OPS = {
	// What authenticate() asks D1 for, minus drizzle: one indexed read.
	"d1-key-lookup": (env, { hash }) => env.DB.prepare("SELECT * FROM api_keys WHERE hash = ?").bind(hash).first(),
	// One Durable Object RPC round trip doing four small reads.
	"ledger-info": (env, { keyId }) => ledger(env, keyId).info(),
	"ledger-authorize": (env, { keyId, i, prefix }) =>
		ledger(env, keyId).authorize({ payerKeyId: keyId, requestId: `${prefix}${i}`, holdNanos: 50_000 }),
	"ledger-settle": (env, { keyId, i, prefix }) =>
		ledger(env, keyId).settle({ requestId: `${prefix}${i}`, costNanos: 12_345, record: record(keyId) }),
	// What the key cache reads on the warm path when Redis is not configured: the Workers Cache API.
	"cache-match": async (_env, { hash, i }) => {
		const url = `https://probe-cache.bench.internal/${hash}`;
		if (i === 0)
			await caches.default.put(url, Response.json({ key: { id: "key_probe" } }, { headers: { "cache-control": "max-age=600" } }));
		const hit = await caches.default.match(url);
		if (!hit) throw new Error("cache miss");
		return hit.json();
	},
	sha256: (_env, { hash }) => crypto.subtle.digest("SHA-256", new TextEncoder().encode(hash)),
};

export default {
	async fetch(request, env) {
		const url = new URL(request.url);
		const q = (k, d) => url.searchParams.get(k) ?? d;
		const keyId = q("key", "key_probe");
		if (url.pathname === "/credit") {
			return Response.json(
				await ledger(env, keyId).credit({
					keyId,
					amountNanos: 1e6 * 1e9,
					idempotencyKey: `bench-${Date.now()}-${Math.random()}`,
				}),
			);
		}
		if (url.pathname === "/info") return Response.json(await ledger(env, keyId).info());
		if (url.pathname === "/op") {
			const op = OPS[q("name")];
			if (!op) return new Response("unknown op", { status: 404 });
			const n = Number(q("n", 1000));
			const ctx = { keyId, hash: q("hash", "0".repeat(64)), prefix: q("prefix", `req_probe_${Date.now().toString(36)}_`) };
			const started = Date.now();
			for (let i = 0; i < n; i++) await op(env, { ...ctx, i });
			const elapsedMs = Date.now() - started;
			return Response.json({ n, elapsedMs, perSecond: (n * 1000) / Math.max(1, elapsedMs) });
		}
		if (url.pathname === "/ledger") {
			const stub = ledger(env, keyId);
			const ms = Number(q("ms", 1000));
			const inflight = Number(q("inflight", 1));
			const prefix = `req_ledger_${Date.now().toString(36)}_`;
			let next = 0;
			let settled = 0;
			let failed = 0;
			const started = Date.now();
			const deadline = started + ms;
			const lane = async () => {
				while (Date.now() < deadline) {
					const requestId = `${prefix}${next++}`;
					try {
						const auth = await stub.authorize({ payerKeyId: keyId, requestId, holdNanos: 50_000 });
						if (!auth.ok) throw new Error("authorize refused");
						await stub.settle({ requestId, costNanos: 12_345, record: record(keyId) });
						settled++;
					} catch {
						failed++;
					}
				}
			};
			await Promise.all(Array.from({ length: inflight }, lane));
			const elapsedMs = Date.now() - started;
			return Response.json({ settled, failed, elapsedMs, perSecond: (settled * 1000) / elapsedMs });
		}
		return new Response("not found", { status: 404 });
	},
};
