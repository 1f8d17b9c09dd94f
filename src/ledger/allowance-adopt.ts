/**
 * Requests served from an allowance that are still running near its expiry: each moves its hold
 * into the ledger (adopt) so it stays covered like any held request (docs/allowances.md). The
 * timer belongs to the request that took from the allowance, never to another one.
 */
import { adoptAt, adoptLeadMs, type LocalAllowance } from "./allowance";
import type { KeyLedger } from "./durable/key-ledger";

export type Stub = () => DurableObjectStub<KeyLedger>;

/** A request's take from its isolate's allowance, kept on its RequestContext (never shared). */
export interface AllowanceTicket {
	payerKeyId: string;
	requestId: string;
	allowanceId: string;
	hold: number;
	/** The hold moved into the ledger (the request outlived its allowance): settlement gives nothing back. */
	adopted: boolean;
	/** Settlement has been accounted for. */
	done: boolean;
	timer?: ReturnType<typeof setTimeout>;
	adopting?: Promise<void>;
}

/**
 * A request still running near its allowance's expiry moves its hold into the ledger (adopt), so
 * it stays covered like any held request; a refill that extended the allowance meanwhile moves
 * the moment later.
 */
export function scheduleAdopt(
	ledger: Stub,
	ticket: AllowanceTicket,
	a: LocalAllowance,
	now: number,
	current: () => LocalAllowance | undefined,
	onAdopted: (ticket: AllowanceTicket) => void,
): void {
	const arm = (at: number, from: number) => {
		ticket.timer = setTimeout(
			() => {
				ticket.timer = undefined;
				if (ticket.done || ticket.adopted) return;
				const live = current();
				const t = Date.now();
				if (live?.id === ticket.allowanceId && adoptAt(live) - t > adoptLeadMs(live.ttlMs)) {
					arm(adoptAt(live), t);
					return;
				}
				ticket.adopting ??= adopt(ledger, ticket, 2, onAdopted);
			},
			Math.max(0, at - from),
		);
	};
	arm(adoptAt(a), now);
}

/** Adopts now (the request's keep-alive calls this when the timer could not); retried once. */
export function adoptNow(ledger: Stub, ticket: AllowanceTicket, onAdopted: (ticket: AllowanceTicket) => void): Promise<void> {
	ticket.adopting ??= adopt(ledger, ticket, 2, onAdopted);
	return ticket.adopting;
}

async function adopt(
	ledger: Stub,
	ticket: AllowanceTicket,
	attempts: number,
	onAdopted: (ticket: AllowanceTicket) => void,
): Promise<void> {
	for (let i = 0; i < attempts && !ticket.done; i++) {
		try {
			const r = await ledger().adopt({
				allowanceId: ticket.allowanceId,
				requestId: ticket.requestId,
				holdNanos: ticket.hold,
			});
			if (r.adopted && !ticket.adopted) {
				ticket.adopted = true;
				onAdopted(ticket);
			}
			return;
		} catch (err) {
			console.warn(`adopting the hold of ${ticket.requestId} failed (attempt ${i + 1})`, err);
		}
	}
	// Not adopted: the next keep-alive tries again.
	ticket.adopting = undefined;
}

/** Before the settlement call: no adoption starts any more, and one under way finishes first. */
export async function beforeSettle(ticket: AllowanceTicket): Promise<void> {
	if (ticket.timer !== undefined) clearTimeout(ticket.timer);
	ticket.timer = undefined;
	if (ticket.adopting) await ticket.adopting.catch(() => undefined);
}
