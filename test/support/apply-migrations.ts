import { applyD1Migrations, env } from "cloudflare:test";

// Storage is isolated per test file; migrations run before each file.
await applyD1Migrations(env.DB, env.TEST_MIGRATIONS);
