/** The events that open and close an output item of the Responses stream. */
import type { OutputItem, OutputMessageItem, OutputTextPart, ReasoningItemValue } from "./item-schema";
import { outputTextPart } from "./output-items";
import type { Unnumbered } from "./stream-event-types";

/** output_item.added, then content_part.added for the item's one content part. */
export function itemAddedEvents(
	outputIndex: number,
	item: OutputMessageItem | ReasoningItemValue,
	part: OutputTextPart | { type: "reasoning_text"; text: string },
): Unnumbered[] {
	return [
		{ type: "response.output_item.added", output_index: outputIndex, item },
		{ type: "response.content_part.added", item_id: item.id, output_index: outputIndex, content_index: 0, part } as Unnumbered,
	];
}

/** Its text's done events, content part done, item done. `text` is the item's whole text (reasoning, message or arguments); `summarize` adds the summary events. */
export function itemDoneEvents(item: OutputItem, outputIndex: number, text: string, summarize: boolean): Unnumbered[] {
	const out: Unnumbered[] = [];
	const at = { item_id: item.id, output_index: outputIndex };
	switch (item.type) {
		case "reasoning":
			if (summarize) {
				out.push({ type: "response.reasoning_summary_text.done", ...at, summary_index: 0, text });
				out.push({
					type: "response.reasoning_summary_part.done",
					...at,
					summary_index: 0,
					part: { type: "summary_text", text },
				});
			}
			out.push({ type: "response.reasoning_text.done", ...at, content_index: 0, text });
			out.push({ type: "response.content_part.done", ...at, content_index: 0, part: { type: "reasoning_text", text } });
			break;
		case "message": {
			const part = item.content[0] ?? outputTextPart(text, []);
			for (const [i, annotation] of part.annotations.entries()) {
				out.push({
					type: "response.output_text.annotation.added",
					...at,
					content_index: 0,
					annotation_index: i,
					annotation,
				});
			}
			out.push({ type: "response.output_text.done", ...at, content_index: 0, text, logprobs: [] });
			out.push({ type: "response.content_part.done", ...at, content_index: 0, part });
			break;
		}
		case "function_call":
			out.push({ type: "response.function_call_arguments.done", ...at, arguments: text });
			break;
	}
	out.push({ type: "response.output_item.done", output_index: outputIndex, item });
	return out;
}
