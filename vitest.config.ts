import { availableParallelism } from "node:os";
import { fileURLToPath } from "node:url";
import { cloudflareTest, readD1Migrations } from "@cloudflare/vitest-pool-workers";
import { defineConfig } from "vitest/config";
import { quietOutboundDisconnects } from "./test/support/quiet-outbound-log.ts";
import {
	TEST_ADMIN_TOKEN,
	TEST_ALERT_SECRET,
	TEST_NODE_KEY,
	TEST_SEAL_SECRET,
	testGatewayConfig,
} from "./test/support/test-config.ts";

quietOutboundDisconnects();

const migrations = await readD1Migrations(fileURLToPath(new URL("./drizzle", import.meta.url)));

/**
 * Every integration test file gets its own workerd and loads the gateway's module graph into
 * it. Pre-bundled, each of these packages is one module instead of hundreds, which takes about
 * a second off every file. A package missing here still works, just loaded file by file.
 */
const PREBUNDLED = [
	"zod",
	"hono",
	"hono/factory",
	"hono/http-exception",
	"hono/combine",
	"hono/body-limit",
	"hono/cors",
	"drizzle-orm",
	"drizzle-orm/d1",
	"drizzle-orm/sqlite-core",
	"@upstash/redis/cloudflare",
	"@hono/zod-validator",
	"openai",
];

let testFiles = 0;

/** The worker under test in workerd, with real D1 and Durable Objects; `redis` adds the Upstash secrets. */
function workerPlugin(redis: boolean) {
	// Called once per test file (each gets its own workerd). Each file also gets an engine record of
	// its own (dev/engine.mjs `/t/<tenant>`), so files run side by side and a test that lists the
	// engine's requests since some id sees only its own file's.
	return cloudflareTest(({ inject }) => {
		testFiles += 1;
		const engineUrl = `${String(inject("engineUrl"))}/t/${testFiles}`;
		return {
			main: "./src/index.ts",
			wrangler: { configPath: "./wrangler.toml" },
			miniflare: {
				r2Buckets: ["USAGE_ARCHIVE", "BATCH_FILES"],
				bindings: {
					GATEWAY_CONFIG: JSON.stringify(testGatewayConfig(engineUrl)),
					ADMIN_TOKEN: TEST_ADMIN_TOKEN,
					NODE_KEY: TEST_NODE_KEY,
					REASONING_SEAL_SECRET: TEST_SEAL_SECRET,
					ENGINE_URL: engineUrl,
					// Alerts (node down/back, rules without a webhook_url) go to the engine's webhook receiver (dev/engine-hooks.mjs).
					ALERT_WEBHOOK_URL: `${engineUrl}/hook/operator`,
					ALERT_WEBHOOK_SECRET: TEST_ALERT_SECRET,
					TEST_MIGRATIONS: migrations,
					// Explicit, so a developer's .dev.vars never turns Redis on for the plain project.
					UPSTASH_REDIS_REST_URL: redis ? String(inject("redisUrl")) : "",
					UPSTASH_REDIS_REST_TOKEN: redis ? String(inject("redisToken")) : "",
				},
			},
		};
	});
}

const REDIS_TESTS = "test/integration/redis/redis.test.ts";

/**
 * Files that need an isolate and Durable Objects of their own, even in the shared-workerd inner
 * loop: the refused requests' per-isolate, per-minute bound (observability/refusals.ts) is spent
 * by every other file's refusals there, and the console's batch list counts lines in flight on a
 * model's dispatcher that other files also use. Their project (`workers-own`) always isolates.
 */
const OWN_ISOLATE_TESTS = [
	"test/integration/routes/admin-trouble.test.ts",
	"test/integration/attack/refusal-flood.test.ts",
	"test/integration/batches/admin-batches.test.ts",
	"test/integration/batches/message-batches.test.ts",
];

/** What every workerd project shares. */
const WORKERD_PROJECT = {
	globalSetup: ["./test/support/global-engine.ts"],
	setupFiles: ["./test/support/apply-migrations.ts"],
	testTimeout: 20_000,
	deps: { optimizer: { ssr: { enabled: true, include: PREBUNDLED } } },
};

