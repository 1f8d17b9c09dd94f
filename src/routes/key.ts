import type { Context } from "hono";
import type { AppEnv } from "../app-env";
import { balanceView, keyView } from "./admin";

/** GET /v1/key: the caller's own key, its balance and limits. Never the secret. */
export async function ownKey(c: Context<AppEnv>): Promise<Response> {
	const { key, parent } = c.get("principal");
	// A vk-tmp- token draws on its parent's balance, so that is the balance it shows.
	return c.json({ ...keyView(key), ...(await balanceView(c.env, parent?.id ?? key.id)) });
}
