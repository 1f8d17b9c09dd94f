import type { TestProject } from "vitest/node";
import { startEngine } from "../../dev/engine.mjs";

declare module "vitest" {
	export interface ProvidedContext {
		engineUrl: string;
	}
}

/** One fake engine (a real HTTP server) for the whole run; workerd reaches it over the network. */
export default async function setup(project: TestProject) {
	const engine = await startEngine({ port: 0 });
	project.provide("engineUrl", engine.url);
	return async () => {
		await engine.close();
	};
}
