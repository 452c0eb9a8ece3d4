// A Node app with many compiled functions, for the pause budget test: V8
// catalogues every compiled function when a CPU profiler starts, so
// Profiler.start stalls this app's thread in proportion to FUNCS (about
// 50-80 ms at 20,000 on the test machines; PROTOCOLS.md).
//
//   FUNCS=30000 node --inspect=127.0.0.1:0 node-many.js
//
// The functions are one generated script (run with vm, so they have script
// positions like real code); each is called once, so each has bytecode.
// Then a few of them are called every 10 ms, in turn, so CPU windows have
// samples (a few distinct functions a tick keep Profiler.stop's profile,
// and so its stall, small).
'use strict';
const vm = require('node:vm');

const FUNCS = parseInt(process.env.FUNCS || '200', 10);

function generate(n) {
  const parts = [];
  for (let i = 0; i < n; i++) {
    parts.push(`function fn_${i}(x) { let s = x ^ ${i}; for (let k = 0; k < 3; k++) s = (s * 31 + k + ${i % 97}) | 0; return s; }`);
  }
  parts.push(`[${Array.from({ length: n }, (_, i) => `fn_${i}`).join(',')}]`);
  return parts.join('\n');
}

const fns = vm.runInThisContext(generate(FUNCS), { filename: 'generated-functions.js' });
let acc = 0;
for (const f of fns) acc ^= f(acc);

let next = 0;
function tick() {
  for (let i = 0; i < 5; i++) {
    acc ^= fns[next](acc);
    next = (next + 1) % fns.length;
  }
}
// STALLS_FILE: the app's own event-loop clock. Each tick later than 40 ms
// past its 10 ms due time appends "<Date.now() ms> <stall ms>" to it (the
// warm windows test counts stalls). NO_CONSOLE_PROFILE: console.profile
// replaced by a no-op, as an app's logger might (warm windows refused).
const stallsFile = process.env.STALLS_FILE;
const fs = require('node:fs');
let last = performance.now();
if (process.env.NO_CONSOLE_PROFILE) console.profile = console.profileEnd = () => {};
setInterval(() => {
  const now = performance.now();
  if (stallsFile && now - last - 10 > 40) fs.appendFileSync(stallsFile, `${Date.now()} ${Math.round(now - last - 10)}\n`);
  last = now;
  tick();
}, 10);
process.stdout.write(`ready ${fns.length} ${acc & 1}\n`);
