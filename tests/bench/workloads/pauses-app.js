// The target of the pauses section: an app with FUNCS distinct compiled
// functions and an event-loop stall detector.
//
//   FUNCS=20000 node --inspect=127.0.0.1:0 pauses-app.js
//
// FUNCS functions are generated as one source file (so they have script
// positions like real code), each is called at least once (lazy
// compilation gives each one bytecode) and WARM of them are called often
// enough to be optimized. While running, every tick calls a rotating
// slice of them, so a CPU profile taken here has many distinct nodes.
//
// The detector is a 1 ms interval timer. Each tick records the gap between
// the end of the previous tick and the start of this one (its own work is
// excluded), in a ring of the last RING ticks, on CLOCK_MONOTONIC
// (process.hrtime), which is the same clock in every process of the
// machine, so the bench can line gaps up with the CDP calls it sent.
//
// LIVE_MIB=N keeps about N MiB of live heap before it says ready, in the
// shape of a real leak: a module-level Map of session records, each with a
// few strings, a small array and a nested object (about 12 heap objects
// and 1 KiB a record), so a heap snapshot of it has millions of nodes.
//
// stdin commands (one a line), answers one JSON line on stdout each:
//   q <id> <from_ms> <to_ms>  the longest gap overlapping [from, to] and the
//                             gaps over 2 ms in it ({id, max, at, n, big})
//   clock                     {mono, wall}: the monotonic and wall clocks now
//   mem                       process.memoryUsage()
// PEER=<dir of node_modules> and PEER_URL start @pyroscope/nodejs in this
// process (flush every PEER_FLUSH_MS); each flush is reported as a line
// {peer_flush: [t0, t1]} (the synchronous profile() calls at the flush).
'use strict';
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const FUNCS = parseInt(process.env.FUNCS || '200', 10);
const WARM = Math.min(FUNCS, parseInt(process.env.WARM || String(Math.ceil(FUNCS / 10)), 10));
const SLICE = parseInt(process.env.SLICE || '40', 10);

const mono = () => { const [s, ns] = process.hrtime(); return s * 1e3 + ns / 1e6; };

// --- the generated functions --------------------------------------------

function generate(n) {
  const ops = ['+', '^', '|', '-'];
  const lines = ['\'use strict\';', 'const fns = new Array(' + n + ');'];
  for (let i = 0; i < n; i++) {
    // Distinct bodies (constants and shapes differ) so nothing is shared.
    const a = (i * 2654435761) % 1000 + 1, b = i % 31 + 1, op = ops[i % ops.length];
    const body = i % 3 === 0
      ? `let s = x ${op} ${a}; for (let k = 0; k < ${b % 4 + 1}; k++) s = (s * ${b} + k) | 0; return s;`
      : i % 3 === 1
        ? `const o = { v: x, w: ${a} }; return (o.v ${op} o.w) + ${b};`
        : `return ((x << ${b % 5}) ${op} ${a}) >>> 0;`;
    lines.push(`fns[${i}] = function fn_${i}_${a}(x) { ${body} };`);
  }
  lines.push('module.exports = fns;');
  return lines.join('\n') + '\n';
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'isoprof-pauses-app-'));
const file = path.join(dir, `generated_${FUNCS}.js`);
fs.writeFileSync(file, generate(FUNCS));
const fns = require(file);
fs.rmSync(dir, { recursive: true, force: true });
process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));

let sink = 0;
for (let i = 0; i < FUNCS; i++) sink = (sink + fns[i](i)) | 0;        // compile each
for (let r = 0; r < 2000; r++) for (let i = 0; i < WARM; i++) sink = (sink + fns[i](r)) | 0; // warm some

// --- the live heap (LIVE_MIB) ---------------------------------------------

const registry = new Map();
const LIVE = parseFloat(process.env.LIVE_MIB || '0') * 1048576;
if (LIVE > 0) {
  const base = process.memoryUsage().heapUsed;
  for (let i = 0; ; i++) {
    if (i % 1000 === 0 && process.memoryUsage().heapUsed - base >= LIVE) break;
    registry.set(`session-${i}`, {
      id: i,
      user: `user-${i % 5000}@example.test`,
      path: `/api/v1/items/${i}/details`,
      tags: [`t${i % 7}`, `t${i % 11}`, `t${i % 13}`],
      samples: Array.from({ length: 24 }, (_, k) => (i * 31 + k) % 1000),
      meta: { created: 1700000000000 + i, hits: i % 97, agent: `client/${i % 50}` },
    });
  }
}

