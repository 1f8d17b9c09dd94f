import { validateResponsesRequest } from "../../src/responses/request-schema";
import type { ResponseMeta } from "../../src/responses/response-object";

/** The metadata of a stored response for model `venym/qwen-27b`, its request validated from `body`, item ids "1", "2", … */
export function responseMeta(body: Record<string, unknown> = {}): ResponseMeta {
	let n = 0;
	return {
		id: "resp_abc",
		createdAt: 1_700_000_000,
		model: "venym/qwen-27b",
		request: validateResponsesRequest({ model: "venym/qwen-27b", input: "Hi", ...body }),
		ids: () => String(++n),
	};
}
