// Hostile or broken targets: one daemon watches a healthy Node isolate and
// one fake inspector per misbehaviour (fake-inspector.js). Each bad session
// is dropped (or its window rejected) with a logged error; the daemon, the
// healthy target and the store carry on; nothing a target says can forge a
// log line or reach a host the config did not name.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const L = require('./lib');
const F = require('./fake-inspector');

after(L.cleanup);

// worker label -> fake inspector options.
const BAD = {
  'bad-json-enable': { mode: 'invalid-json', on: 'Profiler.enable' },
  'bad-json-stop': { mode: 'invalid-json', on: 'Profiler.stop' },
  'bad-truncated': { mode: 'truncated-frame', on: 'Profiler.stop' },
  'bad-huge': { mode: 'huge-frame', on: 'Profiler.stop' },
  'bad-profile': { mode: 'bad-profile', on: 'Profiler.stop' },
  'bad-version': { mode: 'version-garbage' },
};
const DROPPED = ['bad-json-enable', 'bad-json-stop', 'bad-truncated', 'bad-huge'];

let d; let store; let node; let fakes; let hostile; let peakRssKiB = 0; let t0;
const is = (msg, worker) => (l) => l.msg === msg && (worker === undefined || l.worker === worker);

before(async () => {
  node = await L.startNode(path.join(L.WORKLOADS, 'node-hot.js'));
  fakes = {};
  for (const [w, o] of Object.entries(BAD)) fakes[w] = await F.startFakeInspector(o);
  hostile = await F.startFakeInspector({ mode: 'hostile-list' });
  const dir = L.tmpdir();
  store = path.join(dir, 'store');
  const targets = [{ port: node.port, worker: 'healthy' },
    ...Object.keys(BAD).map((w) => ({ port: fakes[w].port, worker: w })),
    { port: hostile.port }];
  d = await L.startDaemon(L.yamlConfig({ store, targets, maxConcurrent: 16 }), { dir });
  t0 = Date.now();
  const rss = setInterval(() => {
    try {
      const m = /VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${d.pid}/status`, 'utf8'));
      if (m) peakRssKiB = Math.max(peakRssKiB, Number(m[1]));
    } catch (_) { /* exited */ }
  }, 200);
  try {
    // Every misbehaviour has fired at least twice (so the daemon reattached
    // after the first), and the healthy target kept being profiled.
    await L.waitFor(() => DROPPED.every((w) => d.count(is('session dropped', w)) >= 2), 45000, 'two drops of every bad session');
    const rejected = await d.waitLog(is('conversion failed', 'bad-profile'), 15000, 'the bad profile rejected');
    await d.waitLog((l) => l.seq > rejected.seq && is('window started', 'bad-profile')(l), 30000, 'a window of bad-profile after the rejection');
    const storedBefore = d.count(is('window stored', 'healthy'));
    await L.waitFor(() => d.count(is('window stored', 'healthy')) >= storedBefore + 1, 15000, 'the healthy target profiled after the drops');
  } finally {
    clearInterval(rss);
  }
});

test('the daemon stays up and stops cleanly', async () => {
  assert.ok(d.alive(), d.tail());
  const r = await L.stopDaemon(d);
  assert.strictEqual(r.code, 0, d.tail());
  assert.ok(r.ms < 2000, `stopped in ${r.ms} ms`);
  assert.ok(peakRssKiB > 0 && peakRssKiB < 200 * 1024, `peak RSS ${peakRssKiB} KiB: a 300 MB frame header must not be believed`);
  assert.match(L.storeCheck(store), /: ok$/m);
});

test('each bad session is dropped with a logged error and retried', () => {
  for (const w of DROPPED) {
    const drops = d.lines.filter(is('session dropped', w));
    assert.ok(drops.length >= 2, `${w}: ${drops.length} drops`);
    for (const l of drops) {
      assert.strictEqual(l.level, 'warn', l.raw);
      assert.ok(l.err && l.err.length > 0, `${w}: an error is named: ${l.raw}`);
    }
    assert.strictEqual(d.count(is('window stored', w)), 0, `${w}: nothing stored`);
    assert.ok(fakes[w].sessions >= 2, `${w}: reconnected (${fakes[w].sessions} sessions)`);
  }
  // Never attached: the reply to Profiler.enable was not JSON.
  assert.strictEqual(d.count(is('target attached', 'bad-json-enable')), 0);
  assert.match(d.lines.find(is('session dropped', 'bad-json-enable')).err, /json/i);
  // The 300 MB frame is refused at its header, long before the 30 s
  // Profiler.stop timeout would end it.
  const started = d.lines.find(is('window started', 'bad-huge'));
  const dropped = d.lines.find((l) => is('session dropped', 'bad-huge')(l) && l.seq > started.seq);
  assert.ok(dropped, 'huge frame dropped');
  const dt = Date.parse(dropped.ts) - Date.parse(started.ts);
  assert.ok(dt < 2000 + 5000, `dropped ${dt} ms after the window started (2 s window)`);
});

test('a profile with dangling node ids is rejected, the session kept', () => {
  const errs = d.lines.filter(is('conversion failed', 'bad-profile'));
  assert.ok(errs.length >= 1);
  assert.strictEqual(errs[0].level, 'error');
  assert.strictEqual(d.count(is('window stored', 'bad-profile')), 0);
  // The contract: a rejected profile never ends its session. A session
  // ends here only through the load: a call times out and the session is
  // dropped as timed out; or, between two sessions, a poll of /json/list
  // misses the discovery timeout, the endpoint is unreachable for a while,
  // the target (without a session then) detached, and a new session opened
  // when it answers again (an attached target keeps its session). Each session after the first is one of those, never the
  // bad profile.
  const fake = fakes['bad-profile'];
  const drops = d.lines.filter(is('session dropped', 'bad-profile'));
  for (const l of drops) assert.match(`${l.err} ${l.why}`, /timed out|stalled/, `the session was dropped for something else than the load: ${l.raw}`);
  const detached = d.count((l) => l.msg === 'target detached' && l.inspector === fake.inspector);
  const unreachable = d.count((l) => l.msg === 'endpoint unreachable' && l.inspector === fake.inspector);
  assert.ok(fake.sessions >= 1, 'the fake had no session');
  assert.strictEqual(fake.sessions, 1 + detached + drops.length,
    `${fake.sessions} sessions, ${detached} detaches (endpoint unreachable ${unreachable} times), ${drops.length} timed-out drops: a session ended otherwise`);
  if (detached > 0) assert.ok(unreachable >= 1, 'detached without the endpoint failing');
  // and the session that saw the bad profile carried on: the windows after
  // the rejection are taken on it, not on a new one
  const firstErr = errs[0].seq;
  const detachedAfter = d.lines.some((l) => l.seq > firstErr && l.inspector === fake.inspector &&
    (l.msg === 'target detached' || l.msg === 'session dropped'));
  if (!detachedAfter) {
    assert.ok(d.lines.some((l) => l.seq > firstErr && l.msg === 'window started' && l.worker === 'bad-profile'),
      'no window after the rejection on the kept session');
  }
});

test('a /json/version that is not JSON: endpoint unreachable, no session', () => {
  const l = d.lines.find((x) => x.msg === 'endpoint unreachable' && x.inspector === fakes['bad-version'].inspector);
  assert.ok(l, 'endpoint unreachable logged');
  assert.strictEqual(l.step, 'json/version');
  assert.strictEqual(fakes['bad-version'].sessions, 0);
  // Retried with backoff, not once per discovery interval (500 ms).
  const polls = fakes['bad-version'].httpRequests.length;
  const secs = (Date.now() - t0) / 1000;
  assert.ok(polls >= 2 && polls < secs * 2 * 0.75, `${polls} polls in ${secs.toFixed(1)} s`);
});

test('hostile /json/list: unusable entries skipped, labels sanitised, no forged log line', () => {
  const skipped = d.lines.filter((l) => l.msg === 'unusable targets in json/list' && l.inspector === hostile.inspector);
  // Reported once, not at every poll of the same list.
  assert.strictEqual(skipped.length, 1, 'unusable entries reported once');
  assert.strictEqual(Number(skipped[0].skipped), 12, skipped[0].raw);
  for (const p of hostile.paths) assert.ok(!F.HOSTILE_UNUSABLE_PATHS.includes(p), `connected to unusable ${JSON.stringify(p)}`);
  // The entry advertising 203.0.113.7 was reached here, at the configured endpoint.
  assert.ok(hostile.paths.includes('/elsewhere'), JSON.stringify(hostile.paths));
  assert.ok(hostile.paths.includes('/huge-title') && hostile.paths.includes('/ctl'));
  // One log line per line: nothing a target said became a line or a field of its own.
  for (const l of d.lines) {
    assert.ok(l.raw.startsWith('ts='), `not a log line: ${JSON.stringify(l.raw.slice(0, 200))}`);
    assert.notStrictEqual(l.msg, 'forged');
    assert.ok(l.raw.length < 8192, `log line of ${l.raw.length} bytes`);
  }
  // Labels are bounded, printable, and the windows are stored under them.
  const ws = L.windows(store);
  const labels = new Set(ws.map((w) => w.worker));
  for (const w of labels) {
    assert.ok(Buffer.byteLength(w) <= 255, `label of ${Buffer.byteLength(w)} bytes`);
    assert.match(w, /^[\x20-\x7e]+$/, `printable label ${JSON.stringify(w)}`);
  }
  assert.ok(labels.has('elsewhere.js'), [...labels].join(', '));
  assert.ok([...labels].some((w) => /^T{200,255}$/.test(w)), 'the huge title, truncated');
  assert.ok([...labels].some((w) => /msg=forged/.test(w) && !/["\n\\]/.test(w)), 'the control-character url, sanitised');
  assert.ok(labels.has('healthy'));
});

test('the agent spoke valid WebSocket to every fake', () => {
  for (const f of [...Object.values(fakes), hostile]) {
    assert.deepStrictEqual(f.violations, [], `${f.mode}: ${f.violations.join('; ')}`);
  }
});