// --- the stall detector -------------------------------------------------

const RING = 1 << 19; // ~520 s of 1 ms ticks (the bench asks for a whole budget run)
const ringEnd = new Float64Array(RING);   // when the previous tick ended
const ringStart = new Float64Array(RING); // when this tick started
let ticks = 0;
let lastEnd = mono();
let cursor = 0;

setInterval(() => {
  const t = mono();
  const k = ticks++ & (RING - 1);
  ringEnd[k] = lastEnd;
  ringStart[k] = t;
  for (let j = 0; j < SLICE; j++) { sink = (sink + fns[cursor](j)) | 0; cursor = (cursor + 1) % FUNCS; }
  lastEnd = mono();
}, 1);

function query(from, to) {
  let max = 0, at = 0, n = 0;
  const big = [];
  const lo = Math.max(0, ticks - RING);
  for (let i = ticks - 1; i >= lo; i--) {
    const k = i & (RING - 1);
    if (ringStart[k] < from) break;           // ticks are in order: all earlier ones end before from
    if (ringEnd[k] > to) continue;
    n++;
    const g = ringStart[k] - ringEnd[k];
    if (g > max) { max = g; at = ringEnd[k]; }
    if (g > 2) big.push([+ringEnd[k].toFixed(3), +g.toFixed(3)]);
  }
  // A gap still open (no tick since it began) counts up to now.
  const now = mono();
  if (lastEnd < to && now - lastEnd > max) { max = now - lastEnd; at = lastEnd; }
  // The ring covers from the end of the tick before its oldest entry (the
  // detector's start until it wraps): the oldest gap begins there. Its
  // start time would not do, as the app says ready before its first tick.
  return { max, at, n, big: big.reverse(), oldest: ticks ? ringEnd[lo & (RING - 1)] : lastEnd };
}

let buf = '';
process.stdin.on('data', (d) => {
  buf += d;
  let i;
  while ((i = buf.indexOf('\n')) >= 0) {
    const w = buf.slice(0, i).trim().split(/\s+/);
    buf = buf.slice(i + 1);
    let out;
    if (w[0] === 'q') out = { id: w[1], ...query(Number(w[2]), Number(w[3])) };
    else if (w[0] === 'clock') out = { mono: mono(), wall: Date.now() };
    else if (w[0] === 'mem') out = { ...process.memoryUsage(), live: registry.size }; // (this keeps the registry alive)
    else out = { error: 'unknown command ' + w[0] };
    process.stdout.write(JSON.stringify(out) + '\n');
  }
});

// --- the in-process peer, for comparison -------------------------------

if (process.env.PEER) {
  const base = path.join(process.env.PEER, '@pyroscope', 'nodejs', 'dist', 'cjs');
  const Pyroscope = require(path.join(base, 'index.js')).default;
  const holder = require(path.join(base, 'utils', 'pyroscope-profiler.js'));
  Pyroscope.init({
    serverAddress: process.env.PEER_URL,
    appName: 'pauses-app',
    flushIntervalMs: parseInt(process.env.PEER_FLUSH_MS || '10000', 10),
  });
  Pyroscope.start();
  // A flush calls profile() on the wall and the heap profiler (the wall
  // profiler stops and restarts V8's CPU profiler there), then exports.
  const p = holder.getProfiler();
  for (const cp of [p.wallProfiler, p.heapProfiler]) {
    const inner = cp.profiler;
    const orig = inner.profile.bind(inner);
    const kind = cp === p.wallProfiler ? 'wall' : 'heap';
    inner.profile = () => {
      const t0 = mono();
      const r = orig();
      process.stdout.write(JSON.stringify({ peer_flush: kind, t0, t1: mono() }) + '\n');
      return r;
    };
  }
}

process.stdout.write(JSON.stringify({ ready: true, funcs: FUNCS, warm: WARM, live: registry.size, sink: sink & 1 }) + '\n');
