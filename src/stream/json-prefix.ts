/**
 * A JSON object read as it streams in, one piece at a time: whether the text so far can still
 * become a valid object, the last point up to which it can be sent without ever having to be taken
 * back, and what would close it there. The Messages lane's tool input goes out as the engine writes
 * it (tool-call-live-repair.ts): a piece is sent once it is a valid prefix, and a call the engine
 * leaves broken is closed by appending, never by rewriting what the client already has.
 *
 * A safe point is after any character but whitespace and commas outside strings (a trailing
 * comma is the usual weak-model break, and whitespace is what a repair trims) and but the middle
 * of an escape. Each character is read once, so a long argument costs linear time.
 */

type Mode =
	| "start"
	/** After `{`: a key or `}`. */
	| "keyOrEnd"
	/** After `,` in an object. */
	| "key"
	/** After a key. */
	| "colon"
	/** After `[`: a value or `]`. */
	| "valueOrEnd"
	/** After `:`, or `,` in an array. */
	| "value"
	| "after"
	| "string"
	| "literal"
	| "done"
	| "invalid";

const WORDS = ["true", "false", "null"];
const NUMBER_PREFIX = /^-?(0|[1-9]\d*)?(\.\d*)?([eE][+-]?\d*)?$/;
const LITERAL_CHAR = /[0-9a-zA-Z.+-]/;
const HEX = /[0-9a-fA-F]/;

const isSpace = (c: string) => c === " " || c === "\t" || c === "\n" || c === "\r";

export class JsonObjectPrefix {
	#mode: Mode = "start";
	readonly #stack: string[] = [];
	#key = false;
	/** 0: none; 1: after a backslash; 2 to 5: that many `\u` hex digits still to come, plus one. */
	#escape = 0;
	#literal = "";
	#read = 0;
	#safe = 0;

	/** False once the text can no longer become a valid JSON object. */
	get valid(): boolean {
		return this.#mode !== "invalid";
	}

	/** True once a whole object was read (anything after it but whitespace makes the text invalid). */
	get complete(): boolean {
		return this.#mode === "done";
	}

	/** How many characters from the start can be sent as they are. */
	get safe(): number {
		return this.#safe;
	}

	/** Reads the next piece; returns `safe`. */
	feed(piece: string): number {
		for (const c of piece) {
			if (!this.valid) return this.#safe;
			this.#step(c);
			this.#read += c.length;
			if (this.valid && this.#safeAfter(c)) this.#safe = this.#read;
		}
		return this.#safe;
	}

	/** What appended to the text read makes it a valid object (from a safe point). */
	closers(): string {
		if (this.#mode === "start") return "{}";
		let out = "";
		if (this.#mode === "string") out = this.#key ? '":null' : '"';
		else if (this.#mode === "literal") out = this.#closeLiteral();
		else if (this.#mode === "colon") out = ":null";
		else if (this.#mode === "value") out = "null";
		for (let i = this.#stack.length - 1; i >= 0; i--) out += this.#stack[i] === "{" ? "}" : "]";
		return out;
	}

	#safeAfter(c: string): boolean {
		if (this.#mode === "string") return this.#escape === 0;
		return !isSpace(c) && c !== "," && this.#mode !== "start";
	}

	#closeLiteral(): string {
		const word = WORDS.find((w) => w.startsWith(this.#literal));
		if (word) return word.slice(this.#literal.length);
		return /[-+.eE]$/.test(this.#literal) ? "0" : "";
	}

	#step(c: string): undefined {
		switch (this.#mode) {
			case "string":
				return this.#inString(c);
			case "literal":
				if (LITERAL_CHAR.test(c)) {
					this.#literal += c;
					if (!WORDS.some((w) => w.startsWith(this.#literal)) && !NUMBER_PREFIX.test(this.#literal)) this.#mode = "invalid";
					return;
				}
				if (!WORDS.includes(this.#literal) && !/^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?$/.test(this.#literal)) {
					this.#mode = "invalid";
					return;
				}
				this.#mode = "after";
				return this.#step(c);
		}
		if (isSpace(c)) return;
		switch (this.#mode) {
			case "start":
				return c === "{" ? this.#open(c) : this.#fail();
			case "keyOrEnd":
				if (c === "}") return this.#closeContainer("{");
				return c === '"' ? this.#startString(true) : this.#fail();
			case "key":
				return c === '"' ? this.#startString(true) : this.#fail();
			case "colon":
				if (c !== ":") return this.#fail();
				this.#mode = "value";
				return;
			case "valueOrEnd":
				if (c === "]") return this.#closeContainer("[");
				return this.#value(c);
			case "value":
				return this.#value(c);
			case "after":
				return this.#after(c);
			default:
				// "done": nothing may follow the object.
				return this.#fail();
		}
	}

	#value(c: string): undefined {
		if (c === '"') return this.#startString(false);
		if (c === "{" || c === "[") return this.#open(c);
		if (c === "-" || (c >= "0" && c <= "9") || c === "t" || c === "f" || c === "n") {
			this.#literal = c;
			this.#mode = "literal";
			return;
		}
		this.#fail();
	}

	#after(c: string): undefined {
		const top = this.#stack.at(-1);
		if (c === ",") {
			this.#mode = top === "{" ? "key" : "value";
			return;
		}
		if ((c === "}" && top === "{") || (c === "]" && top === "[")) return this.#closeContainer(top);
		this.#fail();
	}

	#inString(c: string): undefined {
		if (this.#escape === 1) {
			if (c === "u") this.#escape = 5;
			else if ('"\\/bfnrt'.includes(c)) this.#escape = 0;
			else this.#fail();
			return;
		}
		if (this.#escape > 1) {
			if (!HEX.test(c)) return this.#fail();
			this.#escape = this.#escape === 2 ? 0 : this.#escape - 1;
			return;
		}
		if (c === "\\") this.#escape = 1;
		else if (c === '"') this.#mode = this.#key ? "colon" : "after";
		else if (c < " ") this.#fail();
	}

	#startString(key: boolean): undefined {
		this.#key = key;
		this.#mode = "string";
	}

	#open(c: string): undefined {
		this.#stack.push(c);
		this.#mode = c === "{" ? "keyOrEnd" : "valueOrEnd";
	}

	#closeContainer(kind: string | undefined): undefined {
		if (this.#stack.pop() !== kind) return this.#fail();
		this.#mode = this.#stack.length === 0 ? "done" : "after";
	}

	#fail(): undefined {
		this.#mode = "invalid";
	}
}
