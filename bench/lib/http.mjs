// The load generator's HTTP client: node:http with one keep-alive agent per target, so the
// connection pools never interfere. No Accept-Encoding is sent: Miniflare's entry worker
// would otherwise gzip JSON and SSE inside workerd, which Cloudflare's edge does, not the Worker.
import http from "node:http";
import { performance } from "node:perf_hooks";

export function makeAgent(maxSockets) {
	return new http.Agent({ keepAlive: true, maxSockets, maxFreeSockets: maxSockets, keepAliveMsecs: 30_000 });
}

/**
 * One request. Resolves with timings in ms from the moment the request was issued:
 * `headers` (response head), `first` (first body byte), `total` (end of body).
 */
export function send(target, path, body, { keepText = false } = {}) {
	return new Promise((resolve) => {
		const payload = Buffer.from(body);
		const t0 = performance.now();
		const req = http.request(
			`${target.url}${path}`,
			{
				method: "POST",
				agent: target.agent,
				headers: {
					"content-type": "application/json",
					"content-length": payload.length,
					authorization: `Bearer ${target.key ?? "none"}`,
					...target.headers,
				},
			},
			(res) => {
				const headers = performance.now() - t0;
				let first = -1;
				let bytes = 0;
				const chunks = keepText ? [] : null;
				let frames = 0;
				let lastByte = 0;
				let tail = "";
				res.on("data", (chunk) => {
					if (first < 0) first = performance.now() - t0;
					bytes += chunk.length;
					if (chunks) chunks.push(chunk);
					// SSE frames are single data lines ending in a blank line: count "\n\n".
					if (lastByte === 10 && chunk[0] === 10) frames++;
					let at = chunk.indexOf("\n\n");
					while (at !== -1) {
						frames++;
						at = chunk.indexOf("\n\n", at + 2);
					}
					lastByte = chunk[chunk.length - 1];
					tail = (tail + chunk.toString("latin1")).slice(-64);
				});
				res.on("end", () => {
					const total = performance.now() - t0;
					resolve({
						ok: res.statusCode === 200,
						status: res.statusCode,
						headers,
						first: first < 0 ? total : first,
						total,
						bytes,
						frames,
						tail,
						text: chunks ? Buffer.concat(chunks).toString("utf8") : undefined,
						responseHeaders: res.headers,
					});
				});
				res.on("error", (err) => resolve({ ok: false, status: 0, error: String(err), total: performance.now() - t0 }));
			},
		);
		req.on("error", (err) => resolve({ ok: false, status: 0, error: String(err), total: performance.now() - t0 }));
		req.end(payload);
	});
}
