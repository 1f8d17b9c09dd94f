/**
 * A node's key never reaches a client or a log line through engine text: an engine that echoes
 * the Authorization the gateway sent it (dev/engine-scenarios.mjs `echoauth*`), in completion
 * text split over two stream frames, in a mid-stream error, or in a 200 error body.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type ErrorBody, info, ping } from "../../support/billing";
import { fleetConfig, gatewayWith, marker, model, nodeUrl, setNode } from "../../support/fleet";
import { chat, createKey, readSse, waitFor } from "../../support/gateway";
import { TEST_NODE_KEY } from "../../support/test-config";

const logs: string[] = [];
let key: string;
const t = marker("sec");
const nodes = { content: `${t}content`, mid: `${t}mid`, err200: `${t}err200` };
const keyed = (name: string) => ({ url: nodeUrl(name), api_key_env: "NODE_KEY" });
// Not a test of timeouts: a busy host may take longer than the fleet config's 600 ms to a first byte.
const gw = gatewayWith({
	...fleetConfig([
		model("echo", [keyed(nodes.content)], { max_output_tokens: 200 }),
		model("mid", [keyed(nodes.mid)]),
		model("err200", [keyed(nodes.err200)]),
	]),
	first_byte_timeout_ms: 10_000,
});

beforeAll(async () => {
	key = (await createKey({ name: "engine-secrets", balance_usd: 10 })).key;
	await setNode(nodes.content, { scenario: "echoauthcontent" });
	await setNode(nodes.mid, { scenario: "echoauthmid" });
	await setNode(nodes.err200, { scenario: "echoauth200" });
	for (const method of ["warn", "error"] as const) {
		vi.spyOn(console, method).mockImplementation((...args: unknown[]) => {
			logs.push(args.map(String).join(" "));
		});
	}
});

afterAll(() => {
	vi.restoreAllMocks();
});

/** The text a stream's chunks carry, in order. */
function streamedText(frames: string[], pick: (chunk: Record<string, unknown>) => unknown): string {
	let text = "";
	for (const f of frames) {
		if (f === "[DONE]") continue;
		const v = pick(JSON.parse(f) as Record<string, unknown>);
		if (typeof v === "string") text += v;
	}
	return text;
}

const choice0 = (c: Record<string, unknown>) => (c.choices as Array<Record<string, unknown>> | undefined)?.[0];

describe("completion text that echoes the node key", () => {
	it("is redacted in a chat stream, the key split over two frames", async () => {
		const a = await gw.chat(key, { model: "echo", stream: true, messages: [{ role: "user", content: "hi" }] });
		expect(a.res.status).toBe(200);
		expect(a.text).not.toContain(TEST_NODE_KEY);
		const frames = await readSse(new Response(a.text));
		const content = streamedText(frames, (c) => (choice0(c)?.delta as Record<string, unknown> | undefined)?.content);
		expect(content).toMatch(/^Echo: hi Authorization: Bearer \[redacted\]/);
	});

	it("is redacted in a chat answer", async () => {
		const a = await gw.chat(key, { model: "echo", messages: [{ role: "user", content: "hi" }] });
		expect(a.res.status).toBe(200);
		expect(a.text).not.toContain(TEST_NODE_KEY);
		expect((choice0(a.json ?? {})?.message as { content?: string } | undefined)?.content).toMatch(
			/Authorization: Bearer \[redacted\]/,
		);
	});

	it("is redacted in legacy completions, streamed and not", async () => {
		const streamed = await gw.post(key, "/v1/completions", { model: "echo", prompt: "hi", max_tokens: 50, stream: true });
		expect(streamed.res.status).toBe(200);
		expect(streamed.text).not.toContain(TEST_NODE_KEY);
		const text = streamedText(await readSse(new Response(streamed.text)), (c) => choice0(c)?.text);
		expect(text).toBe("Echo: hi Authorization: Bearer [redacted]");
		const whole = await gw.post(key, "/v1/completions", { model: "echo", prompt: "hi", max_tokens: 50 });
		expect(whole.res.status).toBe(200);
		expect(whole.text).not.toContain(TEST_NODE_KEY);
		expect(choice0(whole.json ?? {})?.text).toBe("Echo: hi Authorization: Bearer [redacted]");
	});

	it("is redacted in Responses, streamed and not", async () => {
		const streamed = await gw.post(key, "/v1/responses", { model: "echo", input: "hi", stream: true, store: false });
		expect(streamed.res.status).toBe(200);
		expect(streamed.text).not.toContain(TEST_NODE_KEY);
		expect(streamed.text).toContain("Bearer [redacted]");
		const whole = await gw.post(key, "/v1/responses", { model: "echo", input: "hi", store: false });
		expect(whole.res.status).toBe(200);
		expect(whole.text).not.toContain(TEST_NODE_KEY);
		expect(whole.text).toContain("Bearer [redacted]");
	});
});

describe("engine errors that echo the node key", () => {
	it("never reach a log line: a mid-stream failure, and an error in place of the answer (non-stream)", async () => {
		const mid = await gw.chat(key, { model: "mid", stream: true, messages: [{ role: "user", content: "hi" }] });
		expect(mid.res.status).toBe(200);
		const err = await gw.chat(key, { model: "err200", messages: [{ role: "user", content: "hi" }] });
		expect(err.res.status).toBe(502);
		const midLine = logs.find(
			(l) => l.includes("engine failed mid-stream") && l.includes(mid.res.headers.get("x-request-id") ?? "?"),
		);
		const errLine = logs.find(
			// The engine is always asked for a stream: its error event ends it before any content.
			(l) => l.includes("engine failed") && l.includes(err.res.headers.get("x-request-id") ?? "?"),
		);
		expect(midLine).toContain("CUDA out of memory");
		expect(errLine).toContain("model is loading");
		for (const line of [midLine, errLine]) expect(line).toContain("[redacted]");
		expect(logs.join("\n")).not.toContain(TEST_NODE_KEY);
		expect(mid.text + err.text).not.toContain(TEST_NODE_KEY);
	});
});

describe("engine refusals", () => {
	it("are cut to 1,000 characters and never carry the node's secret", async () => {
		const k = await createKey({ balance_usd: 1 });
		const res = await chat(k.key, { model: "test/echoauth", messages: [{ role: "user", content: ping() }] });
		expect(res.status).toBe(400);
		const text = await res.text();
		expect(text).not.toContain(TEST_NODE_KEY);
		const body = JSON.parse(text) as ErrorBody;
		expect(body.error.message.length).toBeLessThanOrEqual(1001);
		expect(body.error.message).toContain("[redacted]");
		expect(String(body.error.param)).not.toContain(TEST_NODE_KEY);
		// The refusal released its hold (settled just after the answer went out) and cost nothing.
		const after = await waitFor(async () => {
			const i = await info(k.id);
			return i.openHolds === 0 ? i : null;
		});
		expect(after.spentNanos).toBe(0);
	});
});
