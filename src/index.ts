import { app } from "./app";

export { KeyLedger } from "./ledger/key-ledger";
export { ResponseStore } from "./responses/response-store";
export { NodeHealth } from "./routing/node-health";

export default {
	fetch: app.fetch,
} satisfies ExportedHandler<Env>;
