import { type Context, Hono } from "hono";
import type { AppEnv } from "../app-env";
import { callerKeyId } from "../auth/scopes";
import { GatewayError } from "../errors";
import { readJsonBody } from "../http/read-json";
import { countResponseInputTokens } from "../responses/input-tokens";
import { openInputReasoning, sealResponse, sealStream, wantsSeal } from "../responses/reasoning-round-trip";
import { validateResponsesRequest } from "../responses/request-schema";
import { createResponse } from "../responses/run-response";
import { responseStore } from "../responses/store-api";
import { ignoredTools } from "../responses/tools";
import { runOf } from "./chat";

function notFound(id: string): GatewayError {
	return new GatewayError("not_found", `Response with id '${id}' not found.`, { param: "response_id" });
}

type Stored = Record<string, unknown>;

function store(c: Context<AppEnv>) {
	return responseStore(c.env, callerKeyId(c.get("principal")));
}

async function stored(c: Context<AppEnv>, id: string): Promise<Stored> {
	const response = (await store(c).get(id)) as Stored | null;
	if (!response) throw notFound(id);
	return response;
}

export const responsesRoutes = new Hono<AppEnv>()
	.post("/", async (c) => {
		const run = runOf(c);
		const body = await readJsonBody(c.req.raw, run.config.max_body_bytes);
		run.log?.asked(body);
		const req = validateResponsesRequest(body);
		await openInputReasoning(req, c.env, run.callerKeyId, run.config);
		const result = await createResponse(run, req);
		if (req.background) run.log?.queued();
		const ignored = ignoredTools(req.tools, run.config.web_search !== undefined);
		const headers = ignored.length ? { ...result.headers, "x-venym-ignored-tools": ignored.join(",") } : result.headers;
		const seal = wantsSeal(req, c.env);
		if (result.kind === "stream") {
			run.log?.streaming();
			const stream = seal ? sealStream(result.stream, c.env, run.callerKeyId) : result.stream;
			return new Response(stream, {
				headers: { ...headers, "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" },
			});
		}
		if (seal) await sealResponse(result.body, c.env, run.callerKeyId);
		return c.json(result.body, 200, headers);
	})
	.post("/input_tokens", async (c) => {
		const run = runOf(c);
		const body = await readJsonBody(c.req.raw, run.config.max_body_bytes);
		const result = await countResponseInputTokens(run, validateResponsesRequest(body));
		return c.json(result.body, 200, result.headers);
	})
	.get("/:id", async (c) => {
		return c.json(await stored(c, c.req.param("id")));
	})
	.delete("/:id", async (c) => {
		const id = c.req.param("id");
		const deleted = await store(c).delete(id);
		if (!deleted) throw notFound(id);
		return c.json({ id, object: "response", deleted: true });
	})
	.get("/:id/input_items", async (c) => {
		const id = c.req.param("id");
		const order = c.req.query("order") ?? "desc";
		if (order !== "asc" && order !== "desc")
			throw new GatewayError("invalid_request", "'order' must be 'asc' or 'desc'.", { param: "order" });
		const limitRaw = c.req.query("limit");
		const limit = limitRaw === undefined ? 20 : /^\d{1,3}$/.test(limitRaw) ? Number(limitRaw) : Number.NaN;
		if (!Number.isInteger(limit) || limit < 1 || limit > 100) {
			throw new GatewayError("invalid_request", "'limit' must be an integer between 1 and 100.", { param: "limit" });
		}
		const all = (await store(c).inputItems(id)) as Stored[] | null;
		if (!all) throw notFound(id);
		let items = order === "desc" ? all.reverse() : all;
		const after = c.req.query("after");
		if (after) {
			const i = items.findIndex((it) => it.id === after);
			if (i < 0) throw new GatewayError("invalid_request", `No input item with id '${after}'.`, { param: "after" });
			items = items.slice(i + 1);
		}
		const page = items.slice(0, limit);
		return c.json({
			object: "list",
			data: page,
			first_id: (page[0]?.id as string | undefined) ?? null,
			last_id: (page[page.length - 1]?.id as string | undefined) ?? null,
			has_more: items.length > limit,
		});
	})
	.post("/:id/cancel", async (c) => {
		const id = c.req.param("id");
		const current = await stored(c, id);
		if (current.background !== true) {
			throw new GatewayError("invalid_request", "Only responses created with background: true can be cancelled.", {
				param: "response_id",
			});
		}
		const cancelled = (await store(c).cancel(id)) as Stored | null;
		if (!cancelled) throw notFound(id);
		return c.json(cancelled);
	});
