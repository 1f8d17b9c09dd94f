import { afterAll, beforeAll, vi } from "vitest";

/**
 * Keeps the `console.error` lines that mention `marker` out of the test output for the enclosing
 * `describe` (the ledger logs every failed flush; a test that injects failures expects them).
 * Any other error line still prints.
 */
export function hideErrorsMentioning(marker: string): void {
	beforeAll(() => {
		const original = console.error.bind(console);
		vi.spyOn(console, "error").mockImplementation((...args: unknown[]) => {
			if (args.some((a) => String(a).includes(marker))) return;
			original(...args);
		});
	});
	afterAll(() => {
		vi.restoreAllMocks();
	});
}
