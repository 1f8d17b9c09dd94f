/**
 * Drops the log lines workerd prints each time a test engine drops a connection before its
 * headers (the `drop` scenario), and nothing else.
 *
 * In the `workers` and `redis` projects every outbound `fetch` of the worker under test goes
 * through Miniflare's outbound interceptor, a small worker of Miniflare's own whose handler is
 * `return fetch(request)`. When the connection is lost, that handler's promise rejects: workerd
 * logs it as an uncaught rejection _of the interceptor_, and the same error then reaches our
 * `fetch` as a rejection that `src/engine/call-engine.ts` catches (the tests assert the failover
 * that follows). A bare `try { await fetch(dropping) } catch {}` in a test prints the same lines,
 * so they say nothing about the gateway. The pool already drops workerd's other
 * normal-operation disconnect lines (`ignoreMessages` in @cloudflare/vitest-pool-workers) and
 * writes what remains with one `write` call per log entry on stdout or stderr, which is where this
 * filter sits. Any other line, including a rejection in our own code, still prints.
 */
const OUTBOUND_DISCONNECT = [
	/^uncaught exception; source = Uncaught \(in promise\); stack = Error: Network connection lost\.\s*$/,
	/^uncaught exception; exception = \S+\/jsg\/value\.h:\d+: disconnected: jsg\.Error: Network connection lost\.\n/,
	/^exception = kj\/async-io\.c\+\+:\d+: disconnected: stream disconnected prematurely\n/,
];

const QUIET = Symbol.for("venym.quietOutboundDisconnects");

function quiet(stream: NodeJS.WriteStream): void {
	const tagged = stream as NodeJS.WriteStream & { [QUIET]?: true };
	if (tagged[QUIET]) return;
	tagged[QUIET] = true;
	const write = stream.write.bind(stream) as (...args: unknown[]) => boolean;
	stream.write = ((chunk: unknown, ...rest: unknown[]) => {
		if (typeof chunk === "string" && OUTBOUND_DISCONNECT.some((re) => re.test(chunk))) return true;
		return write(chunk, ...rest);
	}) as typeof stream.write;
}

/** Installs the filter on this process's stdout and stderr, once. */
export function quietOutboundDisconnects(): void {
	quiet(process.stdout);
	quiet(process.stderr);
}
