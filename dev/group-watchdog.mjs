// `node dev/group-watchdog.mjs <pgid>`: stops process group <pgid> once the process that started
// this one is gone, however it went (Ctrl-C, an uncaught error, SIGKILL, a closed terminal). Its
// stdin is a pipe from that parent: the pipe closes when the parent dies, whatever killed it.
// dev/gateway-process.mjs starts one beside each `wrangler dev`; it runs in a group of its own so a
// signal to the gateway's group or the terminal's leaves it alive to finish the job, and exits by
// itself once the group is gone.
import { groupAlive, stopGroup } from "./process-group.mjs";

const pgid = Number(process.argv[2]);
if (!Number.isInteger(pgid) || pgid <= 1) {
	console.error("usage: node dev/group-watchdog.mjs <process group id>");
	process.exit(2);
}

// Ctrl-C and a terminal hang-up are for the parent: this process acts when the parent is gone.
for (const signal of ["SIGINT", "SIGHUP"]) process.on(signal, () => {});

let stopping = false;
async function parentGone() {
	if (stopping) return;
	stopping = true;
	await stopGroup(pgid, { graceMs: 2000 });
	process.exit(0);
}

process.stdin.on("end", parentGone);
process.stdin.on("close", parentGone);
process.stdin.on("error", parentGone);
process.stdin.resume();

// Nothing left to watch (the parent stopped the group itself): done.
setInterval(() => {
	if (!stopping && !groupAlive(pgid)) process.exit(0);
}, 1000);
