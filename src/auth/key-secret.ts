/**
 * API key secrets: `vk-` + 192 random bits (base64url) + a 6-character checksum, so a
 * mistyped key is refused without a database read. Only the SHA-256 digest is stored.
 */
const PREFIX = "vk-";
const BODY_BYTES = 24;
const CHECK_LEN = 6;

function base64url(bytes: Uint8Array): string {
	let s = "";
	for (const b of bytes) s += String.fromCharCode(b);
	return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

const CRC_TABLE = (() => {
	const t = new Uint32Array(256);
	for (let n = 0; n < 256; n++) {
		let c = n;
		for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
		t[n] = c >>> 0;
	}
	return t;
})();

function crc32(text: string): number {
	let c = 0xffffffff;
	for (let i = 0; i < text.length; i++) c = (CRC_TABLE[(c ^ text.charCodeAt(i)) & 0xff] as number) ^ (c >>> 8);
	return (c ^ 0xffffffff) >>> 0;
}

function checksum(body: string): string {
	return crc32(body).toString(36).padStart(CHECK_LEN, "0").slice(-CHECK_LEN);
}

/** A new secret; `kind` "tmp" makes short-lived browser tokens (`vk-tmp-…`). */
export function generateSecret(kind: "key" | "tmp" = "key"): string {
	const head = kind === "tmp" ? `${PREFIX}tmp-` : PREFIX;
	const body = base64url(crypto.getRandomValues(new Uint8Array(BODY_BYTES)));
	return `${head}${body}${checksum(body)}`;
}

/** True when the string has the shape of a key we issued and its checksum matches. */
export function isWellFormedSecret(secret: string): boolean {
	const m = /^vk-(?:tmp-)?([A-Za-z0-9_-]{32})([0-9a-z]{6})$/.exec(secret);
	return m !== null && checksum(m[1] as string) === m[2];
}

export async function hashSecret(secret: string): Promise<string> {
	const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(secret)));
	let hex = "";
	for (const b of digest) hex += b.toString(16).padStart(2, "0");
	return hex;
}

/** Constant-time string comparison (compares SHA-256 digests so lengths never leak). */
export async function timingSafeEqualStrings(a: string, b: string): Promise<boolean> {
	const enc = new TextEncoder();
	const [da, db] = await Promise.all([
		crypto.subtle.digest("SHA-256", enc.encode(a)),
		crypto.subtle.digest("SHA-256", enc.encode(b)),
	]);
	return crypto.subtle.timingSafeEqual(da, db);
}
