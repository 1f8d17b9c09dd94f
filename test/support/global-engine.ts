import { spawn } from "node:child_process";
import { once } from "node:events";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import type { TestProject } from "vitest/node";

declare module "vitest" {
	export interface ProvidedContext {
		engineUrl: string;
	}
}

const ENGINE = fileURLToPath(new URL("../../dev/engine.mjs", import.meta.url));

/**
 * One fake engine (a real HTTP server) for the whole run; workerd reaches it over the network.
 * It runs in its own process: Vitest's main process also serves every workerd's modules, and
 * an engine sharing that event loop would pace its streams and timeouts by Vitest's load.
 */
export default async function setup(project: TestProject) {
	const child = spawn(process.execPath, [ENGINE, "--port", "0", "--quiet"], { stdio: ["ignore", "pipe", "inherit"] });
	const url = await new Promise<string>((resolve, reject) => {
		createInterface({ input: child.stdout }).on("line", (line) => {
			const m = /^engine listening on (\S+)$/.exec(line);
			if (m) resolve(m[1] as string);
		});
		child.once("exit", (code) => reject(new Error(`dev/engine.mjs exited with ${code} before it listened`)));
	});
	// Vitest stopped another way (Ctrl-C, a crash): take the engine down with it.
	const stop = () => child.kill();
	process.once("exit", stop);
	project.provide("engineUrl", url);
	return async () => {
		process.off("exit", stop);
		if (child.exitCode !== null || child.signalCode !== null) return;
		const exit = once(child, "exit");
		child.kill();
		await exit;
	};
}
