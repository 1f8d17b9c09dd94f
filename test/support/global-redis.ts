import { spawnSync } from "node:child_process";
import type { TestProject } from "vitest/node";
import { startRedisBridge, startRedisServer } from "../../dev/redis-bridge.mjs";

declare module "vitest" {
	export interface ProvidedContext {
		redisUrl: string;
		redisToken: string;
	}
}

function haveRedisServer(): boolean {
	return spawnSync("redis-server", ["--version"], { stdio: "ignore" }).status === 0;
}

/**
 * A real redis-server behind dev/redis-bridge.mjs (Upstash's REST protocol) for the Redis
 * project. Without redis-server installed the Redis tests are skipped, except in CI where
 * that is a failure.
 */
export default async function setup(project: TestProject) {
	if (!haveRedisServer()) {
		if (process.env.CI) throw new Error("redis-server is not installed (apt-get install -y redis-server)");
		console.warn("redis-server not found: the Redis tests are skipped (apt-get install -y redis-server)");
		project.provide("redisUrl", "");
		project.provide("redisToken", "");
		return;
	}
	const server = await startRedisServer();
	const bridge = await startRedisBridge({ redis: { path: server.socket } });
	project.provide("redisUrl", bridge.url);
	project.provide("redisToken", bridge.token);
	return async () => {
		await bridge.close();
		await server.close();
	};
}
