// Integration workload for Deno: denoCrunch (line 3) is where the time goes.

function denoCrunch(n) {
  let s = 0;
  for (let i = 0; i < n; i++) s += Math.sqrt(i) * Math.cos(i);
  return s;
}

function tick() {
  denoCrunch(300000);
  setTimeout(tick, 1);
}

// The hot loop starts once the agent is profiling: V8 keeps the positions
// of inlined frames only in code compiled while a profiler runs.
setTimeout(tick, 5000);
