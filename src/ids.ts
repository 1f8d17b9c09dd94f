/** A random id: `prefix` + `bytes` random bytes as lowercase hex (request, response, key and credit ids). */
export function randomId(prefix: string, bytes = 12): string {
	const raw = crypto.getRandomValues(new Uint8Array(bytes));
	let hex = "";
	for (const b of raw) hex += b.toString(16).padStart(2, "0");
	return `${prefix}${hex}`;
}
