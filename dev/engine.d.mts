// Types for dev/engine.mjs, so TypeScript tests can start and inspect the development engine.

/** Names accepted after `/s/` in a path (dev/engine-scenarios.mjs); any other name answers 404. */
export type ScenarioName =
	| "ok"
	| "fail500"
	| "poison"
	| "fail503"
	| "fail429"
	| "bad400"
	| "flat400"
	| "hang"
	| "stuck"
	| "drop"
	| "midstream"
	| "midflat"
	| "cut"
	| "error200"
	| "nousage"
	| "cumulative"
	| "finishusage"
	| "comments"
	| "slow"
	| "reasoning"
	| "stall"
	| "gated"
	| "hugeusage"
	| "bigprompt"
	| "bytetok"
	| "onechoice"
	| "zerousage"
	| "negusage"
	| "noeol"
	| "echoauth"
	| "echoauthcontent"
	| "echoauthmid"
	| "echoauth200"
	| "echoauthescaped"
	| "trickle"
	| "doneopen"
	| "slowheaders"
	| "slowprefill"
	| "slowbody"
	| "tool-loop"
	| "websearch-loop"
	| "deferred-tool"
	| "qwen-loop"
	| "codex"
	| "searchfail"
	| "search-slow-answer"
	| "search-failed-answer"
	| "search-late"
	| "search-mute-answer"
	| "search-late-answer"
	| "searchslow"
	| "searchgated"
	| "search-again"
	| "ctx4096"
	| "searchhuge"
	| "mute"
	| "brokentool"
	| "cached"
	| "cachedllama"
	| "overcached"
	| "long";

export declare const scenarioNames: readonly ScenarioName[];

/** A JSON value as the engine parsed it from a request body. */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };

/** One request the engine received (control routes under `/_engine/` are not recorded). */
export interface RecordedRequest {
	/** Increasing from 1 for the engine's lifetime; `reset()` does not restart it. */
	id: number;
	method: string;
	/** Path as received, scenario prefix included, without the query string. */
	path: string;
	/** Query parameters, e.g. `{ q: "...", format: "json" }` for search. */
	query: Record<string, string>;
	/** "ok" when the path has no `/s/<scenario>` prefix; unknown names are recorded too. A named node's is the scenario set for it. */
	scenario: string;
	/** The node name of a `/n/<name>` path (dev/engine-nodes.mjs), else null. */
	node: string | null;
	/** Lower-cased header names, as Node parsed them (`authorization` included). */
	headers: Record<string, string | string[] | undefined>;
	/** Parsed JSON body, or null when there was none or it was not JSON. */
	body: { [key: string]: JsonValue } | null;
	/** The client closed the connection before the response finished (not set by `drop`/`cut`, which the engine closes itself). */
	aborted: boolean;
	/** The whole response was handed to the OS. */
	finished: boolean;
	/** When the engine received the request (its clock, unix ms). */
	receivedAt: number;
	/** When the connection closed (its clock, unix ms), null while it is open. */
	closedAt: number | null;
}

export interface StartEngineOptions {
	/** 0 (default) picks a free port. */
	port?: number;
	/** Default "127.0.0.1". */
	host?: string;
	/** When false, logs one line per request. Default true. */
	quiet?: boolean;
}

/**
 * The engine's own routes, under `/_engine/` (not recorded): `GET /_engine/requests` lists the
 * recorded requests, oldest first; `?since=<id>` keeps those after an id, `?contains=<text>`
 * those whose raw body contains the text, `?tail=<n>` the last n of what is left.
 * `POST /_engine/reset` empties the list.
 *
 * A `/t/<tenant>` prefix before any path (`${url}/t/a/s/cut/v1`, `${url}/t/a/_engine/requests`)
 * is an engine of its own on the same port: its own record, which `requests` and `reset()`
 * (the engine's own) do not include. Recorded paths leave the tenant prefix out.
 */
export interface Engine {
	/** e.g. "http://127.0.0.1:54321", no trailing slash; node base URLs are `${url}/v1` or `${url}/s/<scenario>/v1`. */
	url: string;
	port: number;
	/** Live array: it fills as requests arrive and is emptied in place by `reset()`. */
	requests: RecordedRequest[];
	reset(): void;
	/** Stops listening and drops open connections (hanging and streaming ones included). */
	close(): Promise<void>;
}

export declare function startEngine(options?: StartEngineOptions): Promise<Engine>;
