/** A failed Responses request carries the HTTP path's error code, streamed or in the background (src/responses/failure.ts). */
import { describe, expect, it } from "vitest";
import { createKey, readSse } from "../../support/gateway";
import { created, type ErrorJson, post, type ResponseJson, settled } from "../../support/responses";

describe("error codes match the HTTP path", () => {
	it("streams the chat error frame's own code in the error event and response.failed", async () => {
		const { key } = await createKey();
		const res = await post(key, { model: "test/midstream", input: "x y z", stream: true });
		const events = (await readSse(res)).map((f) => JSON.parse(f) as { type: string; code?: string; response?: ResponseJson });
		const error = events.find((e) => e.type === "error");
		expect(error?.code).toBe("upstream_unavailable");
		expect(events.at(-1)?.response?.error?.code).toBe("upstream_unavailable");
		const stored = await settled(key, events.at(-1)?.response?.id ?? "");
		expect(stored.error?.code).toBe("upstream_unavailable");
	});

	it("gives a failed background response the code the HTTP path gives the same cause", async () => {
		const { key } = await createKey();
		const sync = await post(key, { model: "test/flat400", input: "refused by the engine" });
		expect(sync.status).toBe(400);
		const httpError = ((await sync.json()) as ErrorJson).error;
		const bg = await created(key, { model: "test/flat400", input: "refused by the engine", background: true });
		const done = await settled(key, bg.id);
		expect(done.status).toBe("failed");
		expect(done.error?.code).toBe(httpError.code ?? httpError.type);
		expect(done.error?.message).toBe(httpError.message);
	});
});
