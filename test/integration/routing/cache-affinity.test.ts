/**
 * Prompt-cache routing end to end: the paying key's `cache_salt` reaching a salted engine node
 * (and the client's reaching the others), and a multi-turn conversation that names no
 * `prompt_cache_key` or `user` staying on one node through its prefix.
 */
import { beforeAll, describe, expect, it } from "vitest";
import { callsWith, errorOf, fleetConfig, gatewayWith, marker, model, nodeUrl, perNode } from "../../support/fleet";
import { type CreatedKey, createKey } from "../../support/gateway";

const SECRETS = { CACHE_SALT_SECRET: "integration-cache-salt-secret-0123456789" };
const APP = "https://app.example";

let parent: CreatedKey;
let other: CreatedKey;

beforeAll(async () => {
	parent = await createKey({ name: "salt-parent", balance_usd: 10 });
	other = await createKey({ name: "salt-other", balance_usd: 10 });
});

describe("cache_salt", () => {
	it("sends a salted node the payer's salt (a token shares its parent's), and other nodes the client's own", async () => {
		const t = marker("cs");
		const gw = gatewayWith(
			fleetConfig([model("salted", [{ url: nodeUrl(`${t}s`), cache_salt: true }]), model("plain", [nodeUrl(`${t}p`)])]),
			SECRETS,
		);
		const minted = await gw.post(parent.key, "/v1/tokens", { allowed_origins: [APP] });
		expect(minted.res.status, minted.text).toBe(201);
		const token = (minted.json as { token: string }).token;

		const saltSeen = async (key: string, modelId: string, headers: Record<string, string> = {}) => {
			const m = marker();
			const a = await gw.post(
				key,
				"/v1/chat/completions",
				{ model: modelId, cache_salt: "client-chosen", messages: [{ role: "user", content: m }] },
				headers,
			);
			expect(a.res.status, a.text).toBe(200);
			const calls = await callsWith(m);
			expect(calls).toHaveLength(1);
			return calls[0]?.body?.cache_salt;
		};

		const ofParent = await saltSeen(parent.key, "salted");
		expect(ofParent).toMatch(/^[A-Za-z0-9_-]{43}$/);
		expect(ofParent).not.toContain(parent.id);
		expect(await saltSeen(token, "salted", { origin: APP })).toBe(ofParent);
		expect(await saltSeen(other.key, "salted")).not.toBe(ofParent);
		expect(await saltSeen(parent.key, "plain")).toBe("client-chosen");
	});

	it("refuses a salted node's requests with a config error naming CACHE_SALT_SECRET when the secret is missing", async () => {
		const t = marker("cn");
		const gw = gatewayWith(fleetConfig([model("salted", [{ url: nodeUrl(`${t}s`), cache_salt: true }])]));
		const m = marker();
		const a = await gw.chat(parent.key, { model: "salted", messages: [{ role: "user", content: m }] });
		expect(a.res.status).toBe(500);
		expect(errorOf(a)).toMatchObject({ code: "config_invalid", message: expect.stringContaining("CACHE_SALT_SECRET") });
		expect(await callsWith(m)).toHaveLength(0);
	});
});

describe("prefix affinity", () => {
	it("keeps every turn of a conversation without prompt_cache_key or user on one node, and spreads conversations", async () => {
		const t = marker("pa");
		const names = [`${t}a`, `${t}b`, `${t}c`, `${t}d`];
		const gw = gatewayWith(fleetConfig([model("fleet", names.map(nodeUrl))]));
		const conversations = Array.from({ length: 8 }, () => marker("conv"));
		const used = new Set<string>();
		for (const first of conversations) {
			const messages: Array<Record<string, unknown>> = [
				{ role: "system", content: "You are a travel agent." },
				{ role: "user", content: `${first} plan a trip` },
			];
			for (let turn = 0; turn < 4; turn++) {
				const a = await gw.chat(parent.key, { model: "fleet", messages });
				expect(a.res.status, a.text).toBe(200);
				const choices = (a.json?.choices ?? []) as Array<{ message: { content: string } }>;
				const reply = choices[0]?.message.content ?? "";
				messages.push({ role: "assistant", content: reply }, { role: "user", content: `turn ${turn + 2}` });
			}
			const nodes = Object.keys(perNode(await callsWith(first)));
			expect(nodes, first).toHaveLength(1);
			used.add(nodes[0] as string);
		}
		expect(used.size).toBeGreaterThanOrEqual(2);
	});
});
