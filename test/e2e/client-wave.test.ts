/**
 * A wave of streaming clients that send their request and close the socket before the headers,
 * with more that keep the socket open and never read, against the workerd that runs the gateway
 * (dev/gateway-host.mjs), over raw sockets (node:net: no client library reads for us). Local workerd
 * never tells the gateway such a client is gone, so each may look like a client that stopped
 * reading: the stream must hold the engine back (backpressure, not buffering the answer in the
 * runtime), and `client_idle_timeout_ms` (3 s in the e2e config) must end it, abort the engine and
 * settle. Every request settles (a usage record, nothing held) and the runtime's memory stays
 * bounded. Nothing stands between the sockets and the gateway's workerd (there is no proxy, unlike
 * under `wrangler dev`; test/tooling/vanishing-clients.test.ts is the same wave against `npm
 * start`). This file runs a gateway of its own (same config as the e2e one), so the wave never
 * slows the other e2e files' shared one.
 */
import { execFileSync } from "node:child_process";
import { connect, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TEST_ADMIN_TOKEN } from "../support/test-config";
import { startE2eStack } from "./global-setup";
import { waitFor } from "./support";

let own: { url: string; pgid: number } | undefined;
let closeOwn: (() => Promise<void>) | undefined;

beforeAll(async () => {
	const stack = await startE2eStack();
	own = stack.gateway;
	closeOwn = stack.close;
}, 120_000);

afterAll(async () => {
	await closeOwn?.();
}, 60_000);

const gatewayUrl = (): string => (own as { url: string }).url;

const CLOSERS = 60;
const SILENT = 10;
/** Wide: a quiet run grows by a few tens of MB; the bug this guards against grew by over a gigabyte. */
const MAX_GROWTH_MB = 300;

/** Resident memory (MB) of the workerd processes of this file's gateway (its process group). */
function memory(): { runtime: number; count: number } {
	const pgid = (own as { pgid: number }).pgid;
	const out = execFileSync("ps", ["-eo", "pid=,pgid=,rss=,args="], { encoding: "utf8" });
	let runtime = 0;
	let count = 0;
	for (const line of out.split("\n")) {
		const m = /^\s*(\d+)\s+(\d+)\s+(\d+)\s+(.*)$/.exec(line);
		if (!m || Number(m[2]) !== pgid || !/workerd\s+serve/.test(m[4] as string)) continue;
		runtime += Number(m[3]) / 1024;
		count += 1;
	}
	return { runtime, count };
}

async function call<T>(base: string, path: string, init: RequestInit = {}): Promise<T> {
	const res = await fetch(`${base}${path}`, {
		...init,
		headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}`, "content-type": "application/json" },
		signal: AbortSignal.timeout(10_000),
	});
	if (!res.ok) throw new Error(`${path}: ${res.status} ${await res.text()}`);
	return (await res.json()) as T;
}

/** Sends one streaming request on a raw socket; `close` ends the socket after that many ms, else it is never read. */
function send(base: string, key: string, body: string, closeAfterMs: number | null): Socket {
	const { hostname, port } = new URL(base);
	const socket = connect(Number(port), hostname, () => {
		socket.write(
			`POST /v1/chat/completions HTTP/1.1\r\nhost: ${hostname}\r\nauthorization: Bearer ${key}\r\n` +
				`content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
		);
		if (closeAfterMs === null) socket.pause();
		else setTimeout(() => socket.destroy(), closeAfterMs);
	});
	socket.on("error", () => {});
	return socket;
}

describe("a wave of streaming clients that leave before the headers or never read", () => {
	it("settles every request and keeps the runtime's memory bounded", { timeout: 90_000 }, async () => {
		const base = gatewayUrl();
		const k = await call<{ id: string; key: string }>(base, "/admin/keys", {
			method: "POST",
			body: JSON.stringify({ name: "wave", balance_usd: 50 }),
		});
		// A 1,000-token answer each (the model's output cap): an echo of a long prompt.
		const prompt = Array.from({ length: 1500 }, (_, i) => `w${i}`).join(" ");
		const body = JSON.stringify({
			model: "test/ok",
			stream: true,
			max_tokens: 1000,
			messages: [{ role: "user", content: prompt }],
		});
		const before = memory();
		// The gateway's own workerd, and no proxy in front of it.
		expect(before.count).toBe(1);
		let peak = before.runtime;
		const sample = setInterval(() => {
			peak = Math.max(peak, memory().runtime);
		}, 250);
		const sockets: Socket[] = [];
		let settled: { status: string }[] = [];
		try {
			for (let i = 0; i < CLOSERS; i++) sockets.push(send(base, k.key, body, i % 61));
			for (let i = 0; i < SILENT; i++) sockets.push(send(base, k.key, body, null));
			const records = await waitFor(
				async () => {
					const page = await call<{ data: { status: string }[] }>(base, `/admin/usage?key_id=${k.id}&limit=500`);
					if (process.env.VENYM_WAVE_DEBUG) console.log("settled", page.data.length, JSON.stringify(memory()));
					return page.data.length >= CLOSERS + SILENT ? page.data : null;
				},
				60_000,
				"a usage record for every request",
			);
			expect(records).toHaveLength(CLOSERS + SILENT);
			settled = records;
			const held = await waitFor(async () => {
				const key = await call<{ held_usd: number }>(base, `/admin/keys/${k.id}`);
				return key.held_usd === 0 ? key : null;
			}, 10_000);
			expect(held.held_usd).toBe(0);
		} finally {
			clearInterval(sample);
			for (const s of sockets) s.destroy();
		}
		const growth = peak - before.runtime;
		const outcomes: Record<string, number> = {};
		for (const r of settled) outcomes[r.status] = (outcomes[r.status] ?? 0) + 1;
		console.log(
			`client wave: outcomes ${JSON.stringify(outcomes)}; workerd RSS growth ${growth.toFixed(0)} MB (before ${before.runtime.toFixed(0)} MB)`,
		);
		expect(growth).toBeLessThan(MAX_GROWTH_MB);
	});
});
