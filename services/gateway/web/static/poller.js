// Runs a task now and then every `intervalMs`, but only while the page is shown.
// Hidden tab (visibilitychange) or leaving the page (pagehide) stops it; showing
// the page again runs the task at once and resumes. Runs never overlap.

export function visiblePoller(task, intervalMs) {
  let timer = null;
  let running = false;
  let active = false;
  let stopped = false;

  async function tick() {
    timer = null;
    if (!active || running) return;
    running = true;
    try {
      await task();
    } catch (error) {
      console.error(error);
    } finally {
      running = false;
      if (active) timer = setTimeout(tick, intervalMs);
    }
  }

  function resume() {
    if (stopped || active || document.visibilityState !== "visible") return;
    active = true;
    tick();
  }

  function pause() {
    active = false;
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
