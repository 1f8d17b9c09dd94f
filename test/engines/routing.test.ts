// Routing over two real llama.cpp servers (`engines/pair`): the load each reports on its own
// /metrics and /slots steers new requests to the idle one; one killed mid-stream ends that stream
// with the lane's error, is billed for what it generated, and the next requests go to the other.
import { APIError } from "openai";
import { beforeAll, expect, it } from "vitest";
import {
	admin,
	costNanos,
	createKey,
	describeEngines,
	marker,
	openai,
	stack,
	type UsageRow,
	usageRows,
	waitFor,
} from "./support";

let key: { id: string; key: string };

interface NodeRow {
	model: string;
	url: string;
	healthy: boolean;
	engine_load: { source: string; waiting: number | null; running: number | null; slots?: number } | null;
}

async function pairRow(i: number): Promise<NodeRow | undefined> {
	const page = await admin<{ data: NodeRow[] }>("/nodes");
	const host = new URL(stack().pair[i]?.url ?? "").host;
	return page.data.find((r) => r.model === "engines/pair" && r.url.includes(host));
}

/** Streams `n` long generations straight at an engine (not through the gateway); abort() ends them. */
function occupy(directUrl: string, n: number) {
	const controller = new AbortController();
	const body = JSON.stringify({
		messages: [{ role: "user", content: "keep talking" }],
		max_tokens: 4000,
		ignore_eos: true,
		stream: true,
	});
	for (let i = 0; i < n; i++) {
		fetch(`${directUrl}/v1/chat/completions`, {
			method: "POST",
			headers: { "content-type": "application/json" },
			body,
			signal: controller.signal,
		})
			.then(async (r) => {
				// Read to the end: a client that leaves makes llama.cpp cancel the generation.
				const reader = r.body?.getReader();
				while (reader && !(await reader.read()).done);
			})
			.catch(() => {});
	}
	return () => controller.abort();
}

async function processing(directUrl: string): Promise<number> {
	const text = await (await fetch(`${directUrl}/metrics`)).text();
	return Number(/^llamacpp:requests_processing (\S+)/m.exec(text)?.[1] ?? 0);
}

function rowOf(requestId: string | null): Promise<UsageRow> {
	return waitFor(
		async () => (await usageRows(key.id, 1)).find((r) => r.request_id === requestId),
		15_000,
		`the usage record of ${requestId}`,
	);
}

