export function percentile(sorted, p) {
	if (sorted.length === 0) return Number.NaN;
	const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
	return sorted[i];
}

export function summarize(values) {
	const sorted = Float64Array.from(values).sort();
	const n = sorted.length;
	let sum = 0;
	for (const v of sorted) sum += v;
	return {
		n,
		mean: n ? sum / n : Number.NaN,
		p50: percentile(sorted, 50),
		p90: percentile(sorted, 90),
		p99: percentile(sorted, 99),
		max: n ? sorted[n - 1] : Number.NaN,
	};
}

export const round = (v, digits = 3) => (Number.isFinite(v) ? Number(v.toFixed(digits)) : null);

export function roundAll(obj, digits = 3) {
	if (typeof obj === "number") return round(obj, digits);
	if (Array.isArray(obj)) return obj.map((v) => roundAll(v, digits));
	if (obj && typeof obj === "object") return Object.fromEntries(Object.entries(obj).map(([k, v]) => [k, roundAll(v, digits)]));
	return obj;
}
