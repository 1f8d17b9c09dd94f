/** An engine's body as a test stream: one chunk per read, then it closes (its answer is complete) or hangs (an idle engine). */
export function upstreamOf(chunks: Uint8Array[], end: "close" | "hang" = "close") {
	const state = { reads: 0, cancelled: false, cancelReason: undefined as unknown };
	const stream = new ReadableStream<Uint8Array>(
		{
			pull(controller) {
				const next = chunks[state.reads++];
				if (next) controller.enqueue(next);
				else if (end === "close") controller.close();
				else return new Promise<void>(() => {});
			},
			cancel(reason) {
				state.cancelled = true;
				state.cancelReason = reason;
			},
		},
		{ highWaterMark: 0 },
	);
	return { stream, state };
}
