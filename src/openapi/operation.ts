/**
 * One OpenAPI operation from a short description: its security, body, success answer and the
 * error statuses it adds to its guard's (error-responses.ts), each error the shared error object.
 */
import type { z } from "zod";
import {
	ADMIN_GUARD,
	ANTHROPIC_STATUSES,
	anthropicErrorResponseRef,
	type ErrorStatus,
	errorResponseRef,
	headerRef,
	V1_GUARD,
} from "./error-responses";
import { fromZod } from "./request-schemas";

type Json = Record<string, unknown>;

const schemaRef = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const REQUEST_ID = { "x-request-id": headerRef("RequestId") };

export interface Operation {
	tag: string;
	summary: string;
	description?: string;
	security: "key" | "admin" | "none";
	body?: string;
	parameters?: Json[];
	/** The success status (default 200) and its answer. */
	status?: number;
	json?: string;
	/** A `text/event-stream` answer when `stream: true`: the schema of one frame. */
	events?: string;
	/** Another media type: [type, schema]. */
	media?: [string, Json];
	successDescription: string;
	headers?: Record<string, Json>;
	errors?: ErrorStatus[];
	/** The Messages lane: every error in Anthropic's shape, with its statuses (529 included). */
	anthropicErrors?: boolean;
}

export function operation(o: Operation): Json {
	const content: Json = {};
	if (o.json) content["application/json"] = { schema: schemaRef(o.json) };
	if (o.events) content["text/event-stream"] = { schema: schemaRef(o.events) };
	if (o.media) content[o.media[0]] = { schema: o.media[1] };
	const guard = o.security === "key" ? V1_GUARD : o.security === "admin" ? ADMIN_GUARD : [];
	const errors = [...new Set([...guard, ...(o.errors ?? [])])].sort((a, b) => String(a).localeCompare(String(b)));
	const responses: Json = {
		[String(o.status ?? 200)]: { description: o.successDescription, headers: o.headers ?? REQUEST_ID, content },
	};
	if (o.anthropicErrors) for (const status of ANTHROPIC_STATUSES) responses[String(status)] = anthropicErrorResponseRef(status);
	else for (const status of errors) responses[String(status)] = errorResponseRef(status);
	const out: Json = { tags: [o.tag], summary: o.summary };
	if (o.description) out.description = o.description;
	out.security = o.security === "key" ? [{ apiKey: [] }] : o.security === "admin" ? [{ adminToken: [] }] : [];
	if (o.parameters) out.parameters = o.parameters;
	if (o.body) {
		out.requestBody = { required: true, content: { "application/json": { schema: schemaRef(o.body) } } };
	}
	out.responses = responses;
	return out;
}

export function pathParam(name: string, description: string): Json {
	return { name, in: "path", required: true, description, schema: { type: "string" } };
}

export function query(name: string, description: string, schema: Json = { type: "string" }): Json {
	return { name, in: "query", required: false, description, schema };
}

/** A zod object schema's properties as query parameters. */
export function queryFromZod(schema: z.ZodObject): Json[] {
	const json = fromZod(schema);
	const required = new Set((json.required as string[] | undefined) ?? []);
	return Object.entries(json.properties as Record<string, Json>).map(([name, prop]) => {
		const { description, ...rest } = prop;
		const param: Json = { name, in: "query", required: required.has(name), schema: rest };
		if (typeof description === "string") param.description = description;
		return param;
	});
}
