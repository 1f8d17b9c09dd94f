/**
 * The request log line as an OpenTelemetry log record (dev/otlp-logs.mjs) sent over OTLP/HTTP to a
 * minimal receiver: each field arrives as one attribute of the same name and type, and decoding
 * the record gives back the line exactly. Local workerd has no OTLP exporter of its own
 * (docs/operations.md "OpenTelemetry"): this is the mapping a collector gets for the lines a local
 * gateway prints.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type AnyValue, type ExportLogsServiceRequest, send } from "../../../dev/otlp-logs.mjs";
import { logEvent } from "../../../src/observability/log-event";
import { RequestLog } from "../../../src/observability/request-log";

const CLI = fileURLToPath(new URL("../../../dev/otlp-logs.mjs", import.meta.url));

/** What the receiver got: each POST's body, as OTLP/HTTP JSON. */
const received: ExportLogsServiceRequest[] = [];
let server: Server;
let endpoint = "";

/** An AnyValue back as JSON (the receiver's side of the mapping). */
function decodeValue(v: AnyValue): unknown {
	if ("stringValue" in v) return v.stringValue;
	if ("boolValue" in v) return v.boolValue;
	if ("intValue" in v) return Number(v.intValue);
	if ("doubleValue" in v) return v.doubleValue;
	if ("arrayValue" in v) return v.arrayValue.values.map(decodeValue);
	if ("kvlistValue" in v) return Object.fromEntries(v.kvlistValue.values.map((kv) => [kv.key, decodeValue(kv.value)]));
	return null;
}

/** Every record the receiver got, decoded back into a line (body as `message`). */
function decoded(): Record<string, unknown>[] {
	return received.flatMap((req) =>
		req.resourceLogs.flatMap((rl) =>
			rl.scopeLogs.flatMap((sl) =>
				sl.logRecords.map((r) => ({
					message: decodeValue(r.body),
					...Object.fromEntries(r.attributes.map((a) => [a.key, decodeValue(a.value)])),
				})),
			),
		),
	);
}

async function bodyOf(req: IncomingMessage): Promise<string> {
	let text = "";
	for await (const chunk of req) text += chunk;
	return text;
}

beforeAll(async () => {
	// The smallest OTLP/HTTP logs receiver: JSON encoding on /v1/logs, as a collector's otlp receiver takes it.
	server = createServer(async (req, res) => {
		if (req.method !== "POST" || req.url !== "/v1/logs" || req.headers["content-type"] !== "application/json") {
			res.writeHead(404).end();
			return;
		}
		received.push(JSON.parse(await bodyOf(req)) as ExportLogsServiceRequest);
		res.writeHead(200, { "content-type": "application/json" }).end("{}");
	});
	server.listen(0, "127.0.0.1");
	await once(server, "listening");
	endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/logs`;
});

afterAll(async () => {
	server.closeAllConnections();
	await new Promise((resolve) => server.close(resolve));
});

/** The lines the gateway writes for a served stream, a refusal and a node warning, captured from console. */
function gatewayLines(): Record<string, unknown>[] {
	const out: string[] = [];
	const capture = (...args: unknown[]) => out.push(String(args[0]));
	const spies = [vi.spyOn(console, "log"), vi.spyOn(console, "warn")].map((s) => s.mockImplementation(capture));
	try {
		const served = new RequestLog("req_served", "chat");
		served.asked({ model: "venym/a", stream: true });
		served.attempt("http://10.0.0.5:8000/v1", "affinity");
		served.engineStarted();
		served.answered("http://10.0.0.5:8000/v1");
		served.settled(
			{ payerKeyId: "key_1", model: { id: "venym/a" }, requestedModel: "venym/a" },
			{ status: "completed", usage: { prompt_tokens: 7, completion_tokens: 40, total_tokens: 47 }, estimated: false, node: null },
			87_000,
		);
		served.write(200);
		const refused = new RequestLog("req_refused", "messages");
		refused.asked({ model: "venym/a" });
		refused.failed("insufficient_balance", 402);
		refused.write(402);
		logEvent("warn", "engine node failed", { request_id: "req_served", node: "10.0.0.5:8000", status: 503 });
	} finally {
		for (const s of spies) s.mockRestore();
	}
	return out.map((text) => JSON.parse(text) as Record<string, unknown>);
}

describe("the log line over OTLP/HTTP", () => {
	it("arrives as one log record per line, field for field, and decodes back to the line", async () => {
		received.length = 0;
		const lines = gatewayLines();
		await send(endpoint, lines);
		expect(decoded()).toEqual(lines);
		const [served] = received[0]?.resourceLogs[0]?.scopeLogs[0]?.logRecords ?? [];
		const attr = (key: string) => served?.attributes.find((a) => a.key === key)?.value;
		// The GenAI and HTTP conventions' names and types, as a collector reads them.
		expect(attr("gen_ai.request.model")).toEqual({ stringValue: "venym/a" });
		expect(attr("gen_ai.usage.input_tokens")).toEqual({ intValue: "7" });
		expect(attr("gen_ai.usage.output_tokens")).toEqual({ intValue: "40" });
		expect(attr("gen_ai.operation.name")).toEqual({ stringValue: "chat" });
		expect(attr("http.response.status_code")).toEqual({ intValue: "200" });
		expect(attr("server.address")).toEqual({ stringValue: "10.0.0.5" });
		expect(attr("error.type")).toEqual({});
		expect(served?.body).toEqual({ stringValue: "request" });
		expect(served?.severityText).toBe("INFO");
		const warning = received[0]?.resourceLogs[0]?.scopeLogs[0]?.logRecords[2];
		expect([warning?.severityText, warning?.severityNumber]).toEqual(["WARN", 13]);
	});

	it("forwards what `npm start` prints, from stdin, skipping lines that are not JSON", async () => {
		received.length = 0;
		const lines = gatewayLines();
		const child = spawn(process.execPath, [CLI, endpoint], { stdio: ["pipe", "ignore", "inherit"] });
		child.stdin.write("⎔ Starting local server...\n");
		for (const l of lines) child.stdin.write(`${JSON.stringify(l)}\n`);
		child.stdin.end("[wrangler:info] Ready on http://localhost:8787\n");
		const [code] = await once(child, "exit");
		expect(code).toBe(0);
		expect(decoded()).toEqual(lines);
	});
});
