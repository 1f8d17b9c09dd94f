import { app } from "./app";

export { KeyLedger } from "./ledger/key-ledger";
export { ResponseStore } from "./responses/response-store";

export default {
	fetch: app.fetch,
} satisfies ExportedHandler<Env>;
