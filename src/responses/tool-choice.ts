/**
 * `tool_choice` on the Responses lane: a named choice must name a tool the engine is offered (a
 * 400 on `tool_choice` otherwise), and it goes to the engine, with `parallel_tool_calls`, only
 * beside the tools it chooses from.
 */
import { GatewayError } from "../errors";
import { chatTools, flatName, type ToolParam, WEB_SEARCH_TYPES } from "./tools";

/** A named `tool_choice`: a function (maybe a namespace's) or a custom tool. */
type NamedChoice = { type: string; name: string; namespace?: string };
/** The hosted web search (`{"type": "web_search"}`): served by the gateway, not an engine function. */
type HostedChoice = { type: string; name?: undefined };
type Choice = "none" | "auto" | "required" | NamedChoice | HostedChoice | null | undefined;

/** The engine's name for a named tool_choice: a namespace's function and a custom tool as the engine knows them. */
function choiceName(choice: NamedChoice): string {
	return choice.namespace ? flatName(choice.namespace, choice.name) : choice.name;
}

/** A named tool_choice must name a tool the engine is offered: anything else is the client's 400, not the engine's. */
export function checkToolChoice(tools: ReadonlyArray<ToolParam> | null | undefined, choice: Choice): void {
	if (!choice || typeof choice === "string") return;
	if (choice.name === undefined) {
		// The hosted search must be among the tools (served, or dropped without a backend: then the choice goes too).
		if ((tools ?? []).some((t) => WEB_SEARCH_TYPES.has(t.type))) return;
		throw new GatewayError("invalid_request", `Invalid value for 'tool_choice': no ${choice.type} tool is offered in 'tools'.`, {
			param: "tool_choice",
		});
	}
	const name = choiceName(choice);
	const offered = chatTools(tools ?? []).some((t) => (t.function as { name: string }).name === name);
	if (offered) return;
	const label = choice.namespace ? `${choice.namespace}.${choice.name}` : choice.name;
	throw new GatewayError(
		"invalid_request",
		`Invalid value for 'tool_choice': no ${choice.type} tool named '${label.slice(0, 160)}' is offered in 'tools'.`,
		{ param: "tool_choice" },
	);
}

/**
 * The engine's `tools`, `tool_choice` and `parallel_tool_calls`: none of them when no tool reaches
 * the engine (every tool dropped or served by the gateway), as vLLM refuses a tool_choice without tools.
 */
export function chatToolFields(
	tools: ReadonlyArray<ToolParam> | null | undefined,
	choice: Choice,
	parallel: boolean | null | undefined,
): Record<string, unknown> {
	const chat = chatTools(tools ?? []);
	if (chat.length === 0) return {};
	const out: Record<string, unknown> = { tools: chat };
	if (typeof choice === "string") out.tool_choice = choice;
	// The hosted search is offered, and chosen, by the chat pipeline (chat/search-tool.ts).
	else if (choice && choice.name !== undefined) out.tool_choice = { type: "function", function: { name: choiceName(choice) } };
	if (parallel != null) out.parallel_tool_calls = parallel;
	return out;
}
