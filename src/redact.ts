/**
 * Node secrets out of engine text: the one scrubber for whatever an engine writes that the
 * gateway passes on, to a client (a refusal, completion text, a stream) or to a log line. An
 * engine that echoes its request puts the `Authorization` the gateway sent it into its answer;
 * it must reach neither the caller nor the logs.
 */

export const REDACTED = "[redacted]";

/** Very short secrets would redact ordinary words; nobody configures a key that short. */
const MIN_SECRET_CHARS = 8;

/**
 * The forms an echoing engine may give a secret in: as is, URL-encoded, base64 (alone, as
 * `Bearer …` or as Basic's `:secret`). Longest first, so a longer form is replaced whole.
 */
export function secretForms(secrets: readonly string[]): string[] {
	const forms = new Set<string>();
	for (const secret of secrets) {
		if (secret.length < MIN_SECRET_CHARS) continue;
		forms.add(secret);
		forms.add(encodeURIComponent(secret));
		try {
			forms.add(btoa(secret));
			forms.add(btoa(`Bearer ${secret}`));
			forms.add(btoa(`:${secret}`));
		} catch {
			// Not Latin-1: no base64 form to look for.
		}
	}
	return [...forms].sort((a, b) => b.length - a.length);
}

/**
 * `text` with every form replaced, exactly as written (completion text keeps its case otherwise),
 * and as a client reads it after decoding JSON string escapes (`decodeEscapes`).
 */
export function redactForms(text: string, forms: readonly string[]): string {
	let out = text;
	for (const form of forms) if (out.includes(form)) out = out.split(form).join(REDACTED);
	return out.includes("\\") && escapesMatter(out, forms) ? redactEscaped(out, forms, false) : out;
}

function escapeRegExp(s: string): string {
	return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/**
 * The longest a decoded UTF-16 unit is written (`\uXXXX`): how far back in the written text a
 * secret's start can lie, per decoded unit.
 */
export const MAX_ESCAPE_CHARS = 6;

/** The two-character escapes of a JSON string, decoded. */
const SIMPLE_ESCAPES: Record<string, string> = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };
const HEX4 = /^[0-9a-fA-F]{4}$/;
const HEX_PREFIX = /^[0-9a-fA-F]{0,3}$/;

/** Text as JSON decodes a string's body: the units, where each starts in the text, where decoding stopped. */
export interface Decoded {
	/** The decoded units that start at or after `from`. */
	text: string;
	/** Where each of them starts in the written text. */
	starts: number[];
	/** The start of an escape the text ends before finishing (`\`, `\u00`), else the text's length. */
	end: number;
}

/**
 * `raw` as a client reads it after JSON-decoding it as a string's body (a tool call's arguments,
 * structured output, any JSON the client parses): `\uXXXX` in either case (a surrogate pair is
 * two units, as in the text), `\/`, `\"`, `\\` and the control escapes; a backslash that starts
 * no escape stands for itself. Only units starting at or after `from` are collected, so a
 * caller that needs the tail pays for the backslashes before it, not for every character
 * (`indexOf` skips runs without one).
 */
export function decodeEscapes(raw: string, from = 0): Decoded {
	let text = "";
	const starts: number[] = [];
	const plain = (a: number, b: number) => {
		const s = Math.max(a, from);
		if (s >= b) return;
		text += raw.slice(s, b);
		for (let k = s; k < b; k++) starts.push(k);
	};
	let i = 0;
	while (i < raw.length) {
		const at = raw.indexOf("\\", i);
		if (at < 0) break;
		plain(i, at);
		if (at + 1 >= raw.length) return { text, starts, end: at };
		let unit = "\\";
		let size = 1;
		if (raw[at + 1] === "u") {
			const hex = raw.slice(at + 2, at + 6);
			if (HEX4.test(hex)) {
				unit = String.fromCharCode(Number.parseInt(hex, 16));
				size = 6;
			} else if (at + 6 > raw.length && HEX_PREFIX.test(hex)) return { text, starts, end: at };
		} else {
			const simple = SIMPLE_ESCAPES[raw[at + 1] as string];
			if (simple !== undefined) {
				unit = simple;
				size = 2;
			}
		}
		if (at >= from) {
			text += unit;
			starts.push(at);
		}
		i = at + size;
	}
	plain(i, raw.length);
	return { text, starts, end: raw.length };
}

/** Per forms list: which UTF-16 units occur in some form (in either case, for the any-case scrub). */
const formUnits = new WeakMap<readonly string[], Uint8Array>();

function unitsOf(forms: readonly string[]): Uint8Array {
	let units = formUnits.get(forms);
	if (!units) {
		units = new Uint8Array(65536);
		for (const form of forms) {
			for (const text of [form, form.toLowerCase(), form.toUpperCase()]) {
				for (let i = 0; i < text.length; i++) units[text.charCodeAt(i)] = 1;
			}
		}
		formUnits.set(forms, units);
	}
	return units;
}

