// Numbers, money and times as the console shows them, and a small DOM builder (no innerHTML:
// key names and engine errors are shown as text, never parsed as markup).

const twoDecimals = new Intl.NumberFormat("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
const threeSignificant = new Intl.NumberFormat("en-US", { maximumSignificantDigits: 3 });
const integer = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
const compact = new Intl.NumberFormat("en-US", { notation: "compact", maximumSignificantDigits: 3 });

/**
 * USD: $0.00 for zero, two decimals from a cent up, and below a cent three significant digits
 * ($0.000123), so a small cost never reads as $0.00. Null (unknown) is an em dash.
 */
export function usd(value) {
	if (value === null || value === undefined || !Number.isFinite(value)) return "—";
	if (value === 0) return "$0.00";
	const sign = value < 0 ? "-" : "";
	const abs = Math.abs(value);
	return `${sign}$${abs >= 0.01 ? twoDecimals.format(abs) : threeSignificant.format(abs)}`;
}

/** USD for an axis label: short, still never $0.00 for a small non-zero value. */
export function usdShort(value) {
	if (value >= 1000) return `$${compact.format(value)}`;
	return usd(value);
}

export function count(value) {
	if (value === null || value === undefined || !Number.isFinite(value)) return "—";
	return integer.format(value);
}

/** A share (0…1) as a percentage with one decimal, "—" when there is none. */
export function percent(share) {
	if (share === null || share === undefined || !Number.isFinite(share)) return "—";
	return `${(share * 100).toFixed(1)}%`;
}

export function countShort(value) {
	return value >= 10_000 ? compact.format(value) : count(value);
}

/** Unix seconds → "2026-05-01 14:03 UTC" (the API's times are UTC; so is the console). */
export function time(unixSeconds) {
	if (unixSeconds === null || unixSeconds === undefined) return "—";
	return `${new Date(unixSeconds * 1000).toISOString().slice(0, 16).replace("T", " ")} UTC`;
}

/** A bucket start for an axis: "14:00" (hourly) or "05-01" (daily). */
export function bucketLabel(ms, granularity) {
	const iso = new Date(ms).toISOString();
	return granularity === "hour" ? iso.slice(11, 16) : iso.slice(5, 10);
}

/**
 * h("td", {class: "num", dataset: {usd: 1}}, "text", child): an element. Attributes set with
 * setAttribute (never `style`: the page's CSP allows no inline style), `on*` functions as listeners.
 */
export function h(tag, attrs = {}, ...children) {
	const el = tag.startsWith("svg:")
		? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(4))
		: document.createElement(tag);
	for (const [name, value] of Object.entries(attrs)) {
		if (value === undefined || value === null || value === false) continue;
		if (name === "dataset") Object.assign(el.dataset, value);
		else if (name.startsWith("on") && typeof value === "function") el.addEventListener(name.slice(2), value);
		else el.setAttribute(name, value === true ? "" : String(value));
	}
	for (const child of children.flat()) {
		if (child === null || child === undefined || child === false) continue;
		el.append(child instanceof Node ? child : String(child));
	}
	return el;
}
