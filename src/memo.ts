/**
 * A string function remembered per isolate, for values parsed again and again from the same few
 * inputs (a node URL's host or label: the catalog has a handful, and every request asks). Bounded:
 * the memory is emptied when it holds `max` entries, so arbitrary inputs cannot grow it.
 */
export function memoize(fn: (input: string) => string, max = 256): (input: string) => string {
	const known = new Map<string, string>();
	return (input) => {
		const hit = known.get(input);
		if (hit !== undefined) return hit;
		const value = fn(input);
		if (known.size >= max) known.clear();
		known.set(input, value);
		return value;
	};
}
