/**
 * A wave of streaming clients that send their request and close the socket before the headers,
 * with more that keep the socket open and never read, against the workerd that runs the gateway
 * under `wrangler dev`, over raw sockets (node:net: no client library reads for us). Local workerd
 * never tells the gateway such a client is gone, so each may look like a client that stopped
 * reading: the stream must hold the engine back (backpressure, not buffering the answer in the
 * runtime), and `client_idle_timeout_ms` (3 s in the e2e config) must end it, abort the engine and
 * settle. Every request settles (a usage record, nothing held) and the runtime's memory stays
 * bounded.
 *
 * The sockets go to the gateway's own workerd, not to the port `wrangler dev` prints: that port is
 * wrangler's ProxyWorker (a second workerd), which reads a response as fast as the gateway sends it
 * whether or not its client reads, and keeps every chunk (about 8 KB each) for a client that is
 * gone: with this wave it grows by hundreds of MB and stops answering, whatever the gateway does.
 * Production has no such proxy. The proxy's growth is printed, not asserted. Because the wave
 * leaves that proxy unable to answer for a while, this file runs a `wrangler dev` of its own
 * (same config as the e2e one) instead of the shared one the other e2e files use.
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

interface Workerd {
	pid: number;
	rssMb: number;
	/** wrangler dev's own proxy in front of the gateway (it listens on the gateway's port); the other one runs the gateway. */
	proxy: boolean;
}

/** The workerd processes of the e2e `wrangler dev` (its process group), with their resident memory. */
function workerds(): Workerd[] {
	const pgid = (own as { pgid: number }).pgid;
	const port = new URL(gatewayUrl()).port;
	const out = execFileSync("ps", ["-eo", "pid=,pgid=,rss=,args="], { encoding: "utf8" });
	const found: Workerd[] = [];
	for (const line of out.split("\n")) {
		const m = /^\s*(\d+)\s+(\d+)\s+(\d+)\s+(.*)$/.exec(line);
		if (!m || Number(m[2]) !== pgid || !/workerd\s+serve/.test(m[4] as string)) continue;
		found.push({ pid: Number(m[1]), rssMb: Number(m[3]) / 1024, proxy: (m[4] as string).includes(`:${port} `) });
	}
	return found;
}

/** Resident memory of the workerd that runs the gateway, and of wrangler's proxy in front of it. */
function memory(): { runtime: number; proxy: number } {
	const all = workerds();
	const sum = (ws: Workerd[]) => ws.reduce((s, w) => s + w.rssMb, 0);
	return { runtime: sum(all.filter((w) => !w.proxy)), proxy: sum(all.filter((w) => w.proxy)) };
}

/** The gateway's own workerd's HTTP address: the one of its listening ports that answers /healthz. */
async function runtimeUrl(): Promise<string> {
	const pids = workerds()
		.filter((w) => !w.proxy)
		.map((w) => w.pid);
	const out = execFileSync("ss", ["-ltnpH"], { encoding: "utf8" });
	for (const line of out.split("\n")) {
		if (!pids.some((pid) => line.includes(`pid=${pid},`))) continue;
		const port = /127\.0\.0\.1:(\d+)\s/.exec(line)?.[1];
		if (!port) continue;
		const url = `http://127.0.0.1:${port}`;
		const ok = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(5000) }).then(
			(r) => r.ok,
			() => false,
		);
		if (ok) return url;
	}
	throw new Error(`no listening port of workerd ${pids.join(",")} answers /healthz`);
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
		const base = await runtimeUrl();
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
		let peak = before;
		const sample = setInterval(() => {
			const now = memory();
			peak = { runtime: Math.max(peak.runtime, now.runtime), proxy: Math.max(peak.proxy, now.proxy) };
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
		const growth = { runtime: peak.runtime - before.runtime, proxy: peak.proxy - before.proxy };
		const outcomes: Record<string, number> = {};
		for (const r of settled) outcomes[r.status] = (outcomes[r.status] ?? 0) + 1;
		console.log(
			`client wave: outcomes ${JSON.stringify(outcomes)}; workerd RSS growth ${JSON.stringify(growth)} MB (before ${JSON.stringify(before)})`,
		);
		expect(growth.runtime).toBeLessThan(MAX_GROWTH_MB);
	});
});
