// The platform floor: the least a Worker can do to serve the same request. It forwards the
// request to the engine unchanged and returns the engine's response as is, so its body is a
// native pipe. Everything the gateway costs above this is the gateway's own logic.
//
// For bench/stream-shapes.mjs only, `x-bench-shape` picks another way to carry the body
// through JS, unchanged, to price each structure on its own:
//   js-pull    a JS ReadableStream whose pull() reads the engine body (the gateway's shape)
//   transform  body.pipeThrough(new TransformStream()) with a JS transform() per chunk
//   identity   a JS loop reading the engine body and writing to a native IdentityTransformStream
//   parse      js-pull, plus decode + split frames + JSON.parse + JSON.stringify + encode per chunk
export default {
	fetch(request, env) {
		const url = new URL(request.url);
		const shape = request.headers.get("x-bench-shape");
		if (!shape) return fetch(`${env.ENGINE_URL}${url.pathname}${url.search}`, request);
		return reshape(shape, fetch(`${env.ENGINE_URL}${url.pathname}${url.search}`, request));
	},
};

async function reshape(shape, pending) {
	const upstream = await pending;
	if (!upstream.body) return upstream;
	const init = { status: upstream.status, headers: upstream.headers };
	if (shape === "transform") {
		return new Response(upstream.body.pipeThrough(new TransformStream({ transform: (chunk, c) => c.enqueue(chunk) })), init);
	}
	if (shape === "identity") {
		const { readable, writable } = new IdentityTransformStream();
		const pump = async () => {
			const reader = upstream.body.getReader();
			const writer = writable.getWriter();
			for (;;) {
				const { done, value } = await reader.read();
				if (done) break;
				await writer.write(value);
			}
			await writer.close();
		};
		pump().catch(() => {});
		return new Response(readable, init);
	}
	const reader = upstream.body.getReader();
	const decoder = new TextDecoder();
	const encoder = new TextEncoder();
	let partial = "";
	const rewrite = (bytes) => {
		const text = partial + decoder.decode(bytes, { stream: true });
		const frames = text.split("\n\n");
		partial = frames.pop() ?? "";
		let out = "";
		for (const f of frames) {
			const data = f.slice(f.indexOf(":") + 1).trim();
			out += data.startsWith("{") ? `data: ${JSON.stringify({ ...JSON.parse(data), model: "venym/bench" })}\n\n` : `${f}\n\n`;
		}
		return encoder.encode(out);
	};
	return new Response(
		new ReadableStream({
			async pull(controller) {
				const { done, value } = await reader.read();
				if (done) {
					if (partial) controller.enqueue(encoder.encode(partial));
					controller.close();
					return;
				}
				controller.enqueue(shape === "parse" ? rewrite(value) : value);
			},
			cancel: (reason) => reader.cancel(reason),
		}),
		init,
	);
}
