import { app } from "./app";
import "./responses/background";

export { KeyLedger } from "./ledger/key-ledger";
export { ResponseStore } from "./responses/response-store";

export default {
	fetch: app.fetch,
} satisfies ExportedHandler<Env>;
