// CPU accounting of another process from /proc: utime+stime of /proc/<pid>/stat (all
// threads, clock ticks), and the per-thread schedstat run time (ns) as a finer cross-check.
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";

let ticksPerSecond = 100;
try {
	ticksPerSecond = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;
} catch {
	// 100 is USER_HZ on every Linux this runs on
}

/** CPU time (user + system) the process has used so far, in ms, from /proc/<pid>/stat. */
export function statCpuMs(pid) {
	const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
	const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
	// fields[0] is field 3 (state): utime is field 14, stime field 15.
	return ((Number(fields[11]) + Number(fields[12])) * 1000) / ticksPerSecond;
}

/** Sum of the live threads' on-CPU time, in ms (ns precision). */
export function schedCpuMs(pid) {
	let ns = 0;
	for (const tid of readdirSync(`/proc/${pid}/task`)) {
		try {
			ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, "utf8").split(" ")[0]);
		} catch {
			// thread gone
		}
	}
	return ns / 1e6;
}

export function cpuSample(pids) {
	const out = {};
	for (const [name, pid] of Object.entries(pids)) out[name] = { stat: statCpuMs(pid), sched: schedCpuMs(pid) };
	return out;
}

/** CPU used between two samples, per process, in ms. */
export function cpuDelta(before, after) {
	const out = {};
	for (const name of Object.keys(after)) {
		out[name] = { stat: after[name].stat - before[name].stat, sched: after[name].sched - before[name].sched };
	}
	return out;
}

export const clockTicksPerSecond = ticksPerSecond;
