/** The body of `POST /v1/batches`, shared by its route and the OpenAPI document. */
import { z } from "zod";
import { BATCH_ENDPOINTS } from "../batches/input";

export const CreateBatchSchema = z.strictObject({
	input_file_id: z.string().min(1).describe("A file of the calling key with purpose `batch` (`POST /v1/files`)."),
	endpoint: z.enum(BATCH_ENDPOINTS).describe("The endpoint every line calls; each line's `url` must be it."),
	completion_window: z.literal("24h"),
	/** As OpenAI: at most 16 pairs, keys up to 64 characters, values up to 512. */
	metadata: z
		.record(z.string().max(64), z.string().max(512))
		.refine((m) => Object.keys(m).length <= 16, "metadata holds at most 16 pairs.")
		.nullable()
		.optional(),
	/** Accepted for the SDK's sake; files follow `batches.retention_days`. */
	output_expires_after: z.unknown().optional(),
});
