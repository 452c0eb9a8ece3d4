// The CLI survives its store: on damaged copies of a store the daemon
// filled (bits flipped in page headers and anywhere in the file,
// truncation), every read command ends by itself with exit 0, 1 or 2 and,
// unless it is 0, one message on stderr; none is killed by a signal, none
// hangs, none leaves a half-written -o FILE behind. A damaged store that
// faults a command is named with a hint at `isoprof store check`.
//
// CI runs ISOPROF_DAMAGE_COPIES copies (default 24: a few seconds). The
// on-demand figure is the same script with more copies, e.g.
//   ISOPROF_DAMAGE_COPIES=150 ISOPROF=build/agent/isoprof ISOPROFD=build/agent/isoprofd \
//     node --test tests/integration/cli-damage.test.js
// which prints one summary line (commands, signals, hangs, exit statuses).
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const L = require('./lib');
const F = require('./fake-inspector');

after(L.cleanup);

const COPIES = Number(process.env.ISOPROF_DAMAGE_COPIES || 24);
// The windows the daemon stores before the copies are made: a store of a
// few dozen pages, so that flips land in branch and leaf pages, overflow
// pages (the profiles) and the indexes alike.
const WINDOWS = Number(process.env.ISOPROF_DAMAGE_WINDOWS || (COPIES > 40 ? 100 : 40));
// A read command on a store of this size takes well under a second; one
// that has not ended in this time hangs.
const HANG_MS = 30000;

let base; // the store the daemon filled
let ps; // its page size
let work; // where the copies go

function pageSize(file) {
  const fd = fs.openSync(file, 'r');
  const b = Buffer.alloc(64);
  fs.readSync(fd, b, 0, 64, 0);
  fs.closeSync(fd);
  assert.strictEqual(b.readUInt32LE(16), 0xbeefc0de, 'an LMDB file');
  return b.readUInt32LE(40);
}

// xorshift32: the same copies on every run.
function prng(seed) {
  let x = seed >>> 0 || 1;
  return (n) => {
    x ^= x << 13; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    return x % n;
  };
}

// Copy i of the base store, damaged one of four ways. Returns {dir, what}.
function damaged(i) {
  const rnd = prng(0x9e3779b9 ^ (i * 2654435761));
  const dir = path.join(work, `copy-${i}`);
  fs.mkdirSync(dir);
  const buf = fs.readFileSync(path.join(base, 'data.mdb'));
  const pages = Math.floor(buf.length / ps);
  const flips = [];
  const flip = (pos) => { const bit = rnd(8); buf[pos] ^= 1 << bit; flips.push(`${pos}:${bit}`); };
  let what;
  let out = buf;
  switch (i % 4) {
    case 0: { // 1-16 bits in the headers of tree pages (page number, flags, bounds)
      const n = 1 + rnd(16);
      for (let k = 0; k < n; k++) flip((2 + rnd(pages - 2)) * ps + rnd(16));
      what = 'page headers';
      break;
    }
    case 1: { // 1-16 bits anywhere past the meta pages
      const n = 1 + rnd(16);
      for (let k = 0; k < n; k++) flip(2 * ps + rnd(buf.length - 2 * ps));
      what = 'anywhere';
      break;
    }
    case 2: { // node headers and offsets: the first 64 bytes and the last 64 of pages
      const n = 1 + rnd(16);
      for (let k = 0; k < n; k++) {
        const p = (2 + rnd(pages - 2)) * ps;
        flip(rnd(2) ? p + rnd(64) : p + ps - 1 - rnd(64));
      }
      what = 'node headers';
      break;
    }
    default: { // cut short: at a page boundary or inside a page, past the metas
      const at = 2 * ps + rnd(buf.length - 2 * ps);
      out = buf.subarray(0, rnd(2) ? at - (at % ps) : at);
      what = `truncated to ${out.length}`;
      break;
    }
  }
  fs.writeFileSync(path.join(dir, 'data.mdb'), out);
  return { dir, what: flips.length ? `${what} ${flips.join(' ')}` : what };
}

// The read commands, as a person runs them. OUT is replaced by a file
// under the copy's directory.
const COMMANDS = [
  ['windows'],
  ['windows', '--json'],
  ['export', '--type', 'cpu', '-o', 'OUT'],
  ['export', '--type', 'heap', '-o', 'OUT'],
  ['top', '--type', 'cpu'],
  ['anomalies'],
  ['flamegraph', '--type', 'cpu', '-o', 'OUT'],
];

function run(args, dir) {
  const out = path.join(dir, 'out');
  const argv = [...args.map((a) => (a === 'OUT' ? out : a)), '--store', dir];
  const r = spawnSync(L.ISOPROF, argv, { encoding: 'utf8', timeout: HANG_MS, killSignal: 'SIGKILL', maxBuffer: 64 << 20 });
  const hung = r.error && r.error.code === 'ETIMEDOUT';
  if (r.error && !hung) throw r.error;
  L.assertNoSanitizer(r.stderr, 'isoprof');
  let leftover = false;
  if (args.includes('OUT')) {
    leftover = r.status !== 0 && fs.existsSync(out);
    fs.rmSync(out, { force: true });
  }
  return { argv, status: r.status, signal: hung ? null : r.signal, hung, stderr: r.stderr || '', leftover };
}

