// Stopping a process group and everything in it: `wrangler dev` runs as npm → sh → node →
// workerd (and esbuild), and a signal to the first of them alone leaves the rest running with the
// port bound. Used by dev/gateway-process.mjs (close) and dev/group-watchdog.mjs (parent gone).
import { existsSync, readdirSync, readFileSync } from "node:fs";

/**
 * Live (not zombie) members of process group `pgid`: read from /proc where there is one, else
 * from whether the group still takes a signal.
 * @param {number} pgid
 * @returns {boolean}
 */
export function groupAlive(pgid) {
	let entries;
	try {
		entries = readdirSync("/proc");
	} catch {
		return signalGroup(pgid, 0);
	}
	for (const entry of entries) {
		if (!/^\d+$/.test(entry)) continue;
		let stat;
		try {
			stat = readFileSync(`/proc/${entry}/stat`, "utf8");
		} catch {
			continue; // exited while we looked
		}
		// pid (comm) state ppid pgrp …: comm may hold spaces and parentheses, so split after the last ")".
		const [state, , pgrp] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
		if (Number(pgrp) === pgid && state !== "Z" && state !== "X") return true;
	}
	return false;
}

/** Sends `signal` to the whole group; false when no process of it is left. */
export function signalGroup(pgid, signal) {
	try {
		process.kill(-pgid, signal);
		return true;
	} catch (err) {
		return err?.code === "EPERM";
	}
}

const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * SIGTERM to the group, SIGKILL to whatever is left after `graceMs` (wrangler's own signal
 * handler may exit before workerd does, or workerd may not exit at all), and resolves once no
 * process of the group is left, or after `graceMs + killWaitMs` whatever happened (false then).
 * @param {number} pgid
 * @param {{ graceMs?: number, killWaitMs?: number }} [options]
 * @returns {Promise<boolean>}
 */
export async function stopGroup(pgid, { graceMs = 5000, killWaitMs = 5000 } = {}) {
	const start = Date.now();
	if (!signalGroup(pgid, "SIGTERM")) return true;
	let killed = false;
	while (groupAlive(pgid)) {
		const elapsed = Date.now() - start;
		if (elapsed > graceMs + killWaitMs) return false;
		if (!killed && elapsed > graceMs) {
			killed = true;
			signalGroup(pgid, "SIGKILL");
		}
		await pause(50);
	}
	return true;
}

/** `pid`'s parent and start time (clock ticks since boot) from /proc, or null when it is gone. */
function procInfo(pid) {
	try {
		const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
		const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
		// fields[0] is field 3 (state); ppid is field 4, starttime field 22.
		if (fields[0] === "Z" || fields[0] === "X") return null;
		return { ppid: Number(fields[1]), start: fields[19] };
	} catch {
		return null;
	}
}

function commandLine(pid) {
	try {
		return readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ");
	} catch {
		return "";
	}
}

/**
 * Calls `onGone` once this process's parent is gone, and, when npm started it, once any process
 * between it and npm, or npm itself, is gone. npm passes SIGINT and SIGTERM on to the shell it runs
 * a script in (`npm start` is `exec node dev/start.mjs`, so that shell is this process), but not
 * SIGHUP, and a SIGKILL to npm reaches nothing else: either leaves this process running without
 * it. Polled every `intervalMs`; a pid reused by another
 * process counts as gone. Where there is no /proc, only the parent is watched (through `process.ppid`).
 * @param {() => void} onGone
 * @param {{ intervalMs?: number }} [options]
 */
export function watchAncestors(onGone, { intervalMs = 250 } = {}) {
	const watched = [];
	let pid = process.ppid;
	for (let depth = 0; depth < 4 && pid > 1; depth++) {
		const info = procInfo(pid);
		if (!info) break;
		watched.push({ pid, start: info.start });
		// Only npm's own chain is walked: without npm, the parent is enough.
		if (!process.env.npm_lifecycle_event || /\bnpm\b|npm-cli/.test(commandLine(pid))) break;
		pid = info.ppid;
	}
	const parent = process.ppid;
	const timer = setInterval(() => {
		const gone = existsSync("/proc") ? watched.some((w) => procInfo(w.pid)?.start !== w.start) : process.ppid !== parent;
		if (gone) {
			clearInterval(timer);
			onGone();
		}
	}, intervalMs);
	timer.unref();
	return () => clearInterval(timer);
}
