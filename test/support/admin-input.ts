/** Admin API input checks as the route tests make them: 400s naming their field, raw JSON literals, credits, minted tokens. */
import { expect } from "vitest";
import { admin, gw } from "./gateway";

type Json = Record<string, unknown>;
type ErrorBody = { error: { message: string; type: string; param: string | null; code: string | null } };

export async function expect400(res: Response, param: string, code: string | null = null): Promise<ErrorBody> {
	const json = (await res.json()) as ErrorBody;
	expect(res.status, JSON.stringify(json)).toBe(400);
	expect(json.error.type).toBe("invalid_request_error");
	expect(json.error.param).toBe(param);
	expect(json.error.code).toBe(code);
	return json;
}

/** A JSON body with a raw numeric literal (1e999 parses to Infinity), which JSON.stringify cannot write. */
export function rawBody(fields: Json, param: string, literal: string): string {
	return JSON.stringify({ ...fields, [param]: "@@" }).replace('"@@"', literal);
}

export async function balanceOf(id: string): Promise<number> {
	return ((await (await admin(`/keys/${id}`)).json()) as { balance_usd: number }).balance_usd;
}

export function credit(id: string, body: Json | string, headers: Record<string, string> = {}): Promise<Response> {
	return admin(`/keys/${id}/credits`, {
		method: "POST",
		headers,
		body: typeof body === "string" ? body : JSON.stringify(body),
	});
}

/** The origin the tokens these tests mint are allowed from. */
export const APP = "https://app.example";

/** POST /v1/tokens as `key`: a token allowed from APP unless `fields` says otherwise. */
export function mint(key: string, fields: Json): Promise<Response> {
	return gw("/v1/tokens", {
		method: "POST",
		headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
		body: JSON.stringify({ allowed_origins: [APP], ...fields }),
	});
}