before(async () => {
  const dir = L.tmpdir();
  base = path.join(dir, 'store');
  work = L.tmpdir();
  // Four targets, short windows, a heap window a second each, and one
  // target whose heap is near its memory_limit: an anomaly and its pins.
  const fakes = [];
  for (let i = 0; i < 4; i++) fakes.push(await F.startFakeInspector({ url: `file:///fake/service${i}.js`, heapUsed: 5 << 20 }));
  const targets = fakes.map((f, i) => ({ port: f.port, worker: `w${i}`, version: 'v1', ...(i === 0 ? { memory_limit: '5500KiB' } : {}) }));
  const d = await L.startDaemon(L.yamlConfig({
    store: base, targets, duration: '100ms', period: '250ms', jitter: '0%', heap: '{period: 1s}', memoryPoll: '200ms',
    anomaly: '{memory: {heap_period: 1s}, latency: {listen: ""}}', level: 'info',
  }), { dir });
  await L.waitFor(() => d.count((l) => l.msg === 'window stored') >= WINDOWS, 120000, `${WINDOWS} windows stored`);
  const r = await L.stopDaemon(d, { signal: 'SIGTERM' });
  assert.strictEqual(r.code, 0, d.tail());
  await Promise.all(fakes.map((f) => f.close()));
  assert.match(L.storeCheck(base), /: ok$/m);
  ps = pageSize(path.join(base, 'data.mdb'));
});

test('the read commands on the healthy store', { timeout: 60000 }, () => {
  for (const args of COMMANDS) {
    const r = run(args, base);
    assert.strictEqual(r.signal, null, `${r.argv.join(' ')}: ${r.stderr}`);
    assert.strictEqual(r.status, 0, `${r.argv.join(' ')}: ${r.stderr}`);
  }
  // The anomaly the near-limit target raised, with its windows.
  const a = L.cli(['anomalies', '--json', '--store', base]);
  assert.match(a.stdout, /"kind":"memory_near_limit"/);
});

test(`${COPIES} damaged copies: every read command ends by itself, exit 0, 1 or 2`, { timeout: COPIES <= 24 ? 120000 : COPIES * COMMANDS.length * 3000 }, () => {
  const t0 = Date.now();
  const tally = { commands: 0, signals: 0, hangs: 0, leftovers: 0, exit: { 0: 0, 1: 0, 2: 0 }, faulted: 0 };
  const bad = [];
  const signalsBy = {}; // per command
  for (let i = 0; i < COPIES; i++) {
    const { dir, what } = damaged(i);
    for (const args of COMMANDS) {
      const r = run(args, dir);
      tally.commands++;
      const where = `copy ${i} (${what}): isoprof ${args.join(' ')}`;
      if (r.signal) { tally.signals++; signalsBy[args.join(' ')] = (signalsBy[args.join(' ')] || 0) + 1; bad.push(`${where}: killed by ${r.signal}: ${r.stderr}`); continue; }
      if (r.hung) { tally.hangs++; bad.push(`${where}: still running after ${HANG_MS} ms`); continue; }
      if (r.leftover) { tally.leftovers++; bad.push(`${where}: exit ${r.status} left its -o FILE`); }
      tally.exit[r.status] = (tally.exit[r.status] || 0) + 1;
      if (r.status !== 0 && r.status !== 1 && r.status !== 2) bad.push(`${where}: exit ${r.status}: ${r.stderr}`);
      // LMDB prints its own assertion line before the abort that the
      // guard reports: the command's message is a line of its own.
      else if (r.status !== 0 && !/^isoprof: \S/m.test(r.stderr)) bad.push(`${where}: exit ${r.status} without a message: ${JSON.stringify(r.stderr)}`);
      if (/isoprof store check/.test(r.stderr)) {
        tally.faulted++;
        // The message names the store it could not read.
        if (!r.stderr.includes(dir)) bad.push(`${where}: the message does not name the store: ${r.stderr}`);
      }
    }
    fs.rmSync(dir, { recursive: true, force: true });
  }
  const s = (Date.now() - t0) / 1000;
  process.stderr.write(`damaged copies: ${COPIES}, read commands: ${tally.commands}, signals: ${tally.signals}, hangs: ${tally.hangs}, `
    + `-o left: ${tally.leftovers}, exit 0/1/2: ${tally.exit[0]}/${tally.exit[1]}/${tally.exit[2]}, `
    + `named damaged with the store check hint: ${tally.faulted}, ${s.toFixed(1)} s; signals by command: ${JSON.stringify(signalsBy)}\n`);
  assert.deepStrictEqual(bad, []);
});
