/**
 * Sealed reasoning: what a stateless client (`store: false`, Codex) carries from one turn to the
 * next as a reasoning item's `encrypted_content`. The engine's reasoning text is sealed with
 * AES-GCM (WebCrypto) under a key derived from the deployment's `REASONING_SEAL_SECRET`, bound to
 * the calling key, so only this deployment, for this key, can open it. Without the secret nothing
 * is sealed (no `encrypted_content`) and nothing is opened. A seal that does not open (another
 * deployment or key, tampered, too large, malformed) opens to nothing: its reasoning is dropped,
 * never an error.
 */

import { logEvent } from "../observability/log-event";

/** The env var holding the deployment's seal secret. */
export const SEAL_SECRET_ENV = "REASONING_SEAL_SECRET";
/** Reasoning longer than this is not sealed (the item then has no `encrypted_content`). */
export const MAX_SEALED_REASONING_CHARS = 64 * 1024;
/** The longest `encrypted_content` opened: the sealed form of the longest reasoning sealed. */
export const MAX_SEAL_CHARS = Math.ceil(((MAX_SEALED_REASONING_CHARS * 3 + 12 + 16) * 4) / 3) + 16;

const VERSION = "v1.";
const IV_BYTES = 12;
const MIN_SECRET_CHARS = 16;

const bytes = new TextEncoder();
const chars = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
/** Derived keys by secret: a deployment has one (two while it rotates); the map never grows past a few. */
const keys = new Map<string, Promise<CryptoKey>>();
const MAX_KEYS = 4;

/** The deployment's secret, when one long enough is set. */
export function sealSecret(env: unknown): string | undefined {
	const v = env && typeof env === "object" ? (env as Record<string, unknown>)[SEAL_SECRET_ENV] : undefined;
	if (typeof v === "string" && v.length >= MIN_SECRET_CHARS) return v;
	if (typeof v === "string" && v.length > 0 && !warnedShort) {
		// Set but too short: sealing stays off, and the operator hears of it once per isolate.
		warnedShort = true;
		logEvent("warn", `${SEAL_SECRET_ENV} is shorter than ${MIN_SECRET_CHARS} characters: reasoning is not sealed`, {
			length: v.length,
		});
	}
	return undefined;
}

let warnedShort = false;

function keyFor(secret: string): Promise<CryptoKey> {
	let key = keys.get(secret);
	if (!key) {
		key = crypto.subtle
			.digest("SHA-256", bytes.encode(`venym reasoning seal\0${secret}`))
			.then((raw) => crypto.subtle.importKey("raw", raw, "AES-GCM", false, ["encrypt", "decrypt"]));
		if (keys.size >= MAX_KEYS) keys.clear();
		keys.set(secret, key);
	}
	return key;
}

function toBase64Url(data: Uint8Array): string {
	let s = "";
	for (const b of data) s += String.fromCharCode(b);
	return btoa(s).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

function fromBase64Url(s: string): Uint8Array | undefined {
	if (!/^[A-Za-z0-9_-]*$/.test(s)) return undefined;
	try {
		const bin = atob(s.replaceAll("-", "+").replaceAll("_", "/"));
		return Uint8Array.from(bin, (c) => c.charCodeAt(0));
	} catch {
		return undefined;
	}
}

/** Seals `text` for the key `keyId`; undefined when there is no secret, no text, or too much of it. */
export async function sealReasoning(secret: string | undefined, keyId: string, text: string): Promise<string | undefined> {
	if (!secret || !text || text.length > MAX_SEALED_REASONING_CHARS) return undefined;
	const iv = crypto.getRandomValues(new Uint8Array(IV_BYTES));
	const sealed = await crypto.subtle.encrypt(
		{ name: "AES-GCM", iv, additionalData: bytes.encode(keyId) },
		await keyFor(secret),
		bytes.encode(text),
	);
	const out = new Uint8Array(IV_BYTES + sealed.byteLength);
	out.set(iv);
	out.set(new Uint8Array(sealed), IV_BYTES);
	return VERSION + toBase64Url(out);
}

/** The reasoning text in a seal made by `sealReasoning` for `keyId`; undefined when it does not open. */
export async function openReasoning(secret: string | undefined, keyId: string, sealed: unknown): Promise<string | undefined> {
	if (!secret || typeof sealed !== "string" || sealed.length > MAX_SEAL_CHARS || !sealed.startsWith(VERSION)) return undefined;
	const data = fromBase64Url(sealed.slice(VERSION.length));
	if (!data || data.length <= IV_BYTES + 16) return undefined;
	try {
		const plain = await crypto.subtle.decrypt(
			{ name: "AES-GCM", iv: data.subarray(0, IV_BYTES), additionalData: bytes.encode(keyId) },
			await keyFor(secret),
			data.subarray(IV_BYTES),
		);
		return chars.decode(plain);
	} catch {
		return undefined;
	}
}
