import { loadConfig } from "../config";
import { registerBackgroundHooks } from "./response-store";
import { runBackground } from "./run-background";
import { releaseHold } from "./run-response";

// Background responses run inside the ResponseStore Durable Object with the same chat pipeline.
registerBackgroundHooks({
	run: (env, job, signal, store) => runBackground(env, job, signal, store, { config: loadConfig(env.GATEWAY_CONFIG) }),
	release: releaseHold,
});
