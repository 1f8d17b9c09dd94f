/**
 * The batch price: a config whose models are priced at their batch multiplier (the model's
 * `pricing.batch_multiplier`, else `batches.price_multiplier`). A batch line runs with it, so its
 * hold and its settlement both come from the one money rule at the batch price, and nothing
 * else in the pipeline knows batches exist.
 */
import type { GatewayConfig, ModelConfig } from "../config";

const priced = new WeakMap<GatewayConfig, GatewayConfig>();

/** A model's batch multiplier. */
export function batchMultiplier(config: GatewayConfig, model: ModelConfig): number {
	return model.pricing.batch_multiplier ?? config.batches.price_multiplier;
}

/** `config` with every model's prices times its batch multiplier (once per config object). */
export function batchPricedConfig(config: GatewayConfig): GatewayConfig {
	let out = priced.get(config);
	if (!out) {
		out = {
			...config,
			models: config.models.map((m) => {
				const k = batchMultiplier(config, m);
				const p = m.pricing;
				return {
					...m,
					pricing: {
						...p,
						input_usd_per_mtok: p.input_usd_per_mtok * k,
						output_usd_per_mtok: p.output_usd_per_mtok * k,
						...(p.cached_input_usd_per_mtok !== undefined ? { cached_input_usd_per_mtok: p.cached_input_usd_per_mtok * k } : {}),
					},
				};
			}),
		};
		priced.set(config, out);
	}
	return out;
}