/**
 * Whether the decoded text can differ from the written one where a form is concerned: an escape
 * decodes to a unit some form has, or the text ends inside an escape. Escapes that decode to
 * nothing a form holds (`\n`, `\"` in a file's text) cannot complete a form, so the usual tool
 * call's arguments skip decoding. One `indexOf` hop per backslash.
 */
export function escapesMatter(text: string, forms: readonly string[]): boolean {
	const units = unitsOf(forms);
	for (let at = text.indexOf("\\"); at >= 0; ) {
		if (at + 1 >= text.length) return true;
		const next = text[at + 1] as string;
		let unit = -1;
		let size = 1;
		if (next === "u") {
			const hex = text.slice(at + 2, at + 6);
			if (HEX4.test(hex)) {
				unit = Number.parseInt(hex, 16);
				size = 6;
			} else if (at + 6 > text.length && HEX_PREFIX.test(hex)) return true;
		} else if (SIMPLE_ESCAPES[next] !== undefined) {
			unit = (SIMPLE_ESCAPES[next] as string).charCodeAt(0);
			size = 2;
		}
		if (unit >= 0 && units[unit] === 1) return true;
		at = text.indexOf("\\", at + size);
	}
	return false;
}

/** One alternation of the forms per forms list (a stream's filter keeps its list), longest first. */
const matchers = new WeakMap<readonly string[], { exact: RegExp; anyCase: RegExp }>();

function matcherOf(forms: readonly string[], ignoreCase: boolean): RegExp {
	let m = matchers.get(forms);
	if (!m) {
		const source = forms.map(escapeRegExp).join("|");
		m = { exact: new RegExp(source, "g"), anyCase: new RegExp(source, "gi") };
		matchers.set(forms, m);
	}
	const re = ignoreCase ? m.anyCase : m.exact;
	re.lastIndex = 0;
	return re;
}

/** Escapes decoded with no positions kept: whether a form hides in `raw` at all, without a position per character. */
const ESCAPE = /\\(?:u([0-9a-fA-F]{4})|(["\\/bfnrt]))/g;
const decodedQuickly = (raw: string) =>
	raw.replace(ESCAPE, (_, hex: string | undefined, simple: string | undefined) =>
		hex ? String.fromCharCode(Number.parseInt(hex, 16)) : (SIMPLE_ESCAPES[simple as string] as string),
	);

/** `raw` with each stretch whose decoded text is a form replaced whole (the escapes that spell it included). */
function redactEscaped(raw: string, forms: readonly string[], ignoreCase: boolean): string {
	if (forms.length === 0 || !matcherOf(forms, ignoreCase).test(decodedQuickly(raw))) return raw;
	const d = decodeEscapes(raw);
	const re = matcherOf(forms, ignoreCase);
	let out = "";
	let done = 0;
	for (let m = re.exec(d.text); m !== null; m = re.exec(d.text)) {
		const from = d.starts[m.index] as number;
		const after = m.index + m[0].length;
		out += raw.slice(done, from) + REDACTED;
		done = after < d.starts.length ? (d.starts[after] as number) : d.end;
	}
	return out + raw.slice(done);
}

/**
 * `value` (a JSON value) with every form replaced in its serialised text, as written or \u-escaped,
 * wherever it sits (a field no filter reads: an engine's id, fingerprint, an extension field);
 * `value` itself when nothing was. A node key is a token (no `"` nor `\`), so a replacement keeps
 * the JSON whole; one that did not would make the parse throw: the answer fails rather than carry it.
 */
export function redactJson<T>(value: T, forms: readonly string[]): T {
	if (forms.length === 0) return value;
	const text = JSON.stringify(value);
	if (text === undefined) return value;
	const out = redactForms(text, forms);
	return out === text ? value : (JSON.parse(out) as T);
}

const BEARER = /\b(Bearer\s+)[^\s"',;]+/gi;

/**
 * Engine text for an error or a log line: every form of every secret replaced in any case, and a
 * `Bearer …` token of any value too (an error message has no business carrying one; completion
 * text may, so it gets `redactForms` only).
 */
export function scrubEngineText(text: string, secrets: readonly string[]): string {
	let out = text;
	const forms = secretForms(secrets);
	for (const form of forms) out = out.replace(new RegExp(escapeRegExp(form), "gi"), REDACTED);
	if (out.includes("\\") && escapesMatter(out, forms)) out = redactEscaped(out, forms, true);
	return out.replace(BEARER, `$1${REDACTED}`);
}

/** The node secrets this isolate has sent (bounded: a config has a handful), for its log lines. */
const sent = new Set<string>();
const MAX_REMEMBERED = 64;

/** Remembers secrets the gateway sends to nodes, so every log line of the isolate is scrubbed of them. */
export function rememberSentSecrets(secrets: readonly string[]): void {
	for (const secret of secrets) {
		if (sent.has(secret)) continue;
		if (sent.size >= MAX_REMEMBERED) sent.clear();
		sent.add(secret);
	}
}

/** Text for a log line: `scrubEngineText` with every node secret this isolate has sent. */
export function scrubForLog(text: string): string {
	return scrubEngineText(text, [...sent]);
}
