// Auto-refresh: a toggle and an interval in the header; while on, the view on screen is reloaded
// every interval (skipped while the tab is hidden or a dialog is open), each reload awaited before
// the next is timed, so a slow gateway never gets overlapping reloads.

const $ = (id) => document.getElementById(id);

let timer = null;
let reload = async () => {};
let say = () => {};

function schedule() {
	clearTimeout(timer);
	timer = null;
	if (!$("auto-refresh").checked) return;
	const seconds = Number($("auto-interval").value) || 30;
	timer = setTimeout(async () => {
		if (!document.hidden) {
			try {
				await reload();
			} catch (err) {
				say(`Auto-refresh failed: ${err.message}`, "error");
			}
		}
		schedule();
	}, seconds * 1000);
}

/** Stops refreshing and turns the toggle off (on log out). */
export function stopAutoRefresh() {
	clearTimeout(timer);
	timer = null;
	$("auto-refresh").checked = false;
}

export function initAutoRefresh(reloadView, sayFn) {
	reload = reloadView;
	say = sayFn;
	$("auto-refresh").addEventListener("change", schedule);
	$("auto-interval").addEventListener("change", schedule);
}
