/**
 * A body read whole as text, but never past `maxBytes`: the rest is cancelled unread and the
 * answer is null. For bodies whose size no header vouches for (chunked requests, probe answers).
 * `drain`: a client's request body over the limit is read and dropped first (discardRest), so
 * the client hears the refusal; an answer the gateway fetched is cancelled at once.
 */
export async function readCappedText(
	body: ReadableStream<Uint8Array> | null,
	maxBytes: number,
	drain = false,
): Promise<string | null> {
	if (!body) return "";
	const reader = body.getReader();
	const chunks: Uint8Array[] = [];
	let size = 0;
	for (;;) {
		const { done, value } = await reader.read();
		if (done) break;
		size += value.byteLength;
		if (size > maxBytes) {
			if (drain) await discardRest(reader, size);
			else await reader.cancel().catch(() => {});
			return null;
		}
		chunks.push(value);
	}
	if (chunks.length === 1) return new TextDecoder().decode(chunks[0]);
	const all = new Uint8Array(size);
	let offset = 0;
	for (const c of chunks) {
		all.set(c, offset);
		offset += c.byteLength;
	}
	return new TextDecoder().decode(all);
}

/** The most of a refused body read and dropped so that its client hears the refusal. */
const DISCARD_MAX_BYTES = 32 * 1024 * 1024;
const DISCARD_MAX_MS = 10_000;

/**
 * Reads what is left of a refused body and drops it, up to DISCARD_MAX_BYTES (counting `seen`)
 * and DISCARD_MAX_MS, then cancels the rest. A runtime that serves the Worker directly (workerd
 * under `npm start`) resets a connection whose request is still being sent when the answer
 * ends, so a client sending a body over the limit would see ECONNRESET instead of the 413;
 * Cloudflare's edge buffers, but the drain costs it little (nothing is kept).
 */
export async function discardRest(reader: ReadableStreamDefaultReader<Uint8Array>, seen = 0): Promise<void> {
	const deadline = Date.now() + DISCARD_MAX_MS;
	let size = seen;
	try {
		while (size <= DISCARD_MAX_BYTES && Date.now() < deadline) {
			const timer = new Promise<null>((resolve) => setTimeout(() => resolve(null), Math.max(0, deadline - Date.now())));
			const next = await Promise.race([reader.read(), timer]);
			if (next === null || next.done) break;
			size += next.value.byteLength;
		}
	} catch {
		// The client went away: nothing left to read.
	}
	await reader.cancel().catch(() => {});
}
