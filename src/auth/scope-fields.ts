/** zod schemas for the scope fields shared by `POST/PATCH /admin/keys` and `POST /v1/tokens`. */
import { z } from "zod";
import type { GatewayConfig } from "../config";
import { GatewayError } from "../errors";
import { ORIGIN_PATTERN } from "./scopes";

export const OriginSchema = z
	.string()
	.regex(
		ORIGIN_PATTERN,
		"must be an origin such as 'https://app.example.com' (scheme, host, optional port, no path) or 'https://*.example.com'",
	)
	.transform((s) => s.toLowerCase());

export const AllowedOrigins = z.array(OriginSchema).min(1);
export const AllowedModels = z.array(z.string().min(1)).min(1);

/**
 * Control characters (C0, DEL, C1), line/paragraph separators, and lone UTF-16 surrogates: with the
 * `u` flag a surrogate pair is one code point, so only an unpaired half matches `\p{Cs}`. D1 stores
 * text as UTF-8, where a lone surrogate has no encoding and comes back as U+FFFD.
 */
const NOT_ONE_LINE = /[\p{Cc}\p{Cs}\u2028\u2029]/u;
/**
 * Invisible formatting: bidirectional embeddings, overrides and isolates (U+202A–U+202E,
 * U+2066–U+2069, U+200E/U+200F, U+061C), which can make an id or a warning shown next to the name
 * read backwards, and zero-width characters (U+200B–U+200D, U+2060, U+FEFF), which make two names
 * that look the same differ.
 */
const INVISIBLE = /[\u061c\u200b-\u200f\u202a-\u202e\u2060\u2066-\u2069\ufeff]/u;

/** A key's or token's name: one line of well-formed, visible text, 1–200 UTF-16 units. */
export const KeyName = z
	.string()
	.min(1)
	.max(200)
	.refine((s) => !NOT_ONE_LINE.test(s), "must be one line of text: no control characters, line breaks or unpaired surrogates")
	.refine(
		(s) => !INVISIBLE.test(s),
		"must not contain invisible formatting characters (bidirectional controls, zero-width characters)",
	);

/** The largest rpm, tpm or max_tokens a key or token may have: far above any real limit, far below 2^53. */
export const MAX_TOKEN_CAP = 1_000_000_000;
/** A request or token cap (rpm, tpm, max_tokens): a positive integer up to MAX_TOKEN_CAP. */
export const TokenCap = z.number().int().positive().max(MAX_TOKEN_CAP, `must be a positive integer of at most ${MAX_TOKEN_CAP}`);

/** Every model id must be in the catalog (the `:online` suffix is a request option, not a model). */
export function assertCatalogModels(config: GatewayConfig, models: readonly string[] | null | undefined, param: string): void {
	if (!models) return;
	models.forEach((id, i) => {
		if (!config.models.some((m) => m.id === id)) {
			throw new GatewayError("invalid_request", `Invalid value for '${param}[${i}]': no model '${id}' in the catalog.`, {
				param: `${param}[${i}]`,
			});
		}
	});
}
