/**
 * A real browser: headless Chromium opens a page that streams a completion through the
 * official openai SDK (dangerouslyAllowBrowser) against the gateway under `wrangler dev`,
 * with a browser key bound to the page's origin. The same page from another origin shows the
 * gateway's 403 message, which it can only read because errors carry CORS headers.
 */
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { type AppServer, bundleSdk, startAppServer } from "./app-server";
import { haveChromium, launchChromium } from "./chromium";

const gatewayUrl = () => inject("gatewayUrl");

async function admin<T>(path: string, body: unknown): Promise<T> {
	const res = await fetch(`${gatewayUrl()}/admin${path}`, {
		method: "POST",
		headers: { authorization: `Bearer ${inject("adminToken")}`, "content-type": "application/json" },
		body: JSON.stringify(body),
	});
	if (!res.ok) throw new Error(`admin ${path}: ${res.status} ${await res.text()}`);
	return (await res.json()) as T;
}

interface PageResult {
	state: string;
	text: string;
	error: string;
	httpStatus: string | undefined;
}

async function run(page: Page, url: string): Promise<PageResult> {
	await page.goto(url);
	await page.waitForSelector('#status[data-state="done"], #status[data-state="error"]', { timeout: 30_000 });
	return page.evaluate(() => {
		const status = document.getElementById("status") as HTMLElement;
		return {
			state: status.dataset.state ?? "",
			text: document.getElementById("out")?.textContent ?? "",
			error: document.getElementById("error")?.textContent ?? "",
			httpStatus: status.dataset.httpStatus,
		};
	});
}

describe.skipIf(!haveChromium)("browser keys in a real browser", () => {
	let browser: Browser;
	let allowed: AppServer;
	let other: AppServer;
	let browserKey: string;
	const pageErrors: string[] = [];

	beforeAll(async () => {
		const sdk = await bundleSdk();
		const server = await admin<{ key: string }>("/keys", { name: "browser-app-server", balance_usd: 5 });
		allowed = await startAppServer({ sdk, gatewayUrl: gatewayUrl(), serverKey: server.key });
		other = await startAppServer({ sdk, gatewayUrl: gatewayUrl(), serverKey: server.key });
		const created = await admin<{ key: string }>("/keys", {
			name: "browser",
			balance_usd: 5,
			allowed_origins: [allowed.origin],
			allowed_models: ["test/ok"],
		});
		browserKey = created.key;
		browser = await launchChromium();
	});

	afterAll(async () => {
		await browser?.close();
		await allowed?.close();
		await other?.close();
	});

	async function open(url: string): Promise<PageResult> {
		const page = await browser.newPage();
		page.on("pageerror", (err) => pageErrors.push(err.message));
		try {
			return await run(page, url);
		} finally {
			await page.close();
		}
	}

	const query = (params: Record<string, string>) => new URLSearchParams({ base: `${gatewayUrl()}/v1`, ...params }).toString();

	it("streams a completion with a browser key from its allowed origin and shows the text", async () => {
		const result = await open(`${allowed.origin}/?${query({ key: browserKey, prompt: "hello from the browser" })}`);
		expect(result.error).toBe("");
		expect(result.state).toBe("done");
		expect(result.text).toBe("Echo: hello from the browser");
		expect(pageErrors).toEqual([]);
	});

	it("shows the gateway's 403 message when the same page runs from a disallowed origin", async () => {
		const result = await open(`${other.origin}/?${query({ key: browserKey })}`);
		expect(result.state).toBe("error");
		expect(result.httpStatus).toBe("403");
		expect(result.error).toContain("403");
		expect(result.error).toContain(`may not be used from the origin '${other.origin}'`);
		expect(result.text).toBe("");
	});

	it("streams with a short-lived vk-tmp- token its own server minted for its origin", async () => {
		const result = await open(`${allowed.origin}/?${query({ token: "1", prompt: "token flow" })}`);
		expect(result.error).toBe("");
		expect(result.state).toBe("done");
		expect(result.text).toBe("Echo: token flow");
	});
});
