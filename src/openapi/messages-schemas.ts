/** The Messages lane's answers (src/messages/from-chat.ts, stream-encoder.ts), hand-described. */
import { int, type Json, nullable, obj, str } from "./json-schema";

const usage = obj({
	input_tokens: { ...int, description: "Prompt tokens less the cached prefix." },
	output_tokens: int,
	cache_read_input_tokens: { ...int, description: "The engine's cached prompt tokens." },
	cache_creation_input_tokens: { ...int, description: "Always 0." },
});

const block = {
	oneOf: [
		obj({ type: { const: "thinking" }, thinking: str, signature: str }),
		obj({ type: { const: "text" }, text: str }),
		obj({ type: { const: "tool_use" }, id: str, name: str, input: { type: "object", additionalProperties: true } }),
	],
};

const message = obj(
	{
		id: { type: "string", description: "`msg_…`" },
		type: { const: "message" },
		role: { const: "assistant" },
		model: { type: "string", description: "The gateway's id of the model that served." },
		content: { type: "array", items: block },
		stop_reason: { type: ["string", "null"], enum: ["end_turn", "max_tokens", "stop_sequence", "tool_use", "refusal", null] },
		stop_sequence: nullable("string"),
		usage,
		venym: { type: "object", description: "Web-search `sources`, when search ran.", additionalProperties: true },
	},
	false,
	["id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage"],
);

const EVENTS = [
	"message_start",
	"ping",
	"content_block_start",
	"content_block_delta",
	"content_block_stop",
	"message_delta",
	"message_stop",
	"error",
];

export function messagesSchemas(): Record<string, Json> {
	return {
		AnthropicMessage: message,
		AnthropicStreamEvent: {
			type: "object",
			description:
				"One `event: <type>` / `data: <json>` frame: `message_start`, `ping`, per block `content_block_start` / `content_block_delta` (`text_delta`, `thinking_delta`, `signature_delta`, `input_json_delta`) / `content_block_stop`, `message_delta` (stop reason, final usage), `message_stop`; an engine failure ends with `error` instead.",
			required: ["type"],
			properties: { type: { type: "string", enum: EVENTS } },
			additionalProperties: true,
		},
		TokenCount: obj({ input_tokens: int }),
		ResponseInputTokens: obj({ object: { const: "response.input_tokens" }, input_tokens: int }),
	};
}
