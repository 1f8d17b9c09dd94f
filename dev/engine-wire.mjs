// Writing engine answers to a Node response, the healthy ways and the broken ones. Shared by
// the scenarios (dev/engine-scenarios.mjs) and the server (dev/engine.mjs).

/** OpenAI's error body. */
export const nestedError = (message, type, code) => ({ error: { message, type, param: null, code } });
/** vLLM's error body: the same fields, not nested. */
export const flatError = (message, type, code) => ({ object: "error", message, type, param: null, code });

// Unref'd so a pending pause never keeps a closed engine's process alive.
export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms).unref());

export function sendJson(res, status, value, headers = {}) {
	const body = JSON.stringify(value);
	res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body), ...headers });
	res.end(body);
}

export function sendText(res, status, text) {
	res.writeHead(status, { "content-type": "text/plain", "content-length": Buffer.byteLength(text) });
	res.end(text);
}

// Engine-initiated breakage must not look like the client aborting in the record.
export function closeAbruptly(ctx) {
	ctx.selfClosed = true;
	ctx.res.socket?.destroy();
}

// Give what was already written time to reach the client before the socket dies.
export async function cutAfterFlush(ctx) {
	await sleep(20);
	closeAbruptly(ctx);
}

// Headers are out, then silence until the gateway gives up and closes the connection.
export function stallForever(ctx) {
	return new Promise((resolve) => ctx.res.on("close", resolve));
}
