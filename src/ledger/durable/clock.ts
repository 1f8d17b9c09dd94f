/**
 * The time the ledger's calls stamp: holds, settlements, credits, grants, adoptions, revocations
 * and expiry read it (the alarm's schedule reads the real clock). Tests move it through
 * test/support/clock.ts to place a call at a time of their choosing without touching the clock
 * the rest of the isolate (other Durable Objects, their alarms) runs on.
 */
export const ledgerClock = { now: (): number => Date.now() };
