// A light, steady app with many compiled functions, the same source for
// Node and Deno (bench_warm_memory.js runs it in both):
//
//   node --inspect=127.0.0.1:0 many-light.js [FUNCS]
//   deno run --inspect=127.0.0.1:PORT many-light.js [FUNCS]
//
// FUNCS (20,000 by default) functions are one generated script, compiled
// by an indirect eval (so they have script positions, as real code does)
// and each called once, so each has bytecode. Then every 10 ms a timer
// calls 5 of them in turn and keeps the last 256 results in a small ring
// of short strings, so the heap sees a little steady garbage as a service
// would. Nothing here grows: what grows the process is not the app.
'use strict';
const isDeno = typeof Deno !== 'undefined';
const args = isDeno ? Deno.args : process.argv.slice(2);
const FUNCS = parseInt(args[0] || '20000', 10);

function generate(n) {
  const parts = ['(function () {'];
  for (let i = 0; i < n; i++) {
    parts.push(`function fn_${i}(x) { let s = x ^ ${i}; for (let k = 0; k < 3; k++) s = (s * 31 + k + ${i % 97}) | 0; return s; }`);
  }
  parts.push(`return [${Array.from({ length: n }, (_, i) => `fn_${i}`).join(',')}];`, '})()');
  return parts.join('\n');
}

const fns = (0, eval)(generate(FUNCS));
let acc = 0;
for (const f of fns) acc ^= f(acc);

const ring = new Array(256).fill('');
let next = 0;
let slot = 0;
setInterval(() => {
  for (let i = 0; i < 5; i++) {
    acc ^= fns[next](acc);
    next = (next + 1) % fns.length;
  }
  ring[slot] = `tick ${next} ${acc}`;
  slot = (slot + 1) % ring.length;
}, 10);
