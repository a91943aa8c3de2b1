// Runs a task now and then every `intervalMs`, but only while the page is shown.
// Hidden tab (visibilitychange) or leaving the page (pagehide) stops it; showing
// the page again runs the task at once and resumes. Runs never overlap: a refresh
// asked for during a run runs once more right after it.
//
// The task may answer how long to wait before its next run (a positive number of
// ms), e.g. a shorter delay while what it shows is still moving; any other answer,
// or a failure, waits `intervalMs`.

export function visiblePoller(task, intervalMs) {
  let timer = null;
  let running = false;
  let again = false;
  let active = false;
  let stopped = false;

  function delayOf(answer) {
    return typeof answer === "number" && Number.isFinite(answer) && answer > 0 ? answer : intervalMs;
  }

  async function tick() {
    timer = null;
    if (!active) return;
    if (running) {
      again = true;
      return;
    }
    running = true;
    let delay = intervalMs;
    try {
      delay = delayOf(await task());
    } catch (error) {
      console.error(error);
    } finally {
      running = false;
      if (active) {
        if (again) {
          again = false;
          tick();
        } else {
          timer = setTimeout(tick, delay);
        }
      }
    }
  }

  function resume() {
    if (stopped || active || document.visibilityState !== "visible") return;
    active = true;
    tick();
  }

  function pause() {
    active = false;
    again = false;
    if (timer !== null) clearTimeout(timer);
    timer = null;
  }

  function onVisibility() {
    if (document.visibilityState === "visible") resume();
    else pause();
  }

  function stop() {
    stopped = true;
    pause();
    document.removeEventListener("visibilitychange", onVisibility);
    window.removeEventListener("pagehide", stop);
  }

  document.addEventListener("visibilitychange", onVisibility);
  window.addEventListener("pagehide", stop);
  resume();

  return {
    // Run now (e.g. after the user acted), then keep the usual rhythm.
    refresh() {
      if (!active) return;
      if (timer !== null) clearTimeout(timer);
      tick();
    },
    stop,
  };
}