/**
 * The inner loop (`npm run test:unit` sets VENYM_SHARED_WORKERD=1) runs the integration files one
 * after another in one workerd per Vitest worker (`isolate: false`) instead of starting a workerd
 * and loading the gateway for every file: that start is most of what a file costs. The pure
 * tests then share their Node worker's module graph too. Files then share D1, the Durable Objects
 * and the isolate's memory (node health, caches, the background queue, console spies), so every
 * file keeps to what it made: its own keys, its own engine tenant for node health
 * (fleet.ts `ownEngineUrl`), its own request ids in logs, past days no other file writes. `npm test`
 * (and CI) keeps one workerd per file, so a test that leans on another file's leftovers fails there.
 */
const SHARED_WORKERD = process.env.VENYM_SHARED_WORKERD === "1";

/**
 * The engine project (`npm run test:engines` sets VENYM_ENGINES=1) runs real llama.cpp servers
 * behind the gateway: not one of `npm test`'s projects, so a machine without the binary, and the
 * default run, never start it; CI runs it on its own when the binary is there (.ci/run).
 */
const ENGINES = process.env.VENYM_ENGINES === "1";

export default defineConfig({
	// Vite's pre-bundle cache beside this checkout, not in node_modules: worktrees that share one
	// node_modules would otherwise rebuild each other's ("There is a new version of the pre-bundle").
	cacheDir: ".tmp/vite",
	test: {
		// Test files mostly wait (engine timeouts, paced streams), so Vitest's default of one file
		// per core but one is too few on a small machine: at least two at once. More starves the
		// e2e and browser projects' wrangler dev of CPU (their engine calls time out); the inner loop
		// (`npm run test:unit`, no wrangler dev) runs four.
		maxWorkers: Math.max(2, availableParallelism() - 1),
		// Every request writes its JSON log line (src/observability): shown for failed tests only.
		silent: "passed-only",
		projects: [
			...(ENGINES
				? [
						{
							// llama.cpp's own server (../shared/engines, or LLAMA_SERVER) behind the gateway under wrangler dev:
							// every lane against a real engine, one file at a time (the engines share two cores).
							test: {
								name: "engines",
								include: ["test/engines/**/*.test.ts"],
								environment: "node",
								fileParallelism: false,
								testTimeout: 60_000,
								hookTimeout: 120_000,
								globalSetup: ["./test/engines/global-setup.ts"],
							},
						},
					]
				: []),
			{
				// Pure modules with plain data, in Node: no runtime, no bindings.
				test: { name: "unit", include: ["test/unit/**/*.test.ts"], environment: "node", isolate: !SHARED_WORKERD },
			},
			{
				// The worker end to end inside workerd with real D1 and Durable Objects, against the fake engine.
				plugins: [workerPlugin(false)],
				test: {
					name: "workers",
					include: ["test/integration/**/*.test.ts"],
					exclude: [REDIS_TESTS, ...OWN_ISOLATE_TESTS],
					isolate: !SHARED_WORKERD,
					...WORKERD_PROJECT,
				},
			},
			{
				// The same, one workerd per file in every mode (see OWN_ISOLATE_TESTS).
				plugins: [workerPlugin(false)],
				test: { name: "workers-own", include: OWN_ISOLATE_TESTS, isolate: true, ...WORKERD_PROJECT },
			},
			{
				// The Redis path (key cache, failed-auth throttle) against a real redis-server behind dev/redis-bridge.mjs.
				plugins: [workerPlugin(true)],
				test: {
					name: "redis",
					include: [REDIS_TESTS],
					...WORKERD_PROJECT,
					globalSetup: ["./test/support/global-engine.ts", "./test/support/global-redis.ts"],
				},
			},
			{
				// The development engine itself, in plain Node.
				test: { name: "node", include: ["test/node/**/*.test.ts"], environment: "node", isolate: !SHARED_WORKERD },
			},
			{
				// `npm start` and dev/gateway-process.mjs under real `wrangler dev`s, started and stopped:
				// minutes of CPU, so not in the inner loop (`npm run test:unit`).
				test: { name: "tooling", include: ["test/tooling/**/*.test.ts"], environment: "node" },
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
