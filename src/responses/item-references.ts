/**
 * Input `item_reference`s (`{"type": "item_reference", "id": …}`, as the AI SDK sends earlier
 * assistant and reasoning items of stored responses): the ids they name, and the input with each
 * replaced by the stored item the key's ResponseStore found for it. Pure: the lookup is the store's.
 */
import { GatewayError } from "../errors";
import type { ItemReference, ResponseInputItem } from "./item-schema";
import type { ResponsesRequest } from "./request-schema";

/** A normalised input item, or a reference still to be resolved (to-chat.ts `inputItems`). */
export type RequestedItem = ResponseInputItem | ItemReference;

function isReference(item: RequestedItem): item is ItemReference {
	return item.type === "item_reference";
}

/** The ids the input references, in input order (an id referenced twice is listed twice). */
export function referencedIds(items: readonly RequestedItem[]): string[] {
	return items.filter(isReference).map((r) => r.id);
}

/**
 * The input with its references replaced by `resolved`, the stored items the store found for
 * `referencedIds(items)`, in the same order.
 */
export function resolveReferences(items: readonly RequestedItem[], resolved: readonly ResponseInputItem[]): ResponseInputItem[] {
	let next = 0;
	const out = items.map((item) => {
		if (!isReference(item)) return item;
		const found = resolved[next++];
		if (!found) throw new Error(`item reference '${item.id}' has no resolved item`);
		return found;
	});
	if (next !== resolved.length) throw new Error(`${resolved.length} items resolved for ${next} references`);
	return out;
}

/** The 404 for a reference to an id the key has no visible item for, naming the first input item that references it. */
export function referenceNotFound(input: ResponsesRequest["input"], id: string): GatewayError {
	const index = Array.isArray(input) ? input.findIndex((item) => item.type === "item_reference" && item.id === id) : -1;
	return new GatewayError("not_found", `Item with id '${id}' not found.`, { param: `input[${index}].id` });
}
