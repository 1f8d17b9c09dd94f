#!/usr/bin/env node
// The gateway's JSON log lines as OTLP/HTTP log records (JSON encoding), for a collector when the
// lines do not come through Cloudflare's own OTLP export: `npm start` locally (local workerd has no
// OTLP exporter: docs/operations.md "OpenTelemetry"), or `wrangler tail --format json`.
//
//   npm start | node dev/otlp-logs.mjs http://127.0.0.1:4318/v1/logs
//
// One line is one log record, field for field: `message` is the body, every other field one
// attribute of the same name and JSON type (a null is an attribute with an empty value), so a
// collector sees `gen_ai.request.model`, `http.response.status_code`, … exactly as the line has
// them. Lines that are not JSON objects are passed over.
import { createInterface } from "node:readline";

const SEVERITY = { warn: ["WARN", 13], error: ["ERROR", 17] };

/** One JSON value as an OTLP AnyValue (OTLP's JSON encoding writes 64-bit integers as strings). */
export function anyValue(v) {
	if (v === null || v === undefined) return {};
	if (typeof v === "boolean") return { boolValue: v };
	if (typeof v === "number") return Number.isInteger(v) ? { intValue: String(v) } : { doubleValue: v };
	if (typeof v === "string") return { stringValue: v };
	if (Array.isArray(v)) return { arrayValue: { values: v.map(anyValue) } };
	return { kvlistValue: { values: Object.entries(v).map(([key, value]) => ({ key, value: anyValue(value) })) } };
}

/** One parsed line as a LogRecord; `timeMs` when it was written. */
export function logRecord(line, timeMs = Date.now()) {
	const { message, ...fields } = line;
	const [severityText, severityNumber] = SEVERITY[line.level] ?? ["INFO", 9];
	return {
		timeUnixNano: `${BigInt(Math.round(timeMs)) * 1_000_000n}`,
		severityNumber,
		severityText,
		body: anyValue(message),
		attributes: Object.entries(fields).map(([key, value]) => ({ key, value: anyValue(value) })),
	};
}

/** An ExportLogsServiceRequest holding `lines`, as the gateway's service. */
export function exportRequest(lines, timeMs = Date.now()) {
	return {
		resourceLogs: [
			{
				resource: { attributes: [{ key: "service.name", value: { stringValue: "venym-gateway" } }] },
				scopeLogs: [{ scope: { name: "venym-gateway" }, logRecords: lines.map((l) => logRecord(l, timeMs)) }],
			},
		],
	};
}

/** The text's JSON object, or null (a plain log line, a stack trace, a `wrangler tail` banner). */
export function parseLine(text) {
	const start = text.indexOf("{");
	if (start < 0) return null;
	try {
		const v = JSON.parse(text.slice(start));
		return v !== null && typeof v === "object" && !Array.isArray(v) ? v : null;
	} catch {
		return null;
	}
}

/** POSTs `lines` to an OTLP/HTTP logs endpoint; throws unless it answers 2xx. */
export async function send(endpoint, lines, headers = {}) {
	const res = await fetch(endpoint, {
		method: "POST",
		headers: { "content-type": "application/json", ...headers },
		body: JSON.stringify(exportRequest(lines)),
	});
	await res.text();
	if (!res.ok) throw new Error(`OTLP endpoint answered ${res.status}`);
}

async function main(endpoint) {
	const batch = [];
	let flushing = Promise.resolve();
	const flush = () => {
		const lines = batch.splice(0);
		if (lines.length) flushing = flushing.then(() => send(endpoint, lines)).catch((err) => console.error(String(err)));
	};
	const timer = setInterval(flush, 1000);
	for await (const text of createInterface({ input: process.stdin })) {
		process.stdout.write(`${text}\n`);
		const line = parseLine(text);
		if (line && typeof line.message === "string") batch.push(line);
		if (batch.length >= 100) flush();
	}
	clearInterval(timer);
	flush();
	await flushing;
}

if (import.meta.url === `file://${process.argv[1]}`) {
	const endpoint = process.argv[2];
	if (!endpoint) {
		console.error("usage: node dev/otlp-logs.mjs <OTLP/HTTP logs endpoint, e.g. http://127.0.0.1:4318/v1/logs>");
		process.exit(2);
	}
	await main(endpoint);
}
