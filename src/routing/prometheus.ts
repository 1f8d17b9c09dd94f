/**
 * A parser for the Prometheus text exposition format (what vLLM, SGLang, llama.cpp and TGI
 * serve at `/metrics`). Pure and forgiving: a line it cannot read is skipped, never fatal,
 * because an engine upgrade that adds an odd line must not blind the router to the rest.
 */

export interface Sample {
	name: string;
	labels: Record<string, string>;
	/** May be NaN or ±Infinity, as the format allows. */
	value: number;
}

const SPACE = /[ \t]/;

function parseValue(text: string): number | null {
	switch (text) {
		case "NaN":
			return Number.NaN;
		case "+Inf":
		case "Inf":
			return Number.POSITIVE_INFINITY;
		case "-Inf":
			return Number.NEGATIVE_INFINITY;
	}
	if (text === "") return null;
	const v = Number(text);
	return Number.isNaN(v) ? null : v;
}

/** Reads `{a="x",b="y\"z"}` starting at `open` (the brace); returns the labels and the index after `}`, or null. */
function parseLabels(line: string, open: number): { labels: Record<string, string>; end: number } | null {
	const labels: Record<string, string> = {};
	let i = open + 1;
	for (;;) {
		while (i < line.length && SPACE.test(line[i] as string)) i++;
		if (line[i] === "}") return { labels, end: i + 1 };
		const eq = line.indexOf("=", i);
		if (eq < 0) return null;
		const name = line.slice(i, eq).trim();
		i = eq + 1;
		while (i < line.length && SPACE.test(line[i] as string)) i++;
		if (line[i] !== '"' || !name) return null;
		i++;
		// Escapes are \\, \" and \n; the value is built only when one appears (most have none).
		let value = "";
		let from = i;
		for (;;) {
			if (i >= line.length) return null;
			const ch = line[i];
			if (ch === '"') break;
			if (ch === "\\") {
				value += line.slice(from, i);
				const next = line[i + 1];
				value += next === "n" ? "\n" : (next ?? "");
				i += 2;
				from = i;
				continue;
			}
			i++;
		}
		value += line.slice(from, i);
		labels[name] = value;
		i++;
		while (i < line.length && SPACE.test(line[i] as string)) i++;
		if (line[i] === ",") i++;
		else if (line[i] !== "}") return null;
	}
}

/** One sample line, or null when it is not one (a comment, blank, or malformed). */
export function parseSampleLine(raw: string): Sample | null {
	const line = raw.trim();
	if (!line || line.startsWith("#")) return null;
	let i = 0;
	while (i < line.length && line[i] !== "{" && !SPACE.test(line[i] as string)) i++;
	const name = line.slice(0, i);
	if (!/^[a-zA-Z_:][a-zA-Z0-9_:]*$/.test(name)) return null;
	let labels: Record<string, string> = {};
	while (i < line.length && SPACE.test(line[i] as string)) i++;
	if (line[i] === "{") {
		const parsed = parseLabels(line, i);
		if (!parsed) return null;
		labels = parsed.labels;
		i = parsed.end;
	}
	// The value, then an optional timestamp, which the router has no use for.
	const rest = line
		.slice(i)
		.trim()
		.split(/[ \t]+/);
	const value = parseValue(rest[0] ?? "");
	if (value === null) return null;
	return { name, labels, value };
}

/**
 * Every sample in `text` whose metric name passes `wanted` (all when omitted). The name is
 * checked before its labels are read, so the histograms that make up most of a vLLM page
 * cost one prefix test a line.
 */
export function parsePrometheus(text: string, wanted?: (name: string) => boolean): Sample[] {
	const out: Sample[] = [];
	let start = 0;
	while (start <= text.length) {
		let end = text.indexOf("\n", start);
		if (end < 0) end = text.length;
		const line = text.slice(start, end);
		start = end + 1;
		if (wanted) {
			const t = line.trimStart();
			const stop = t.search(/[{ \t]/);
			if (!wanted(stop < 0 ? t : t.slice(0, stop))) continue;
		}
		const sample = parseSampleLine(line);
		if (sample) out.push(sample);
	}
	return out;
}
