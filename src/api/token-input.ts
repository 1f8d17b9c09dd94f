/** The body of `POST /v1/tokens` (routes/tokens.ts), also in the OpenAPI document. */
import { z } from "zod";
import { AllowedModels, AllowedOrigins, KeyName, TokenCap } from "../auth/scope-fields";
import { SpendLimitUsd } from "../money/usd";

export const MAX_TOKEN_TTL_S = 3600;
/**
 * The name of a token minted without one. Neutral: the token goes to a browser (which reads it on
 * `/v1/key`), so it must not carry the operator's name for the parent key, and it is well within
 * the 200-character name limit.
 */
export const DEFAULT_TOKEN_NAME = "temporary token";

export const MintToken = z.strictObject({
	ttl_seconds: z.number().int().min(1).max(MAX_TOKEN_TTL_S).default(600),
	allowed_origins: AllowedOrigins,
	allowed_models: AllowedModels.optional(),
	spend_limit_usd: SpendLimitUsd.optional(),
	rpm: TokenCap.optional(),
	tpm: TokenCap.optional(),
	max_tokens: TokenCap.optional(),
	max_concurrent: TokenCap.optional(),
	name: KeyName.optional(),
});
