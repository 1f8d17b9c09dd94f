/**
 * The signature every alert webhook carries (docs/operations.md, "Verifying a delivery"):
 * `x-venym-signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">` under
 * ALERT_WEBHOOK_SECRET, as Stripe signs its webhooks. The timestamp is inside the MAC, so a
 * receiver that refuses old timestamps (and remembers `x-venym-delivery` ids) refuses replays.
 */

export const SIGNATURE_HEADER = "x-venym-signature";
/** How old a signature's timestamp may be before `verifyAlertSignature` refuses it. */
export const SIGNATURE_TOLERANCE_S = 300;

const encoder = new TextEncoder();

async function hmacHex(secret: string, text: string): Promise<string> {
	const key = await crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
	const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, encoder.encode(text)));
	return Array.from(mac, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** The header value for `body` sent at `t` (unix seconds). */
export async function signAlert(secret: string, body: string, t: number): Promise<string> {
	return `t=${t},v1=${await hmacHex(secret, `${t}.${body}`)}`;
}

/** Compares in time independent of where the strings first differ. */
function equalTimed(a: string, b: string): boolean {
	if (a.length !== b.length) return false;
	let diff = 0;
	for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
	return diff === 0;
}

/**
 * Whether `header` signs `body` (the raw bytes as received, before any JSON parsing) under
 * `secret`, with a timestamp within `toleranceS` of `nowS`. What a receiver runs.
 */
export async function verifyAlertSignature(
	secret: string,
	header: string | null,
	body: string,
	nowS: number,
	toleranceS = SIGNATURE_TOLERANCE_S,
): Promise<boolean> {
	if (!header) return false;
	const parts = new Map(header.split(",").map((p) => p.split("=", 2) as [string, string]));
	const t = Number(parts.get("t"));
	const v1 = parts.get("v1");
	if (!Number.isSafeInteger(t) || !v1 || Math.abs(nowS - t) > toleranceS) return false;
	return equalTimed(await hmacHex(secret, `${t}.${body}`), v1);
}