describeEngines("routing over two llama.cpp servers", () => {
	beforeAll(async () => {
		key = await createKey("engines-routing");
	});

	it("reads each node's requests_processing, requests_deferred and slots, and sends new requests to the idle node", async () => {
		const [busy, idle] = stack().pair;
		if (!busy || !idle) throw new Error("no pair");
		// The gateway has been probing both (reading /admin/nodes keeps the probes going).
		for (const i of [0, 1]) await waitFor(async () => (await pairRow(i))?.engine_load?.slots, 20_000, `node ${i}'s slots`);
		// Five long generations on four slots: four processing, one deferred.
		const release = occupy(busy.directUrl, 5);
		try {
			let last: NodeRow | undefined;
			const row = await waitFor(
				async () => {
					last = await pairRow(0);
					const r = last;
					return (r?.engine_load?.running ?? 0) >= 4 && (r?.engine_load?.waiting ?? 0) >= 1 && r;
				},
				20_000,
				"the busy node's load in /admin/nodes",
			).catch((err) => {
				throw new Error(`${err}; last row ${JSON.stringify(last)}`);
			});
			expect(row.engine_load).toMatchObject({ source: "llamacpp", slots: 4 });
			expect((await pairRow(1))?.engine_load).toMatchObject({ source: "llamacpp", running: 0, waiting: 0, slots: 4 });
			// Distinct prompts (distinct affinity keys, half of them at home on the busy node): all go to the idle one.
			for (let i = 0; i < 4; i++) {
				const { response } = await openai(key.key)
					.chat.completions.create({
						model: "engines/pair",
						max_tokens: 4,
						messages: [{ role: "user", content: marker(`route-${i}`) }],
					})
					.withResponse();
				expect((await rowOf(response.headers.get("x-request-id"))).node).toBe(`${idle.url}/v1`);
			}
		} finally {
			release();
		}
		await waitFor(async () => (await processing(busy.directUrl)) === 0, 20_000, "the busy node idle again");
	});

	it("a node killed mid-stream: the stream ends with an error frame, is billed, and the next requests go to the other node", async () => {
		const [a, b] = stack().pair;
		if (!a || !b) throw new Error("no pair");
		const m = marker("failover");
		const stream = await openai(key.key).chat.completions.create({
			model: "engines/pair",
			max_tokens: 400,
			stream: true,
			stream_options: { include_usage: true },
			// No end-of-turn tokens (<|endoftext|>, <|im_end|>): the answer runs to max_tokens, long enough to be cut.
			logit_bias: { "151643": -100, "151645": -100 },
			messages: [{ role: "user", content: `${m} a long story` }],
		});
		let chunks = 0;
		let failed: unknown;
		let victim: typeof a | undefined;
		try {
			for await (const c of stream) {
				chunks += 1;
				if (chunks === 3) {
					// Whichever node is generating it dies, with its whole process group.
					victim = (await processing(a.directUrl)) > 0 ? a : b;
					await fetch(`${victim.url}/_test/kill`, { method: "POST" });
				}
				expect(c.model).toBe("engines/pair");
			}
		} catch (err) {
			failed = err;
		}
		expect(victim).toBeDefined();
		const survivor = victim === a ? b : a;
		// Bytes had reached the client: no failover within the stream, an in-band error ends it.
		expect(failed).toBeInstanceOf(APIError);
		// llama.cpp generates faster than this client reads: only the three chunks read before the kill at most were relayed.
		expect(chunks).toBeGreaterThanOrEqual(3);

		// Settled once, as a failed stream, for the tokens relayed (estimated: the engine sent no usage).
		// Usage records name a node by its (masked) URL.
		const victimHost = `${victim?.url}/v1`;
		let seen: UsageRow[] = [];
		const streams = await waitFor(
			async () => {
				seen = await usageRows(key.id, 1);
				const rows = seen.filter((r) => r.node === victimHost && r.status !== "completed");
				return rows.length > 0 && rows;
			},
			15_000,
			"the killed stream's usage record",
		).catch((err) => {
			throw new Error(`${err}: victim ${victimHost}, ${chunks} chunks, ${String(failed)}, records ${JSON.stringify(seen)}`);
		});
		expect(streams.length).toBe(1);
		// The engine died before its usage chunk: the completion is estimated from the text relayed.
		expect(streams[0]).toMatchObject({ estimated: true, status: "engine_error", prompt_tokens: expect.any(Number) });
		expect(streams[0]?.completion_tokens).toBeGreaterThanOrEqual(chunks - 1);
		expect(streams[0]?.cost_nanos).toBe(costNanos(streams[0]?.prompt_tokens ?? 0, streams[0]?.completion_tokens ?? 0));

		// The next requests: each answered, by the survivor (a first try on the dead node fails over before any byte).
		const survivorHost = `${survivor?.url}/v1`;
		for (let i = 0; i < 3; i++) {
			const { data, response } = await openai(key.key)
				.chat.completions.create({
					model: "engines/pair",
					max_tokens: 4,
					messages: [{ role: "user", content: marker(`after-${i}`) }],
				})
				.withResponse();
			expect(data.choices).toHaveLength(1);
			expect((await rowOf(response.headers.get("x-request-id"))).node).toBe(survivorHost);
		}
		const dead = await pairRow(victim === a ? 0 : 1);
		expect(dead?.healthy).toBe(false);
	});
});
