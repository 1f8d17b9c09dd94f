import { describe, expect, it } from "vitest";
import { parseConfig } from "../../../src/config";
import { maskNodeUrl } from "../../../src/routing/node-label";
import { probeTargets, viewTtlMs } from "../../../src/routing/shared-view";

describe("maskNodeUrl (how /admin/nodes, the console and logs show a node)", () => {
	it("masks credentials in a node URL and leaves others alone", () => {
		expect(maskNodeUrl("https://user:pa55@gpu1.example/v1")).toBe("https://***@gpu1.example/v1");
		expect(maskNodeUrl("http://10.0.0.5:8000/v1")).toBe("http://10.0.0.5:8000/v1");
		expect(maskNodeUrl("http://n.example/a@b/v1")).toBe("http://n.example/a@b/v1");
	});

	it("masks a query string and a fragment whatever they hold", () => {
		expect(maskNodeUrl("https://gpu1.example/v1?token=nodesecret-abc123")).toBe("https://gpu1.example/v1?***");
		expect(maskNodeUrl("https://gpu1.example/v1?a=1&key=k#frag-secret")).toBe("https://gpu1.example/v1?***#***");
	});

	it("masks credential-shaped path segments and keeps ordinary ones", () => {
		expect(maskNodeUrl("https://proxy.example/sk-live-abcdef/v1")).toBe("https://proxy.example/***/v1");
		expect(maskNodeUrl("https://proxy.example/token/anything-at-all/v1")).toBe("https://proxy.example/token/***/v1");
		expect(maskNodeUrl("https://proxy.example/api_key=abc/v1")).toBe("https://proxy.example/***/v1");
		expect(maskNodeUrl("https://proxy.example/9f86d081884c7d659a2feaa0c55ad015a3bf4f1b/v1")).toBe("https://proxy.example/***/v1");
		const ordinary = "http://127.0.0.1:8788/t/fleet-2f1c9a7e-0b6d-4c1e-9f1a-3d2b7c6e5a4f/n/m1a2b3c4d5e6f/v1";
		expect(maskNodeUrl(ordinary)).toBe(ordinary);
		expect(maskNodeUrl("https://gpu.example/models/qwen2.5-72b-instruct/v1")).toBe(
			"https://gpu.example/models/qwen2.5-72b-instruct/v1",
		);
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
