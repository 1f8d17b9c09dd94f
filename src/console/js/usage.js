// The usage view, for the whole deployment or one key: spend and tokens over time (an SVG chart
// from GET /admin/usage/summary), a breakdown by model (with its prompt-cache hit rate), and the
// most recent requests.
import { api, query } from "./api.js";
import { usageChart } from "./chart.js";
import { count, h, percent, time, usd } from "./format.js";
import { keyNames } from "./names.js";

const $ = (id) => document.getElementById(id);
const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const RANGES = { "24h": DAY, "7d": 7 * DAY, "30d": 30 * DAY };
const RANGE_TEXT = { "24h": "last 24 h", "7d": "last 7 days", "30d": "last 30 days" };

let app; // {say}
/** The key shown, or null for the whole deployment. */
let key = null;
/** Each load gets a number; an answer for an older one (the operator clicked on) is dropped. */
let generation = 0;

const checked = (name) => document.querySelector(`input[name="${name}"]:checked`).value;

/** Every bucket start from the one holding `since` to the one holding `now`, so empty periods show too. */
function bucketStarts(now, rangeMs, step) {
	const first = Math.floor((now - rangeMs) / step) * step;
	const starts = [];
	for (let t = first; t <= now; t += step) starts.push(t);
	return starts;
}

function totalsList(items) {
	return items.map(([label, value]) => h("div", {}, h("dt", {}, label), h("dd", {}, value)));
}

function modelRows(byModel) {
	const rows = [...byModel.entries()].sort((a, b) => b[1].cost - a[1].cost);
	if (!rows.length) return [h("tr", {}, h("td", { colspan: 7, class: "hint" }, "No requests in this range."))];
	return rows.map(([model, m]) =>
		h(
			"tr",
			{ dataset: { model } },
			h("td", {}, model),
			h("td", { class: "num" }, count(m.requests)),
			h("td", { class: "num" }, count(m.prompt)),
			// Prompt tokens the engine served from its prefix cache, billed at the cached price.
			h("td", { class: "num", dataset: { field: "cached" } }, count(m.cached)),
			h("td", { class: "num", dataset: { field: "cache-hit-rate" } }, m.prompt > 0 ? percent(m.cached / m.prompt) : "—"),
			h("td", { class: "num" }, count(m.completion)),
			h("td", { class: "num", dataset: { usd: m.cost } }, usd(m.cost)),
		),
	);
}

function recentRows(records, names) {
	if (!records.length) return [h("tr", {}, h("td", { colspan: 9, class: "hint" }, "No requests yet."))];
	return records.map((r) =>
		h(
			"tr",
			{},
			h("td", {}, time(r.created_at)),
			h("td", {}, r.model),
			h("td", { class: r.status === "completed" ? "" : "warn" }, r.status + (r.estimated ? " (est.)" : "")),
			h("td", { class: "num" }, count(r.prompt_tokens)),
			h("td", { class: "num" }, count(r.completion_tokens)),
			h("td", { class: "num", dataset: { usd: r.cost_usd } }, usd(r.cost_usd)),
			// The key's name where it is known, its id beside it.
			h(
				"td",
				{ dataset: { field: "key" } },
				names.get(r.key_id)
					? h("span", { dir: "auto" }, names.get(r.key_id), h("span", { class: "id" }, ` ${r.key_id}`))
					: r.key_id,
			),
			h("td", { class: "mono" }, r.request_id),
			// The lane the request came in on (chat, messages, …); older records have none.
			h("td", {}, r.lane ?? "—"),
		),
	);
}

/** Loads and draws everything for the current key, range and granularity. */
export async function loadUsage() {
	const mine = ++generation;
	const range = checked("range");
	const granularity = checked("granularity");
	const step = granularity === "hour" ? HOUR : DAY;
	const now = Date.now();
	const starts = bucketStarts(now, RANGES[range], step);
	const keyId = key?.id;
	$("usage-scope").textContent = key ? `Key ${key.name} (${key.id})` : "Whole deployment";
	$("usage-all").hidden = !key;

	const summaryCall = api(
		`/usage/summary${query({ key_id: keyId, since: Math.floor(starts[0] / 1000), until: Math.ceil(now / 1000), granularity, group_by: "model" })}`,
	);
	const recentCall = api(`/usage${query({ key_id: keyId, limit: 20 })}`);
	const [summary, recent] = await Promise.allSettled([summaryCall, recentCall]);
	if (mine !== generation) return;

	const buckets = new Map(starts.map((ms) => [ms, { ms, cost: 0, tokens: 0, requests: 0 }]));
	const byModel = new Map();
	const chartBox = $("usage-chart");
	if (summary.status === "fulfilled") {
		for (const row of summary.value.data) {
			const ms = Date.parse(row.period);
			const tokens = row.prompt_tokens + row.completion_tokens;
			let b = buckets.get(ms);
			if (!b) {
				b = { ms, cost: 0, tokens: 0, requests: 0 };
				buckets.set(ms, b);
			}
			b.cost += row.cost_usd;
			b.tokens += tokens;
			b.requests += row.requests;
			const model = row.model ?? "all models";
			const m = byModel.get(model) ?? { requests: 0, prompt: 0, cached: 0, completion: 0, cost: 0 };
			m.requests += row.requests;
			m.prompt += row.prompt_tokens;
			m.cached += row.cached_tokens ?? 0;
			m.completion += row.completion_tokens;
			m.cost += row.cost_usd;
			byModel.set(model, m);
		}
		const series = [...buckets.values()].sort((a, b) => a.ms - b.ms);
		const total = series.reduce(
			(t, b) => ({ cost: t.cost + b.cost, tokens: t.tokens + b.tokens, requests: t.requests + b.requests }),
			{
				cost: 0,
				tokens: 0,
				requests: 0,
			},
		);
		$("usage-totals").replaceChildren(
			...totalsList([
				[`Spend, ${RANGE_TEXT[range]}`, usd(total.cost)],
				["Requests", count(total.requests)],
				["Tokens", count(total.tokens)],
				...(key ? [["Balance", usd(key.balance_usd)]] : []),
			]),
		);
		const label = `Spend and tokens per ${granularity}, ${RANGE_TEXT[range]}: ${usd(total.cost)} over ${count(total.requests)} requests`;
		chartBox.replaceChildren(usageChart(series, { granularity, label, width: chartBox.clientWidth }));
		$("usage-models").tBodies[0].replaceChildren(...modelRows(byModel));
	} else {
		const err = summary.reason;
		const text =
			err.status === 404 ? "This gateway does not serve GET /admin/usage/summary yet." : `Usage summary failed: ${err.message}`;
		$("usage-totals").replaceChildren();
		chartBox.replaceChildren(h("p", { class: "hint" }, text));
		$("usage-models").tBodies[0].replaceChildren();
	}
	if (recent.status === "fulfilled") {
		const names = await keyNames(recent.value.data.map((r) => r.key_id));
		if (mine !== generation) return;
		$("usage-recent").tBodies[0].replaceChildren(...recentRows(recent.value.data, names));
	} else app.say(`Recent requests failed: ${recent.reason.message}`, "error");
}

/** Shows usage for `k` (a key from the table) or, with null, for the whole deployment. */
export function showKeyUsage(k) {
	key = k;
}

export function initUsage(context) {
	app = context;
	for (const input of document.querySelectorAll('#usage-view input[type="radio"]')) {
		input.addEventListener("change", () => loadUsage().catch((err) => app.say(err.message, "error")));
	}
	$("usage-all").addEventListener("click", () => {
		key = null;
		loadUsage().catch((err) => app.say(err.message, "error"));
	});
}
