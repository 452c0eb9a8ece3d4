// Integration workload for Deno: denoCrunch (line 3) is where the time goes.

function denoCrunch(n) {
  let s = 0;
  for (let i = 0; i < n; i++) s += Math.sqrt(i) * Math.cos(i);
  // Its own timer callback: no JS caller for V8 to inline it into, so its
  // samples are its own whenever its code was compiled (under load the
  // first windows can start after the loop was optimized).
  setTimeout(denoCrunch, 1, n);
  return s;
}

// The hot loop starts once the agent is likely profiling.
setTimeout(denoCrunch, 5000, 300000);
