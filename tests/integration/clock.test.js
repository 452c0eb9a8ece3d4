// The wall clock stepped under the daemon: back an hour, forward two, back
// to the true time, while it profiles a Node isolate. libfaketime (Debian's
// faketime, LD_PRELOAD) steps CLOCK_REALTIME only, as an NTP step or a VM
// resume does; the monotonic clock the schedule runs on is left alone.
// Windows take their time from the wall clock, so they land an hour back
// or ahead; what must hold: every window keeps a key of its own (none
// replaces another), the schedule neither stalls nor bursts, and every
// window is found by a time query around the time it carries.
'use strict';
const { test } = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const L = require('./lib');

// libfaketimeMT.so.1 of Debian's libfaketime, wherever its multiarch
// directory is.
function libfaketime() {
  const r = spawnSync('dpkg', ['-L', 'libfaketime'], { encoding: 'utf8' });
  const lib = r.status === 0 ? r.stdout.split('\n').find((l) => /\/libfaketimeMT\.so\.1$/.test(l)) : undefined;
  if (!lib || !fs.existsSync(lib)) assert.fail('libfaketime is not installed (packaging/setup.sh installs faketime)');
  return lib;
}

const PERIOD_MS = 500;

test('wall clock stepped back and forward: distinct keys, an undisturbed schedule, every window found by time', async () => {
  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  const step = path.join(dir, 'faketime');
  fs.writeFileSync(step, '+0\n');
  const env = {
    LD_PRELOAD: libfaketime(),
    FAKETIME_TIMESTAMP_FILE: step,
    FAKETIME_NO_CACHE: '1', // the file is read at every call: a step shows at once
    FAKETIME_DONT_FAKE_MONOTONIC: '1',
  };
  // ASan wants its runtime first; libfaketime only wraps clock calls
  if (process.env.ASAN_OPTIONS) env.ASAN_OPTIONS = `${process.env.ASAN_OPTIONS}:verify_asan_link_order=0`;
  const node = await L.startNode(path.join(L.ROOT, 'tests/integration/workloads/node-hot.js'));
  const t0 = process.hrtime.bigint();
  const d = await L.startDaemon(L.yamlConfig({
    store, targets: [{ port: node.port, worker: 'clock' }],
    duration: '200ms', period: `${PERIOD_MS}ms`, jitter: '0%', heap: '{period: 2s}',
  }), { dir, env });

  // each step, then three windows stored that carry the stepped time
  const phases = [0, -3600, 3600, 0];
  const spans = [];
  for (const off of phases) {
    fs.writeFileSync(step, `${off >= 0 ? '+' : ''}${off}\n`);
    const from = d.lines.length;
    const stepped = (l) => Math.abs(Date.parse(l.ts) - (Date.now() + off * 1000)) < 10 * 60 * 1000;
    await L.waitFor(() => d.lines.slice(from).filter((l) => l.msg === 'window stored' && stepped(l)).length >= 3,
      30000, `three windows stored at ${off} s`);
    spans.push(d.lines.slice(from).filter((l) => l.msg === 'window stored' && stepped(l)).map((l) => l.id));
  }
  const elapsedMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const r = await L.stopDaemon(d, { signal: 'SIGTERM' });
  assert.strictEqual(r.code, 0, d.tail());
  assert.strictEqual(d.count((l) => l.level === 'error'), 0, d.tail());

  // the schedule ran on: no burst after the forward step (a CPU window
  // every PERIOD_MS at most), no stall after the backward one (each phase
  // got its windows above)
  const cpuStarted = d.count((l) => l.msg === 'window started');
  assert.ok(cpuStarted <= elapsedMs / PERIOD_MS + 4, `${cpuStarted} windows started in ${elapsedMs} ms`);

  // every window logged as stored is in the store, once: no key was reused
  const counters = d.lines.find((l) => l.msg === 'counters');
  const logged = d.lines.filter((l) => l.msg === 'window stored').map((l) => l.id).sort();
  const ws = L.windows(store, []);
  assert.deepStrictEqual(ws.map((w) => w.id).sort(), logged);
  assert.strictEqual(Number(counters.windows_evicted), 0, counters.raw);
  assert.strictEqual(new Set(ws.map((w) => `${w.isolate}/${w.type}/${w.start}`)).size, ws.length, 'distinct keys');

  // the windows of each phase carry its time, and a query around that time
  // finds each of them and only what lies in it
  const byId = new Map(ws.map((w) => [w.id, w]));
  for (let i = 0; i < phases.length; i++) {
    const mine = spans[i].map((id) => byId.get(id));
    assert.ok(mine.every(Boolean), `phase ${phases[i]}: its windows are listed`);
    const starts = mine.map((w) => w.start).sort();
    const lo = starts[0];
    const hi = new Date(Date.parse(starts[starts.length - 1]) + 1000).toISOString();
    const found = L.windows(store, ['--since', lo, '--until', hi]).map((w) => w.id);
    for (const w of mine) assert.ok(found.includes(w.id), `phase ${phases[i]}: ${w.id} (${w.start}) found in [${lo}, ${hi})`);
    const expect = ws.filter((w) => w.start >= lo && Date.parse(w.start) < Date.parse(hi)).map((w) => w.id).sort();
    assert.deepStrictEqual([...found].sort(), expect, `phase ${phases[i]}: [${lo}, ${hi})`);
  }
  // the hour back sorts before the true time, the hour ahead after it
  const startsOf = (i) => spans[i].map((id) => Date.parse(byId.get(id).start));
  const HOUR = 3600 * 1000;
  assert.ok(Math.min(...startsOf(1)) < Math.min(...startsOf(0)) - 0.8 * HOUR, 'the hour back is older');
  assert.ok(Math.max(...startsOf(2)) > Math.max(...startsOf(3)) + 0.8 * HOUR, 'the hour ahead is newer');
  L.storeCheck(store);
  await L.stop(node);
});
