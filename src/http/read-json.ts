import { GatewayError } from "../errors";
import { depthParam, MAX_JSON_DEPTH, tooDeep } from "./json-depth";
import { loneSurrogatePath } from "./lone-surrogate";
import { discardRest, readCappedText } from "./read-capped";
import { formatParam } from "./zod-error";

/**
 * Reads a JSON request body, refusing anything over `maxBytes` without buffering it whole.
 * The body is JSON whatever its Content-Type (see parseJsonText).
 */
export async function readJsonBody(req: Request, maxBytes: number): Promise<unknown> {
	const declared = Number(req.headers.get("content-length") ?? "NaN");
	if (declared > maxBytes) {
		if (req.body) await discardRest(req.body.getReader());
		throw tooLarge(maxBytes);
	}
	// With a declared length the body cannot run past it: one native read. A chunked body is
	// counted as it arrives.
	const text = declared >= 0 ? await req.text() : await readText(req, maxBytes);
	return parseJsonText(text);
}

/**
 * A request body's text as JSON: empty or malformed is a 400, as OpenAI answers it, and so is a
 * field nested deeper than MAX_JSON_DEPTH (`code: "json_too_deep"`, naming the path), and a
 * string holding a lone UTF-16 surrogate (`code: "invalid_value"`, naming the path).
 */
export function parseJsonText(text: string): unknown {
	if (text.length === 0) throw new GatewayError("invalid_request", "The request body is empty; expected a JSON object.");
	let value: unknown;
	try {
		value = JSON.parse(text);
	} catch {
		throw malformedJson();
	}
	const deep = tooDeep(value);
	if (deep) {
		const param = depthParam(deep);
		throw new GatewayError(
			"invalid_request",
			`Invalid '${param}': the '${deep[0]}' field nests JSON more than ${MAX_JSON_DEPTH} levels deep (counted from the field's own value).`,
			{ param, code: "json_too_deep" },
		);
	}
	const lone = loneSurrogatePath(text, value);
	if (lone) {
		const param = formatParam(lone) || null;
		throw new GatewayError(
			"invalid_request",
			`Invalid ${param ? `'${param}'` : "body"}: the string holds a lone UTF-16 surrogate (such as '\\ud800'), which is not valid Unicode.`,
			{ param, code: "invalid_value" },
		);
	}
	return value;
}

export function malformedJson(): GatewayError {
	return new GatewayError(
		"invalid_request",
		"We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload.)",
	);
}

export function tooLarge(maxBytes: number): GatewayError {
	return new GatewayError("request_too_large", `The request body is larger than the ${maxBytes} byte limit.`);
}

async function readText(req: Request, maxBytes: number): Promise<string> {
	const text = await readCappedText(req.body, maxBytes, true);
	if (text === null) throw tooLarge(maxBytes);
	return text;
}
