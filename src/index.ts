import { app } from "./app";

export { KeyLedger } from "./ledger/key-ledger";

export default {
	fetch: app.fetch,
} satisfies ExportedHandler<Env>;
