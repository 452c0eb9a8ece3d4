// A light Node workload for the fault tests: a little work every 10 ms, so
// CPU windows have samples without taking a core from the rest of the run.
'use strict';
function lightTick() {
  let s = 0;
  for (let i = 0; i < 20000; i++) s += i % 7;
  return s;
}
setInterval(lightTick, 10);
