// Gated requests: a request to a `gate` scenario sends its headers and first frame, then an
// empty chunk every 200 ms (data, so the gateway's idle watch never fires) until a test
// releases it or the client leaves. A test then holds a request open for exactly as long as it
// needs, whatever the machine's load, instead of picking an engine delay and hoping.
//
//   POST /_engine/release  {"contains": "<text>"}  releases every open gated request of the
//                          tenant whose raw body contains the text; answers {"released": n}

import { sleep } from "./engine-wire.mjs";

export function createGates() {
	/** Open gated requests: their body text and the function that lets them go on. */
	const open = new Set();
	return {
		/** Resolves when the request is released or its client leaves. */
		wait(ctx, text) {
			return new Promise((resolve) => {
				const gate = { text, resolve };
				open.add(gate);
				ctx.res.on("close", () => {
					open.delete(gate);
					resolve();
				});
			});
		},
		/** Lets every open gated request whose body contains `contains` go on; how many there were. */
		release(contains) {
			let n = 0;
			for (const gate of open) {
				if (!gate.text.includes(contains)) continue;
				open.delete(gate);
				gate.resolve();
				n++;
			}
			return n;
		},
	};
}

/** Writes `frame` every 200 ms until `released` settles or the client is gone. */
export async function keepAliveUntil(ctx, released, frame) {
	let done = false;
	released.then(() => {
		done = true;
	});
	while (!done && !ctx.gone) {
		ctx.res.write(frame);
		await Promise.race([released, sleep(200)]);
	}
}
