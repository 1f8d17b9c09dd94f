// Spend per period as bars and tokens as a line over them, drawn as SVG by the page (no library):
// a left axis in USD, a right axis in tokens, one bar per bucket, empty buckets included.
import { bucketLabel, countShort, h, time, usd, usdShort } from "./format.js";

const M = { top: 14, right: 58, bottom: 30, left: 70 };
const TICKS = 4;

/** A round tick step (1, 2, 2.5 or 5 × 10^n) so TICKS steps cover `value`: labels stay readable. */
function niceStep(value, minStep = 0) {
	if (!(value > 0)) return Math.max(minStep, 0.25);
	const raw = value / TICKS;
	const exp = 10 ** Math.floor(Math.log10(raw));
	for (const f of [1, 2, 2.5, 5, 10]) if (raw <= f * exp) return Math.max(minStep, f * exp);
	return Math.max(minStep, 10 * exp);
}

/**
 * buckets: [{ms, cost, tokens, requests}] in time order; returns an <svg>. Each bar is a
 * `rect.bar-rect` with `data-period` and `data-cost`, titled with its numbers.
 */
export function usageChart(buckets, { granularity, label, width = 960 }) {
	// The viewBox is the box's own width in CSS pixels, so the labels keep their size on a phone.
	const W = Math.round(Math.min(1400, Math.max(320, width)));
	const H = W < 600 ? 220 : 280;
	const plotW = W - M.left - M.right;
	const plotH = H - M.top - M.bottom;
	const maxCost = TICKS * niceStep(Math.max(0, ...buckets.map((b) => b.cost)));
	// Token ticks are whole numbers.
	const maxTokens = TICKS * niceStep(Math.max(0, ...buckets.map((b) => b.tokens)), 1);
	const slot = plotW / Math.max(1, buckets.length);
	const barW = Math.max(1, slot * 0.7);
	const x = (i) => M.left + i * slot + slot / 2;
	const yCost = (v) => M.top + plotH - (v / maxCost) * plotH;
	const yTokens = (v) => M.top + plotH - (v / maxTokens) * plotH;

	const svg = h("svg:svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": label, class: "usage-svg" });
	for (let t = 0; t <= TICKS; t++) {
		const y = M.top + plotH - (t / TICKS) * plotH;
		svg.append(h("svg:line", { class: "axis", x1: M.left, x2: W - M.right, y1: y, y2: y }));
		svg.append(h("svg:text", { x: M.left - 6, y: y + 4, "text-anchor": "end" }, usdShort((maxCost * t) / TICKS)));
		svg.append(h("svg:text", { x: W - M.right + 6, y: y + 4 }, countShort((maxTokens * t) / TICKS)));
	}
	// About one time label per 110 px.
	const every = Math.max(1, Math.ceil(buckets.length / Math.max(2, Math.floor(plotW / 110))));
	buckets.forEach((b, i) => {
		if (i % every === 0) {
			svg.append(h("svg:text", { x: x(i), y: H - 8, "text-anchor": "middle" }, bucketLabel(b.ms, granularity)));
		}
		const top = yCost(b.cost);
		const rect = h("svg:rect", {
			class: "bar-rect",
			x: x(i) - barW / 2,
			y: top,
			width: barW,
			height: Math.max(0, M.top + plotH - top),
			dataset: { period: new Date(b.ms).toISOString(), cost: b.cost, tokens: b.tokens },
		});
		rect.append(
			h("svg:title", {}, `${time(b.ms / 1000)}: ${usd(b.cost)}, ${countShort(b.tokens)} tokens, ${b.requests} requests`),
		);
		svg.append(rect);
	});
	if (buckets.some((b) => b.tokens > 0)) {
		const points = buckets.map((b, i) => `${x(i).toFixed(1)},${yTokens(b.tokens).toFixed(1)}`).join(" ");
		svg.append(h("svg:polyline", { class: "tokens-line", points }));
		if (buckets.length <= 60) {
			buckets.forEach((b, i) => {
				if (b.tokens > 0) svg.append(h("svg:circle", { class: "tokens-dot", cx: x(i), cy: yTokens(b.tokens), r: 2.5 }));
			});
		}
	}
	if (!buckets.some((b) => b.requests > 0)) {
		svg.append(
			h(
				"svg:text",
				{ class: "empty", x: M.left + plotW / 2, y: M.top + plotH / 2, "text-anchor": "middle" },
				"No usage in this range",
			),
		);
	}
	return svg;
}
