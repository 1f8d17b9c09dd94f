/** The body of `PATCH /admin/nodes` (routes/admin-nodes.ts), also in the OpenAPI document. */
import { z } from "zod";

export const PatchNode = z
	.strictObject({
		url: z.string().min(1),
		/** Only this model's use of the node; without it, every model the node serves. */
		model: z.string().min(1).optional(),
		/** A new weight (0 drains), or null to go back to the configured one. */
		weight: z.number().nonnegative().max(1_000_000).nullable().optional(),
		/** true: no new traffic; false: traffic again (at the weight in effect). */
		drain: z.boolean().optional(),
		/** Removes the override altogether. */
		clear: z.literal(true).optional(),
		/**
		 * Traffic again now: undrains the node and ends the cooldown its failures earned (the
		 * answering isolate's; other isolates' end on their own or at its next success there).
		 */
		reenable: z.literal(true).optional(),
	})
	.superRefine((v, ctx) => {
		const changes = [v.weight !== undefined, v.drain !== undefined].filter(Boolean).length;
		if (v.clear && changes > 0) {
			ctx.addIssue({ code: "custom", path: ["clear"], message: "'clear' cannot be sent with 'weight' or 'drain'" });
		} else if (v.reenable && v.drain === true) {
			ctx.addIssue({ code: "custom", path: ["reenable"], message: "'reenable' cannot be sent with 'drain': true" });
		} else if (!v.clear && !v.reenable && changes === 0) {
			ctx.addIssue({ code: "custom", path: ["weight"], message: "send 'weight', 'drain', 'clear' or 'reenable'" });
		}
	});
