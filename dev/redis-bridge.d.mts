// Types for dev/redis-bridge.mjs: an Upstash-REST-compatible bridge in front of redis-server.

export type RedisTarget = { path: string } | { host?: string; port: number };

export interface StartRedisBridgeOptions {
	/** The redis-server to talk to: a unix socket path or a TCP host and port. */
	redis: RedisTarget;
	/** 0 (default) picks a free port. */
	port?: number;
	/** Default "127.0.0.1". */
	host?: string;
	/** The bearer token clients must send; random when omitted. */
	token?: string;
}

export interface RedisBridge {
	/** e.g. "http://127.0.0.1:54321": the UPSTASH_REDIS_REST_URL. */
	url: string;
	/** The UPSTASH_REDIS_REST_TOKEN. */
	token: string;
	/** Runs one command on the redis-server directly (tests); a Redis error rejects. */
	command(...args: Array<string | number>): Promise<unknown>;
	close(): Promise<void>;
}

export declare function startRedisBridge(options: StartRedisBridgeOptions): Promise<RedisBridge>;

export interface RedisServer {
	/** The unix socket it listens on (no TCP port). */
	socket: string;
	close(): Promise<void>;
}

/** Starts a throwaway redis-server (no persistence) in a temporary folder. */
export declare function startRedisServer(options?: { bin?: string; timeoutMs?: number }): Promise<RedisServer>;
