import { describe, expect, it } from "vitest";
import { parseConfig } from "../../src/config";
import { displayUrl } from "../../src/routes/admin-nodes";
import { probeTargets, viewTtlMs } from "../../src/routing/shared-view";

describe("displayUrl", () => {
	it("masks credentials in a node URL and leaves others alone", () => {
		expect(displayUrl("https://user:pa55@gpu1.example/v1")).toBe("https://***@gpu1.example/v1");
		expect(displayUrl("http://10.0.0.5:8000/v1")).toBe("http://10.0.0.5:8000/v1");
		expect(displayUrl("http://n.example/a@b/v1")).toBe("http://n.example/a@b/v1");
	});
});

describe("the shared view's inputs", () => {
	it("reads the view at most every half interval, between 100 ms and 30 s", () => {
		expect(viewTtlMs(10_000)).toBe(5000);
		expect(viewTtlMs(100)).toBe(100);
		expect(viewTtlMs(600_000)).toBe(30_000);
	});

	it("names every node once, with the secret's name only", () => {
		const model = (id: string, nodes: unknown[]) => ({
			id,
			engine_model: id,
			nodes,
			max_output_tokens: 10,
			pricing: { input_usd_per_mtok: 1, output_usd_per_mtok: 1 },
		});
		const config = parseConfig({
			models: [
				model("a", [{ url: "http://n1/v1/", api_key_env: "K1", health_url: "http://n1/ready" }, "http://n2/v1"]),
				model("b", ["http://n1/v1", { url: "http://n3/v1", metrics_url: "http://n3:9000/metrics" }]),
			],
		});
		expect(probeTargets(config)).toEqual([
			{ url: "http://n1/v1", api_key_env: "K1", health_url: "http://n1/ready" },
			{ url: "http://n2/v1" },
			{ url: "http://n3/v1", metrics_url: "http://n3:9000/metrics" },
		]);
	});
});
