/** The Responses API as the integration tests call it: create, retrieve, wait for a response to settle. */
import { gw, waitFor } from "./gateway";

export interface ResponseJson {
	id: string;
	status: string;
	error: { code: string; message: string } | null;
	output: Array<{ type: string; content?: Array<{ text: string }> }>;
	usage: { input_tokens: number } | null;
}

export interface ErrorJson {
	error: { code: string | null; message: string; type: string };
}

export function post(key: string, body: Record<string, unknown>, headers: Record<string, string> = {}): Promise<Response> {
	return gw("/v1/responses", {
		method: "POST",
		headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
		body: JSON.stringify(body),
	});
}

export async function created(
	key: string,
	body: Record<string, unknown>,
	headers: Record<string, string> = {},
): Promise<ResponseJson> {
	const res = await post(key, body, headers);
	if (res.status !== 200) throw new Error(`POST /v1/responses: ${res.status} ${await res.text()}`);
	return (await res.json()) as ResponseJson;
}

export function get(key: string, path: string, headers: Record<string, string> = {}): Promise<Response> {
	return gw(`/v1/responses/${path}`, { headers: { authorization: `Bearer ${key}`, ...headers } });
}

export async function retrieved(key: string, id: string): Promise<ResponseJson> {
	const res = await get(key, id);
	if (res.status !== 200) throw new Error(`GET ${id}: ${res.status} ${await res.text()}`);
	return (await res.json()) as ResponseJson;
}

export function settled(key: string, id: string, timeoutMs = 15_000): Promise<ResponseJson> {
	return waitFor(async () => {
		const r = await retrieved(key, id);
		return r.status === "queued" || r.status === "in_progress" ? null : r;
	}, timeoutMs);
}
