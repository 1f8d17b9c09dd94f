import { describe, expect, it } from "vitest";
import { decodeEscapes, escapesMatter, REDACTED, redactForms, scrubEngineText, secretForms } from "../../src/redact";

const SECRET = "sk-node/Key_0123456789";
const forms = secretForms([SECRET]);

/** `text` with each character at the positions `pick` chooses written as a `\uXXXX` escape (hex in `hexCase`). */
function escaped(text: string, pick: (i: number) => boolean, hexCase: "lower" | "upper" = "lower"): string {
	let out = "";
	for (let i = 0; i < text.length; i++) {
		const hex = text.charCodeAt(i).toString(16).padStart(4, "0");
		out += pick(i) ? `\\u${hexCase === "upper" ? hex.toUpperCase() : hex}` : text[i];
	}
	return out;
}

/** What a client reads: the tool call's arguments JSON-parsed, then stringified back to look through. */
const clientReads = (args: string) => JSON.stringify(JSON.parse(args));

describe("decodeEscapes", () => {
	it("decodes every JSON string escape, mixed-case hex, \\/ and surrogate pairs, and maps each unit to where it starts", () => {
		const d = decodeEscapes('a\\u0041\\u00e9\\/\\"\\\\\\n\\ud83d\\uDD11z');
		expect(d.text).toBe('aAé/"\\\n🔑z');
		expect(d.starts).toEqual([0, 1, 7, 13, 15, 17, 19, 21, 27, 33]);
		expect(d.end).toBe(34);
	});

	it("reads \\\\u0073 as a backslash and u0073, as JSON.parse does, and a backslash before no escape as itself", () => {
		expect(decodeEscapes("\\\\u0073").text).toBe(JSON.parse('"\\\\u0073"'));
		expect(decodeEscapes("a\\x\\u00g1").text).toBe("a\\x\\u00g1");
	});

	it("stops before an escape the text ends in the middle of", () => {
		for (const tail of ["\\", "\\u", "\\u0", "\\u00", "\\u007"]) {
			const d = decodeEscapes(`ab${tail}`);
			expect(d, tail).toEqual({ text: "ab", starts: [0, 1], end: 2 });
		}
	});

	it("collects only the units from `from` on, an escape that starts before it left out", () => {
		const d = decodeEscapes("\\u0041bc\\u0044", 3);
		expect(d).toEqual({ text: "bcD", starts: [6, 7, 8], end: 14 });
		expect(decodeEscapes("\\u0041bc\\u0044", 7)).toEqual({ text: "cD", starts: [7, 8], end: 14 });
	});
});

describe("escapesMatter", () => {
	it("is false when every escape decodes to a unit no form has (a file's text in arguments), so nothing is decoded", () => {
		expect(escapesMatter('{"text":"line\\none\\t\\"q\\" \\u00e9 C:\\\\x"}', forms)).toBe(false);
	});

	it("is true for an escape of a form's unit, in any case, and for text that ends inside an escape", () => {
		expect(escapesMatter("\\u006B", forms)).toBe(true);
		expect(escapesMatter("\\u004B", forms)).toBe(true);
		expect(escapesMatter("\\/", forms)).toBe(true);
		for (const tail of ["x\\", "x\\u", "x\\u00e"]) expect(escapesMatter(tail, forms), tail).toBe(true);
	});
});

describe("redactForms on what the client decodes", () => {
	it("redacts a key written with \\u escapes, fully or partly, in either hex case, and the arguments stay valid JSON", () => {
		const picks: Array<(i: number) => boolean> = [() => true, (i) => i === 0, (i) => i % 2 === 1, (i) => i === SECRET.length - 1];
		for (const pick of picks) {
			for (const hexCase of ["lower", "upper"] as const) {
				const args = `{"k":"${escaped(SECRET, pick, hexCase)}","n":1}`;
				const out = redactForms(args, forms);
				expect(clientReads(out)).not.toContain(SECRET);
				expect(JSON.parse(out)).toEqual({ k: REDACTED, n: 1 });
			}
		}
	});

	it("redacts a key whose slash is written \\/, and a key with a character outside the BMP written as a surrogate pair", () => {
		expect(redactForms(`{"k":"${SECRET.replace("/", "\\/")}"}`, forms)).toBe(`{"k":"${REDACTED}"}`);
		const astral = "key-🔑-0123456789";
		const out = redactForms(`{"k":"key-\\ud83d\\uDD11-0123456789"}`, secretForms([astral]));
		expect(JSON.parse(out)).toEqual({ k: REDACTED });
	});

	it("redacts the URL-encoded and base64 forms written with escapes", () => {
		const b64 = btoa(`Bearer ${SECRET}`);
		const args = `{"a":"${escaped(encodeURIComponent(SECRET), (i) => i < 4)}","b":"${escaped(b64, (i) => i % 3 === 0)}"}`;
		expect(JSON.parse(redactForms(args, forms))).toEqual({ a: REDACTED, b: REDACTED });
	});

	it("leaves \\\\u-escaped text alone (the client reads a backslash, not the key) and text without the key untouched", () => {
		const literal = `{"k":"\\\\${escaped(SECRET, (i) => i === 0).slice(1)}"}`;
		expect(redactForms(literal, forms)).toBe(literal);
		const plain = '{"path":"C:\\\\dir\\\\file","q":"\\u0041"}';
		expect(redactForms(plain, forms)).toBe(plain);
	});

	it("scrubs escaped keys in any case in engine error text", () => {
		const text = `denied: ${escaped(SECRET.toUpperCase(), (i) => i % 2 === 0)}`;
		expect(scrubEngineText(text, [SECRET])).toBe(`denied: ${REDACTED}`);
	});

	it("never lets the key through whichever characters are escaped (every mask of the first ten)", () => {
		for (let mask = 0; mask < 1 << 10; mask++) {
			const args = `{"k":"x${escaped(SECRET, (i) => i < 10 && ((mask >> i) & 1) === 1)}y"}`;
			expect(clientReads(redactForms(args, forms)), `mask ${mask}`).not.toContain(SECRET);
		}
	});
});
