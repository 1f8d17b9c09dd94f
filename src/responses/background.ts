import { loadConfig } from "../config";
import { registerBackgroundRunner } from "./response-store";
import { runBackground } from "./run-response";

// Background responses run inside the ResponseStore Durable Object with the same chat pipeline.
registerBackgroundRunner((env, job, signal, store) =>
	runBackground(env, job, signal, store, { config: loadConfig(env.GATEWAY_CONFIG) }),
);
