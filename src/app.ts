import { Hono } from "hono";
import { cors } from "hono/cors";
import type { AppEnv } from "./app-env";
import { requireKey } from "./auth/authenticate";
import { randomId } from "./auth/key-secret";
import { GatewayError, toErrorResponse } from "./errors";
import { adminRoutes } from "./routes/admin";
import { chatCompletions } from "./routes/chat";
import { ownKey } from "./routes/key";
import { modelsRoutes } from "./routes/models";
import { responsesRoutes } from "./routes/responses";

const EXPOSED_HEADERS = [
	"x-request-id",
	"x-venym-cost-usd",
	"x-venym-balance-usd",
	"x-venym-web-search",
	"x-venym-lane",
	"retry-after",
	"x-ratelimit-limit-requests",
	"x-ratelimit-remaining-requests",
	"x-ratelimit-reset-requests",
	"x-ratelimit-limit-tokens",
	"x-ratelimit-remaining-tokens",
	"x-ratelimit-reset-tokens",
];

export const app = new Hono<AppEnv>();

app.use("*", async (c, next) => {
	const id = randomId("req_");
	c.set("requestId", id);
	await next();
	if (!c.res.headers.has("x-request-id")) c.res.headers.set("x-request-id", id);
});

// Preflights carry no Authorization, so CORS is answered before authentication.
app.use(
	"/v1/*",
	cors({
		origin: (origin) => origin || "*",
		allowHeaders: [],
		exposeHeaders: EXPOSED_HEADERS,
		maxAge: 600,
		credentials: false,
	}),
);

app.get("/", (c) => c.json({ name: "venym-gateway", docs: "https://platform.openai.com/docs/api-reference" }));
app.get("/healthz", (c) => c.json({ ok: true }));

app.route("/admin", adminRoutes);

app.use("/v1/*", requireKey);
app.route("/v1/models", modelsRoutes);
app.get("/v1/key", ownKey);
app.post("/v1/chat/completions", chatCompletions);
app.route("/v1/responses", responsesRoutes);

app.notFound(() => {
	throw new GatewayError("not_found", "Unknown route.");
});

// The one place a thrown error becomes an HTTP response.
app.onError((err, c) => {
	const { status, body, headers } = toErrorResponse(err);
	if (status >= 500 && !(err instanceof GatewayError && err.kind === "config_invalid")) console.error("request failed", err);
	const res = c.json(body, status as 500, headers);
	return res;
});
