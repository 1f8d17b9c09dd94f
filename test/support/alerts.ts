/** The development engine's webhook receiver (dev/engine-hooks.mjs), as the alert tests use it. */
import { env } from "cloudflare:test";

export interface ReceivedHook {
	headers: Record<string, string>;
	body: string;
	receivedAt: number;
}

/** A receiver no other test posts to: its URL (http to 127.0.0.1, which rules accept in development). */
export function hookUrl(name: string): string {
	return `${env.ENGINE_URL}/hook/${encodeURIComponent(name)}`;
}

export function hookName(label: string): string {
	return `${label}-${crypto.randomUUID().slice(0, 12)}`;
}

/** What `name` received, oldest first. */
export async function received(name: string): Promise<ReceivedHook[]> {
	const res = await fetch(`${env.ENGINE_URL}/_engine/hooks/${encodeURIComponent(name)}`);
	return (await res.json()) as ReceivedHook[];
}

/** The statuses `name` answers its next posts with (then 200). */
export async function planHook(name: string, statuses: number[]): Promise<void> {
	const res = await fetch(`${env.ENGINE_URL}/_engine/hooks/${encodeURIComponent(name)}`, {
		method: "POST",
		body: JSON.stringify({ statuses }),
	});
	await res.body?.cancel();
}
