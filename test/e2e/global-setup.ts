// End-to-end setup: the development engine plus the real gateway (dev/gateway-process.mjs: workerd
// through Miniflare, as `npm start` runs it; local D1 and Durable Objects in a fresh folder), shared
// by every e2e test file.
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestProject } from "vitest/node";
import { startEngine } from "../../dev/engine.mjs";
import { startGateway } from "../../dev/gateway-process.mjs";
import { TEST_ADMIN_TOKEN, TEST_ALERT_SECRET, TEST_NODE_KEY, TEST_SEAL_SECRET, testGatewayConfig } from "../support/test-config";

declare module "vitest" {
	export interface ProvidedContext {
		engineUrl: string;
		gatewayUrl: string;
		/** The process group of the gateway host and its workerd (test/e2e/client-wave.test.ts measures them). */
		gatewayPgid: number;
		adminToken: string;
	}
}

/** A port nothing listens on right now (the gateway needs a fixed one). */
function freePort(): Promise<number> {
	return new Promise((resolve, reject) => {
		const server = createServer();
		server.unref();
		server.once("error", reject);
		server.listen(0, "127.0.0.1", () => {
			const address = server.address();
			const port = typeof address === "object" && address ? address.port : 0;
			server.close(() => (port ? resolve(port) : reject(new Error("no free port"))));
		});
	});
}

/**
 * The development engine and a gateway in front of it, with the e2e config: a short
 * stalled-client cut, so the client wave test sees every request settle within seconds; a patient
 * first byte, so 60 concurrent streams on a busy machine are answered, not failed over.
 */
export async function startE2eStack() {
	const engine = await startEngine({ port: 0 });
	const persistTo = await mkdtemp(join(tmpdir(), "venym-e2e-"));
	let gateway: Awaited<ReturnType<typeof startGateway>>;
	try {
		gateway = await startGateway({
			port: await freePort(),
			persistTo,
			quiet: true,
			timeoutMs: 90_000,
			vars: {
				GATEWAY_CONFIG: JSON.stringify({
					...testGatewayConfig(engine.url),
					client_idle_timeout_ms: 3000,
					first_byte_timeout_ms: 15_000,
				}),
				ADMIN_TOKEN: TEST_ADMIN_TOKEN,
				NODE_KEY: TEST_NODE_KEY,
				REASONING_SEAL_SECRET: TEST_SEAL_SECRET,
				// Keys may set spend alerts (each rule names its webhook: no operator-wide target here).
				ALERT_WEBHOOK_SECRET: TEST_ALERT_SECRET,
			},
		});
	} catch (err) {
		await engine.close();
		await rm(persistTo, { recursive: true, force: true });
		throw err;
	}
	const close = async () => {
		await gateway.close();
		await engine.close();
		await rm(persistTo, { recursive: true, force: true });
	};
	return { engine, gateway, close };
}

export default async function setup(project: TestProject) {
	const { engine, gateway, close } = await startE2eStack();
	project.provide("gatewayUrl", gateway.url);
	project.provide("gatewayPgid", gateway.pgid ?? 0);
	project.provide("engineUrl", engine.url);
	project.provide("adminToken", TEST_ADMIN_TOKEN);
	return async () => {
		if (process.env.VENYM_E2E_LOG) console.log(gateway.log());
		await close();
	};
}
