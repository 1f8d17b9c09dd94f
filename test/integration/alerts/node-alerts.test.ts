/**
 * Node down / node back alerts: the fleet's NodeHealth object (one of this test's own) probes a
 * named node of the development engine, and each change of its health is posted once, signed,
 * to ALERT_WEBHOOK_URL (the engine's `operator` receiver, dev/engine-hooks.mjs).
 */
import { describe, expect, it } from "vitest";
import { verifyAlertSignature } from "../../../src/alerts/signature";
import { received } from "../../support/alerts";
import { fleetConfig, gatewayWith, marker, model, nodeUrl, setNode, waitForNode } from "../../support/fleet";
import { admin, waitFor } from "../../support/gateway";
import { TEST_ALERT_SECRET } from "../../support/test-config";

async function nodeHooks(name: string) {
	return (await received("operator")).filter((h) => h.body.includes(`/n/${name}/`));
}

describe("node alerts", () => {
	it("announces a node going down and coming back, once each", async () => {
		const name = marker("na");
		const url = nodeUrl(name);
		await setNode(name, { scenario: "fail500" });
		const gw = gatewayWith(fleetConfig([model("fleet", [url])]), {}, { ownNodeHealth: true });
		await waitForNode(gw, url, (r) => r.checked_at !== null && !r.healthy);
		const [down] = await waitFor(async () => {
			const h = await nodeHooks(name);
			return h.length > 0 ? h : null;
		});
		if (!down) throw new Error("no node_down");
		expect(down.headers["x-venym-event"]).toBe("node_down");
		const nowS = Math.floor(Date.now() / 1000);
		expect(await verifyAlertSignature(TEST_ALERT_SECRET, down.headers["x-venym-signature"] ?? null, down.body, nowS)).toBe(true);
		expect(JSON.parse(down.body)).toMatchObject({ type: "node.down", node: { url }, error: "status 500" });

		await setNode(name, { scenario: "ok" });
		const back = await waitForNode(gw, url, (r) => r.healthy && r.checked_at !== null);
		const both = await waitFor(async () => {
			const h = await nodeHooks(name);
			return h.length >= 2 ? h : null;
		});
		expect(JSON.parse(both[1]?.body ?? "{}")).toMatchObject({ type: "node.back", node: { url }, error: null });
		// More rounds of the same health (2 s of them, checked_at is in seconds) announce nothing more.
		await waitForNode(gw, url, (r) => (r.checked_at ?? 0) >= (back.checked_at ?? 0) + 2);
		expect((await nodeHooks(name)).map((h) => h.headers["x-venym-event"])).toEqual(["node_down", "node_back"]);

		// The operator-wide list has both, newest first.
		const listed = await waitFor(async () => {
			const res = await admin("/alert-deliveries?limit=500");
			const rows = ((await res.json()) as { data: Array<{ event: string; subject: string; status: string; key_id: null }> }).data;
			const mine = rows.filter((r) => r.subject === url);
			return mine.length === 2 && mine.every((r) => r.status === "delivered") ? mine : null;
		});
		expect(listed.map((r) => r.event)).toEqual(["node_back", "node_down"]);
		expect(listed[0]?.key_id).toBeNull();
	}, 30_000);
});
