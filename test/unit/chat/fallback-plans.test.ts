/** src/chat/fallback-plans.ts: which model a client that left is priced at. */
import { describe, expect, it } from "vitest";
import { pricedByLeftTarget } from "../../../src/chat/fallback-plans";
import type { ModelConfig } from "../../../src/config";
import { GatewayError } from "../../../src/errors";
import type { RequestContext } from "../../../src/ledger/ledger-client";
import type { UsageBounds } from "../../../src/stream/usage-bounds";

const model = (id: string, input: number) =>
	({ id, pricing: { input_usd_per_mtok: input, output_usd_per_mtok: input } }) as unknown as ModelConfig;
const bounds = { maxPromptTokens: 100 } as unknown as UsageBounds;

function authorized() {
	const req = { model: model("cheap", 1), requestedModel: "cheap" } as unknown as RequestContext;
	return {
		req,
		prepared: { engineBody: {} },
		bounds,
		fallbacks: [{ model: model("dear", 10), requestedId: "dear", bounds, engineBody: {} }] as never,
	};
}

const left = (options: ConstructorParameters<typeof GatewayError>[2]) => new GatewayError("client_closed", "gone", options);

describe("pricedByLeftTarget", () => {
	it("prices a client that left while the fallback's engine had the request at the fallback's rate", () => {
		const a = authorized();
		pricedByLeftTarget(a, left({ target: 1 }));
		expect(a.req.model.id).toBe("dear");
		expect(a.req.requestedModel).toBe("dear");
		expect(a.req.fallbackFrom).toBe("cheap");
	});

	it("keeps the requested model when its own engine had it, no engine did, or the error is another", () => {
		for (const err of [
			left({ target: 0 }),
			left({ beforeEngine: true }),
			new GatewayError("upstream_unavailable", "x", { target: 1 }),
			new Error("x"),
		]) {
			const a = authorized();
			pricedByLeftTarget(a, err);
			expect(a.req.model.id).toBe("cheap");
		}
	});
});
