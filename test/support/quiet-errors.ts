import { afterAll, beforeAll, vi } from "vitest";

/**
 * Keeps the `console.error` lines that mention one of `markers` out of the test output for the
 * enclosing `describe` (the ledger logs every failed flush; a test that injects failures expects
 * them). Any other error line still prints.
 */
export function hideErrorsMentioning(...markers: string[]): void {
	beforeAll(() => {
		const original = console.error.bind(console);
		vi.spyOn(console, "error").mockImplementation((...args: unknown[]) => {
			if (args.some((a) => markers.some((m) => String(a).includes(m)))) return;
			original(...args);
		});
	});
	afterAll(() => {
		vi.restoreAllMocks();
	});
}
