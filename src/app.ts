import { Hono } from "hono";
import type { AppEnv } from "./app-env";
import { requireKey } from "./auth/authenticate";
import { applyCors, cors } from "./auth/cors";
import { GatewayError, toAnthropicErrorResponse, toErrorResponse, toGoogleErrorResponse } from "./errors";
import { fromHonoException } from "./http/hono-errors";
import { randomId } from "./ids";
import { errorText, logEvent } from "./observability/log-event";
import { requestLog } from "./observability/middleware";
import { GatewayClock, OVERHEAD_HEADER } from "./observability/overhead";
import { adminRoutes } from "./routes/admin";
import { batchesRoutes } from "./routes/batches";
import { chatCompletions, completions, embeddings } from "./routes/chat";
import { consoleRoutes } from "./routes/console";
import { filesRoutes } from "./routes/files";
import { geminiRoutes, isGeminiPath } from "./routes/gemini";
import { ownKey } from "./routes/key";
import { messageBatchesRoutes } from "./routes/message-batches";
import { isMessagesPath, messagesRoutes } from "./routes/messages";
import { modelsRoutes } from "./routes/models";
import { openApiDocument } from "./routes/openapi";
import { responsesRoutes } from "./routes/responses";
import { tokensRoutes } from "./routes/tokens";

export const app = new Hono<AppEnv>();

app.use("*", async (c, next) => {
	const id = randomId("req_");
	const clock = new GatewayClock();
	c.set("requestId", id);
	c.set("clock", clock);
	await next();
	if (!c.res.headers.has("x-request-id")) c.res.headers.set("x-request-id", id);
	// The response's head goes out now (a stream's at its first token): the gateway's own time so far.
	const overhead = String(clock.overheadMs());
	try {
		c.res.headers.set(OVERHEAD_HEADER, overhead);
	} catch {
		// A Response with immutable headers (one passed through from a fetch): copied, then set.
		c.res = new Response(c.res.body, c.res);
		c.res.headers.set(OVERHEAD_HEADER, overhead);
	}
});

// One JSON line per inference request (src/observability), around CORS and authentication so their refusals count.
app.use("/v1/*", requestLog);
app.use("/v1beta/*", requestLog);

// Preflights carry no Authorization, so CORS is answered before authentication. /admin gets none.
app.use("/v1/*", cors);
app.use("/v1beta/*", cors);

app.get("/", (c) => c.json({ name: "venym-gateway", docs: "https://platform.openai.com/docs/api-reference" }));
app.get("/healthz", (c) => c.json({ ok: true }));
app.get("/openapi.json", openApiDocument);

// The console page is public (its data calls carry the admin token): served before the admin guard.
app.route("/", consoleRoutes);
app.route("/admin", adminRoutes);

app.use("/v1/*", requireKey);
app.use("/v1beta/*", requireKey);
app.route("/v1/models", modelsRoutes);
app.route("/v1/tokens", tokensRoutes);
app.get("/v1/key", ownKey);
app.post("/v1/chat/completions", chatCompletions);
app.post("/v1/completions", completions);
app.post("/v1/embeddings", embeddings);
app.route("/v1/responses", responsesRoutes);
app.route("/v1/messages/batches", messageBatchesRoutes);
app.route("/v1/messages", messagesRoutes);
// The Gemini API: Gemini CLI and Google's SDKs (model ids keep their `/`: routes/gemini.ts).
app.route("/v1beta/models", geminiRoutes);
app.route("/v1/files", filesRoutes);
app.route("/v1/batches", batchesRoutes);

app.notFound(() => {
	throw new GatewayError("not_found", "Unknown route.");
});

// The one place a thrown error becomes an HTTP response.
app.onError((thrown, c) => {
	const err = fromHonoException(thrown);
	// The Anthropic Messages lane answers in Anthropic's shape, the Gemini lane in Google's, from the same kinds.
	const { status, body, headers, code } = isMessagesPath(c.req.path)
		? anthropicError(err, c.get("requestId"))
		: isGeminiPath(c.req.path)
			? toGoogleErrorResponse(err)
			: openAiError(err);
	if (status >= 500 && !(err instanceof GatewayError && err.kind === "config_invalid")) {
		logEvent("error", "request failed", { request_id: c.get("requestId"), status, error: errorText(err) });
	}
	c.get("log")?.failed(code, status, body.error.message);
	const res = c.json(body, status as 500, headers);
	// Browsers hide an error body without CORS headers: the cors middleware put them on this
	// response already, unless it let the request pass (an OPTIONS that is no preflight).
	if (c.req.path.startsWith("/v1/") || isGeminiPath(c.req.path)) applyCors(c.req.header("origin"), res.headers);
	return res;
});

function openAiError(err: unknown) {
	const answer = toErrorResponse(err);
	return { ...answer, code: answer.body.error.code };
}

/** Anthropic's SDKs read the request id from `request-id`. */
function anthropicError(err: unknown, requestId: string) {
	const answer = toAnthropicErrorResponse(err, requestId);
	return { ...answer, headers: { ...answer.headers, "request-id": requestId } };
}
