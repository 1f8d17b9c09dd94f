import { fileURLToPath } from "node:url";
import { cloudflareTest, readD1Migrations } from "@cloudflare/vitest-pool-workers";
import { defineConfig } from "vitest/config";
import { TEST_ADMIN_TOKEN, TEST_NODE_KEY, testGatewayConfig } from "./test/support/test-config.ts";

const migrations = await readD1Migrations(fileURLToPath(new URL("./drizzle", import.meta.url)));

export default defineConfig({
	test: {
		projects: [
			{
				// Unit and integration tests run inside workerd with real D1 and Durable Objects.
				plugins: [
					cloudflareTest(({ inject }) => {
						const engineUrl = String(inject("engineUrl"));
						return {
							main: "./src/index.ts",
							wrangler: { configPath: "./wrangler.toml" },
							miniflare: {
								bindings: {
									GATEWAY_CONFIG: JSON.stringify(testGatewayConfig(engineUrl)),
									ADMIN_TOKEN: TEST_ADMIN_TOKEN,
									NODE_KEY: TEST_NODE_KEY,
									ENGINE_URL: engineUrl,
									TEST_MIGRATIONS: migrations,
								},
							},
						};
					}),
				],
				test: {
					name: "workers",
					include: ["test/unit/**/*.test.ts", "test/integration/**/*.test.ts"],
					globalSetup: ["./test/support/global-engine.ts"],
					setupFiles: ["./test/support/apply-migrations.ts"],
					testTimeout: 20_000,
				},
			},
			{
				// The development engine itself, in plain Node.
				test: { name: "node", include: ["test/node/**/*.test.ts"], environment: "node" },
			},
			{
				// The official openai SDK against the gateway running under `wrangler dev`.
				test: {
					name: "e2e",
					include: ["test/e2e/**/*.test.ts"],
					environment: "node",
					testTimeout: 60_000,
					hookTimeout: 120_000,
					globalSetup: ["./test/e2e/global-setup.ts"],
				},
			},
		],
	},
});
