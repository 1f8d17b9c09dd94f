// A webhook receiver beside the development engine, for the gateway's alert deliveries
// (docs/operations.md, "Alerts"): `POST /hook/<name>` is recorded (headers and raw body, apart
// from the engine's request record, so engine call counts never see it) and answered with the
// next status planned for <name> (default 200). `POST /_engine/hooks/<name>` plans statuses
// (`{"statuses":[500]}`); `GET /_engine/hooks/<name>` lists what <name> received, oldest first.

import { sendJson } from "./engine-wire.mjs";

export function createHooks() {
	const received = new Map();
	const plans = new Map();
	return {
		receive(name, headers, body) {
			if (!received.has(name)) received.set(name, []);
			received.get(name).push({ headers, body, receivedAt: Date.now() });
			return plans.get(name)?.shift() ?? 200;
		},
		list: (name) => received.get(name) ?? [],
		plan(name, statuses) {
			plans.set(name, [...(plans.get(name) ?? []), ...statuses]);
		},
	};
}

/** `POST /hook/<name>`: true when it was one (answered). */
export function hookRoute(req, res, pathname, text, hooks) {
	const match = /^\/hook\/([^/]+)$/.exec(pathname);
	if (!match || req.method !== "POST") return false;
	const status = hooks.receive(decodeURIComponent(match[1]), req.headers, text);
	res.writeHead(status, { "content-type": "text/plain" });
	res.end(status < 300 ? "ok" : "nope");
	return true;
}

/** The control routes: true when `route` was one of them (answered). */
export function hookControl(req, res, route, body, hooks) {
	const match = /^\/_engine\/hooks\/([^/]+)$/.exec(route);
	if (!match) return false;
	const name = decodeURIComponent(match[1]);
	if (req.method === "GET") sendJson(res, 200, hooks.list(name));
	else {
		hooks.plan(name, Array.isArray(body?.statuses) ? body.statuses.map(Number) : []);
		sendJson(res, 200, { ok: true });
	}
	return true;
}
