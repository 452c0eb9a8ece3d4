// The memory watch on real Node, all in one run (memwatch.c): each
// isolate's limit learned from its process (V8's default, or
// --max-old-space-size), the same 150 MB flagged under one and not the
// other; a leak into a module-level Map flagged memory_growth long before
// half its limit, the heap window pinned to the episode naming the leaking
// function; a cache that fills and plateaus and a steady sawtooth heap
// flagged of nothing.
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const path = require('node:path');
const L = require('./lib');

const MIB = 1048576;
const script = path.join(L.WORKLOADS, 'node-memwatch.js');

// The targets of /status; none while the control socket is not up yet.
function targets(store) {
  try {
    return L.status(store).targets || [];
  } catch (e) {
    if (/cannot connect/.test(e.message)) return [];
    throw e;
  }
}

test('limits from the process; near-limit by the real limit; memory_growth on a leak, none on steady heaps', { timeout: 420000 }, async (t0) => {
  const [dflt, small, leak, cache, saw] = await Promise.all([
    L.startNode(script, { env: { MODE: 'hold', HOLD_MB: '150' } }),
    L.startNode(script, { args: ['--max-old-space-size=160'], env: { MODE: 'hold', HOLD_MB: '150' } }),
    L.startNode(script, { args: ['--max-old-space-size=1024'], env: { MODE: 'leak', LEAK_KB_PER_TICK: '4' } }),
    L.startNode(script, { env: { MODE: 'cache' } }),
    L.startNode(script, { env: { MODE: 'sawtooth' } }),
  ]);
  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  const t = (node, worker) => ({ port: node.port, worker, version: 'v1' });
  const d = await L.startDaemon(L.yamlConfig({
    store,
    targets: [t(dflt, 'dflt'), t(small, 'small'), t(leak, 'leak'), t(cache, 'cache'), t(saw, 'saw')],
    duration: '2s', period: '20s', interval: '1ms', heap: '{period: 60s}',
    anomaly: '{memory: {threshold: 65%, growth: {window: 60s}}, cooldown: 10s, latency: {listen: ""}}',
  }), { dir });
  const started = Date.now();

  // The limits, each with where it came from.
  const limits = {};
  await L.waitFor(() => {
    for (const x of targets(store)) if (x.memory && x.memory.limit) limits[x.worker] = x.memory;
    return Object.keys(limits).length === 5;
  }, 60000, 'five limits in /status');
  assert.strictEqual(limits.dflt.limit_source, 'auto:v8-default', JSON.stringify(limits.dflt));
  assert.ok(limits.dflt.limit > 1000 * MIB, JSON.stringify(limits.dflt));
  assert.strictEqual(limits.small.limit_source, 'auto:flag');
  assert.strictEqual(limits.small.limit, 208 * MIB);
  assert.strictEqual(limits.leak.limit, 1072 * MIB);

  // The same 150 MB: flagged under 208 MiB (65 %: 135 MiB), not under V8's default.
  const near = await d.waitLog((l) => l.msg === 'anomaly flagged' && l.kind === 'memory_near_limit', 60000, 'memory_near_limit');
  assert.strictEqual(near.worker, 'small', near.raw);
  assert.strictEqual(near.limit_source, 'auto:flag', near.raw);

  // The leak: memory_growth before half its limit.
  const growth = await d.waitLog((l) => l.msg === 'anomaly flagged' && l.kind === 'memory_growth', 240000, 'memory_growth');
  assert.strictEqual(growth.worker, 'leak', growth.raw);
  assert.ok(Number(growth.floor) < 536 * MIB, growth.raw);
  assert.ok(Number(growth.rate_mib_per_min) > 10, growth.raw);
  t0.diagnostic(`memory_growth after ${((Date.now() - started) / 1000).toFixed(0)} s at floor ${(Number(growth.floor) / MIB).toFixed(0)} MiB, ${Number(growth.rate_mib_per_min).toFixed(0)} MiB/min`);

  // The near-limit episode's cost is shown while it is open.
  const st = L.status(store).targets.find((x) => x.worker === 'small');
  assert.strictEqual(st.anomaly.kind, 'memory_near_limit', JSON.stringify(st));
  assert.ok(st.anomaly.cost.heap_windows >= 1 && st.anomaly.cost.share >= 0, JSON.stringify(st.anomaly));

  // The steady ones beside it for a growth window and a half: from the
  // 60th second on, each closed bucket (1.9 s) is a judgement of a whole
  // window of their heaps, some fifteen of them each (the unit tests and
  // bench_memwatch judge a day of such heaps on the simulated clock).
  await L.waitFor(() => Date.now() - started >= 90000, 200000, 'a growth window and a half');
  const flagged = d.lines.filter((l) => l.msg === 'anomaly flagged').map((l) => `${l.kind}:${l.worker}`);
  for (const w of ['dflt', 'cache', 'saw'])
    assert.ok(!flagged.some((f) => f.endsWith(':' + w)), `${w} flagged: ${flagged.join(' ')}`);
  await L.stop(leak); // before it grows much further
  const stop = await L.stopDaemon(d);
  assert.strictEqual(stop.code, 0, d.raw.slice(-2000));

  // The growth episode's heap window names the leaking function.
  const eps = L.anomalies(store, ['--kind', 'memory_growth']);
  assert.strictEqual(eps.length, 1, JSON.stringify(eps));
  assert.strictEqual(eps[0].worker, 'leak');
  assert.strictEqual(eps[0].threshold, 1072 * MIB);
  // The record keeps the limit and where it came from.
  assert.strictEqual(eps[0].limit, 1072 * MIB, JSON.stringify(eps[0]));
  assert.strictEqual(eps[0].limit_source, 'auto:flag', JSON.stringify(eps[0]));
  const nears = L.anomalies(store, ['--kind', 'memory_near_limit']);
  assert.ok(nears.length >= 1 && nears.every((a) => a.worker === 'small' && a.limit === 208 * MIB && a.limit_source === 'auto:flag'), JSON.stringify(nears));
  const file = L.exportTo(store, ['--anomaly', String(eps[0].id), '--type', 'heap'], path.join(dir, 'growth.pb.gz'));
  const rows = L.pprofTop(file, ['-sample_index=inuse_space']);
  assert.ok(rows.slice(0, 3).some((r) => r.name === 'rememberSessions'), JSON.stringify(rows.slice(0, 5)));
  const pinned = L.windows(store, ['--anomaly', 'memory_growth']);
  assert.ok(pinned.length >= 1);
  L.storeCheck(store);
});
