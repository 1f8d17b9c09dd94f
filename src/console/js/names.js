// Key names for the ids other views list (usage records, refusals): looked up once per id
// (GET /admin/keys/{id}) and remembered for the tab's life; an id whose key cannot be read shows as is.
import { api } from "./api.js";

const names = new Map();

/** The name of each id (a Map), fetching those not known yet a few at a time. */
export async function keyNames(ids) {
	const missing = [...new Set(ids.filter((id) => id && !names.has(id)))];
	for (let i = 0; i < missing.length; i += 6) {
		await Promise.all(
			missing.slice(i, i + 6).map(async (id) => {
				try {
					names.set(id, (await api(`/keys/${encodeURIComponent(id)}`)).name);
				} catch {
					names.set(id, null);
				}
			}),
		);
	}
	return new Map(ids.map((id) => [id, names.get(id) ?? null]));
}

/** Remembers a name the page already has (a key list row, a refusal's key_name). */
export function rememberName(id, name) {
	if (id && name) names.set(id, name);
}
