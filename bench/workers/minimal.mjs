// The `minimal` target (issue 27): only what every authenticated, logging gateway must do, so
// the gateway's figures can be read as a ratio to it as well as to the bare floor.
//   - read the bearer key and look up its SHA-256 digest in an isolate map (401 otherwise);
//   - parse the JSON body and set the engine's model name (404 for a model it does not serve);
//   - forward it to the engine and answer with the engine's body as is (a native pipe);
//   - CORS and request-id headers on the answer;
//   - one JSON log line, written after the response has gone out.
// No balance, no hold, no settlement, no usage record, no stream rewriting: those are the
// gateway's own work, and what the ratio to this target measures.

/** Gateway model id → the engine's model and the path prefix of its node (the bench engine's pacing). */
function modelsFor(env) {
	return new Map([
		[env.GW_MODEL, { engineModel: env.ENGINE_MODEL, prefix: "" }],
		[env.GW_PACED_MODEL, { engineModel: env.ENGINE_MODEL, prefix: `/p/${env.PACE_MS}` }],
	]);
}

const hex = (buf) => [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, "0")).join("");
const digest = async (text) => hex(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));

/** The isolate's key map (digest → key record), filled once from the binding. */
let keys;
let models;
async function keyMap(env) {
	keys ??= new Map([[await digest(env.KEY), { id: "key_minimal", name: "bench" }]]);
	return keys;
}

const CORS = {
	"access-control-allow-origin": "*",
	"access-control-expose-headers": "x-request-id",
};

function error(status, message, requestId) {
	return Response.json(
		{ error: { message, type: "invalid_request_error" } },
		{ status, headers: { ...CORS, "x-request-id": requestId } },
	);
}

export default {
	async fetch(request, env, ctx) {
		const started = Date.now();
		const requestId = crypto.randomUUID();
		models ??= modelsFor(env);
		const url = new URL(request.url);
		const bearer = request.headers.get("authorization")?.match(/^Bearer (.+)$/)?.[1];
		const key = bearer ? (await keyMap(env)).get(await digest(bearer)) : undefined;
		if (!key) return error(401, "invalid API key", requestId);
		let body;
		try {
			body = await request.json();
		} catch {
			return error(400, "the body is not JSON", requestId);
		}
		const model = models.get(body?.model);
		if (!model) return error(404, `model ${JSON.stringify(body?.model)} not found`, requestId);
		body.model = model.engineModel;
		const upstream = await fetch(`${env.ENGINE_URL}${model.prefix}${url.pathname}`, {
			method: "POST",
			headers: { "content-type": "application/json" },
			body: JSON.stringify(body),
		});
		const headers = new Headers(upstream.headers);
		for (const [k, v] of Object.entries(CORS)) headers.set(k, v);
		headers.set("x-request-id", requestId);
		const line = {
			request_id: requestId,
			key_id: key.id,
			model: body.model,
			status: upstream.status,
			stream: body.stream === true,
		};
		ctx.waitUntil(
			new Promise((resolve) => setTimeout(resolve, 0)).then(() =>
				console.log(JSON.stringify({ ...line, duration_ms: Date.now() - started })),
			),
		);
		return new Response(upstream.body, { status: upstream.status, headers });
	},
};
