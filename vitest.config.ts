import { fileURLToPath } from "node:url";
import { cloudflareTest, readD1Migrations } from "@cloudflare/vitest-pool-workers";
import { defineConfig } from "vitest/config";
import { TEST_ADMIN_TOKEN, TEST_NODE_KEY, testGatewayConfig } from "./test/support/test-config.ts";

const migrations = await readD1Migrations(fileURLToPath(new URL("./drizzle", import.meta.url)));

/** The worker under test in workerd, with real D1 and Durable Objects; `redis` adds the Upstash secrets. */
function workerPlugin(redis: boolean) {
	return cloudflareTest(({ inject }) => {
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
					// Explicit, so a developer's .dev.vars never turns Redis on for the plain project.
					UPSTASH_REDIS_REST_URL: redis ? String(inject("redisUrl")) : "",
					UPSTASH_REDIS_REST_TOKEN: redis ? String(inject("redisToken")) : "",
				},
			},
		};
	});
}

const REDIS_TESTS = "test/integration/redis.test.ts";

export default defineConfig({
	test: {
		projects: [
			{
				// Unit and integration tests run inside workerd with real D1 and Durable Objects.
				plugins: [workerPlugin(false)],
				test: {
					name: "workers",
					include: ["test/unit/**/*.test.ts", "test/integration/**/*.test.ts"],
					exclude: [REDIS_TESTS],
					globalSetup: ["./test/support/global-engine.ts"],
					setupFiles: ["./test/support/apply-migrations.ts"],
					testTimeout: 20_000,
				},
			},
			{
				// The Redis path (key cache, failed-auth throttle) against a real redis-server behind dev/redis-bridge.mjs.
				plugins: [workerPlugin(true)],
				test: {
					name: "redis",
					include: [REDIS_TESTS],
					globalSetup: ["./test/support/global-engine.ts", "./test/support/global-redis.ts"],
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
			{
				// Headless Chromium: a page using the official openai SDK in browser mode with a browser key.
				test: {
					name: "browser",
					include: ["test/browser/**/*.test.ts"],
					environment: "node",
					testTimeout: 60_000,
					hookTimeout: 120_000,
					globalSetup: ["./test/e2e/global-setup.ts"],
				},
			},
		],
	},
});
