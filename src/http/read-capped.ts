/**
 * A body read whole as text, but never past `maxBytes`: the rest is cancelled unread and the
 * answer is null. For bodies whose size no header vouches for (chunked requests, probe answers).
 */
export async function readCappedText(body: ReadableStream<Uint8Array> | null, maxBytes: number): Promise<string | null> {
	if (!body) return "";
	const reader = body.getReader();
	const chunks: Uint8Array[] = [];
	let size = 0;
	for (;;) {
		const { done, value } = await reader.read();
		if (done) break;
		size += value.byteLength;
		if (size > maxBytes) {
			await reader.cancel().catch(() => {});
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
