import { app } from "./app";
import { scheduled } from "./maintenance/scheduled";

export { BatchDispatcher } from "./batches/dispatcher";
export { KeyLedger } from "./ledger/durable/key-ledger";
export { ResponseStore } from "./responses/response-store";
export { NodeHealth } from "./routing/node-health";

export default {
	fetch: app.fetch,
	scheduled,
} satisfies ExportedHandler<Env>;
