// Heap windows and anomalies on real runtimes: a Node isolate that leaks
// until V8 kills it (memory_near_limit before the death, oom_suspected
// after, the last heap profile naming the retaining function), an
// allocation made at start-up still in a later heap window, another client
// stopping the shared heap sampler, a workerd worker outgrowing a share
// of its auto limit (workerd's 128 MiB), a P999 latency spike from DogStatsD timings (and a
// steady stream that must raise nothing), a garbage UDP flood and a
// malformed heap profile.
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const path = require('node:path');
const fs = require('node:fs');
const dgram = require('node:dgram');
const L = require('./lib');
const { startFakeInspector } = require('./fake-inspector');

const anomalies = L.anomalies;
const flagged = (kind) => (l) => l.msg === 'anomaly flagged' && l.kind === kind;

test('node leak: memory_near_limit, then oom_suspected; the last heap window names the retaining function', { timeout: 100000 }, async () => {
  const node = await L.startNode(path.join(L.WORKLOADS, 'node-leak.js'),
    { args: ['--max-old-space-size=64'], env: { LEAK_PER_TICK: '100', LEAK_START_MS: '1500' } });
  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  // With --max-old-space-size=64 V8 gives up at about 55 MiB of used heap
  // (what Runtime.getHeapUsage reports): that is this isolate's limit.
  const d = await L.startDaemon(L.yamlConfig({
    store, targets: [{ port: node.port, worker: 'checkout', version: 'v42', memory_limit: '56MiB' }],
    duration: '2s', period: '5s', interval: '10ms', heap: '{period: 30s}', memoryPoll: '200ms',
    anomaly: '{memory: {heap_period: 1s}, cooldown: 10s, latency: {listen: ""}}',
  }), { dir });
  const near = await d.waitLog(flagged('memory_near_limit'), 60000, 'memory_near_limit');
  assert.strictEqual(near.worker, 'checkout');
  assert.ok(Number(near.used) >= 0.9 * 56 * 1048576, near.raw);
  const oom = await d.waitLog(flagged('oom_suspected'), 40000, 'oom_suspected');
  assert.ok(near.seq < oom.seq, 'flagged near the limit before the death');
  await d.waitLog((l) => l.msg === 'anomaly recorded' && l.kind === 'oom_suspected', 10000, 'oom recorded');
  await L.waitFor(() => node.exitCode !== null || node.signalCode !== null, 10000, 'node to die');
  assert.match(node.stderrText, /heap out of memory|Allocation failed/);
  const stop = await L.stopDaemon(d);
  assert.strictEqual(stop.code, 0, d.raw.slice(-2000));

  const all = anomalies(store);
  assert.deepStrictEqual(all.map((a) => a.kind), ['memory_near_limit', 'oom_suspected'], JSON.stringify(all));
  for (const a of all) {
    assert.strictEqual(a.worker, 'checkout');
    assert.strictEqual(a.version, 'v42');
    assert.strictEqual(a.open, false);
    assert.strictEqual(a.unit, 'bytes');
    assert.ok(a.value >= a.threshold && a.threshold === Math.floor(0.9 * 56 * 1048576), JSON.stringify(a));
    assert.ok(a.windows.length >= 1, JSON.stringify(a));
    assert.ok(Math.abs(Date.parse(a.time) - Date.now()) < 120000);
  }
  const oomA = all[1];
  assert.deepStrictEqual(anomalies(store, ['--kind', 'oom_suspected']).map((a) => a.id), [oomA.id]);
  assert.deepStrictEqual(anomalies(store, ['--worker', 'nobody']), []);

  // Heap windows taken for the episode, with the memory the polls saw.
  const pinned = L.windows(store, ['--anomaly', 'memory_near_limit', '--type', 'heap']);
  assert.ok(pinned.length >= 1, 'heap windows pinned by memory_near_limit');
  for (const w of pinned) {
    assert.strictEqual(w.anomaly, 'memory_near_limit');
    assert.ok(w.pinned.includes('memory_near_limit'));
    assert.ok(w.memory && w.memory.max >= w.memory.p999 && w.memory.p999 >= w.memory.min && w.memory.min > 0, JSON.stringify(w));
  }
  // The last heap profile before the death names the registry.
  const file = L.exportTo(store, ['--anomaly', String(oomA.id), '--type', 'heap'], path.join(dir, 'oom.pb.gz'));
  const rows = L.pprofTop(file, ['-sample_index=inuse_space']);
  assert.strictEqual(rows[0].name, 'observe', JSON.stringify(rows.slice(0, 4)));
  assert.ok(rows[0].flatPct >= 50, `observe holds ${rows[0].flatPct}% of inuse space`);
  const lastHeap = L.windows(store, ['--type', 'heap']).filter((w) => w.isolate === Number(near.isolate)).pop();
  assert.ok(oomA.windows.includes(lastHeap.id), 'oom_suspected pins the last heap window');
  L.storeCheck(store);
});

test('node: start-up allocations stay in later heap windows; a client stopping the sampler is survived', { timeout: 90000 }, async () => {
  const dir = L.tmpdir();
  const trigger = path.join(dir, 'build-table');
  const node = await L.startNode(path.join(L.WORKLOADS, 'node-table.js'), { env: { TABLE_TRIGGER: trigger } });
  const store = path.join(dir, 'store');
  const d = await L.startDaemon(L.yamlConfig({
    store, targets: [{ port: node.port, worker: 'pricing' }], duration: '1s', period: '10s',
    heap: '{period: 3s}', memoryPoll: '500ms',
  }), { dir });
  await d.waitLog((l) => l.msg === 'heap sampling started', 15000, 'heap sampling started');
  fs.writeFileSync(trigger, '');
  await L.waitFor(() => /table built/.test(node.stderrText), 15000, 'the table');
  const builtAt = Date.now();
  // A heap window taken seconds after the build, with the table idle.
  await L.waitFor(() => L.windows(store, ['--type', 'heap']).some((w) => Date.parse(w.start) > builtAt + 2000), 20000, 'a later heap window');
  const later = L.windows(store, ['--type', 'heap']).filter((w) => Date.parse(w.start) > builtAt + 2000)[0];
  assert.strictEqual(later.anomaly, null);
  assert.strictEqual(later.interval, 512 * 1024);
  const file = L.exportTo(store, ['--id', later.id], path.join(dir, 'later.pb.gz'));
  const rows = L.pprofTop(file, ['-sample_index=inuse_space']);
  assert.strictEqual(rows[0].name, 'buildPriceTable', JSON.stringify(rows.slice(0, 4)));

  // Another client stops the one sampler the isolate has.
  const list = await L.getJson(node.port, '/json/list');
  const ws = await L.connectWs(list[0].webSocketDebuggerUrl);
  const reply = await new Promise((resolve) => {
    ws.onmessage = (m) => resolve(JSON.parse(m.data));
    ws.send(JSON.stringify({ id: 1, method: 'HeapProfiler.stopSampling' }));
  });
  assert.ok(reply.result, JSON.stringify(reply).slice(0, 300));
  ws.close();
  const restarted = await d.waitLog((l) => l.msg === 'heap sampler was stopped by another client, restarting it', 15000, 'restart');
  await d.waitLog((l) => l.seq > restarted.seq && l.msg === 'window stored' && l.type === 'heap', 15000, 'a heap window after the restart');
  assert.strictEqual(d.count((l) => l.msg === 'heap sampler was stopped by another client, restarting it'), 1);
  const stop = await L.stopDaemon(d);
  assert.strictEqual(stop.code, 0, d.raw.slice(-2000));
  L.storeCheck(store);
  await L.stop(node);
});

// memory_limit auto: workerd's 128 MiB; at a 20 % threshold (25.6 MiB) the
// growing worker crosses it within seconds of traffic.
test('workerd: a worker outgrowing 20 % of its auto limit flags memory_near_limit with a heap window', { timeout: 90000 }, async () => {
  const http = await L.freePort();
  const wd = await L.startWorkerd(path.join(L.WORKLOADS, 'worker-grow.js'), [{ name: 'growing', port: http }]);
  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  const d = await L.startDaemon(L.yamlConfig({
    store, targets: [{ port: wd.port }], duration: '1s', period: '30s',
    heap: '{period: 1h}', memoryPoll: '250ms', anomaly: '{memory: {threshold: 20%, heap_period: 2s}, latency: {listen: ""}}',
  }), { dir });
  await d.waitLog((l) => l.msg === 'target attached', 20000, 'attach');
  const load = L.loadLoop(http);
  let near;
  try {
    near = await d.waitLog(flagged('memory_near_limit'), 45000, 'memory_near_limit');
    await d.waitLog((l) => l.msg === 'window stored' && l.type === 'heap' && l.anomaly === 'memory_near_limit', 20000, 'its heap window');
  } finally {
    await load.stop();
  }
  assert.strictEqual(near.worker, 'growing');
  assert.strictEqual(near.limit_source, 'auto:workerd', near.raw);
  assert.strictEqual(Number(near.limit), 128 * 1048576, near.raw);
  assert.strictEqual(Number(near.threshold), Math.floor(0.2 * 128 * 1048576), near.raw);
  const stop = await L.stopDaemon(d);
  assert.strictEqual(stop.code, 0, d.raw.slice(-2000));
  const a = anomalies(store, ['--kind', 'memory_near_limit']);
  assert.strictEqual(a.length, 1, JSON.stringify(a));
  assert.strictEqual(a[0].worker, 'growing');
  assert.strictEqual(a[0].threshold, Math.floor(0.2 * 128 * 1048576), JSON.stringify(a[0]));
  assert.strictEqual(a[0].limit, 128 * 1048576, JSON.stringify(a[0]));
  assert.strictEqual(a[0].limit_source, 'auto:workerd', JSON.stringify(a[0]));
  const heap = L.windows(store, ['--anomaly', 'memory_near_limit', '--type', 'heap']);
  assert.ok(heap.length >= 1 && heap[0].runtime === 'workerd', JSON.stringify(heap));
  const rows = L.pprofTop(L.exportTo(store, ['--id', heap[0].id], path.join(dir, 'w.pb.gz')), ['-sample_index=inuse_space']);
  assert.strictEqual(rows[0].name, 'keepRequestState', JSON.stringify(rows.slice(0, 4)));
  L.storeCheck(store);
  await L.stop(wd);
});

// Sends DogStatsD timing lines for worker api/v1: rate per second, in
// batches every 10 ms; slowEvery: one in that many takes slowMs.
function statsdStream(port, { rate, slowEvery = 0, slowMs = 300 }) {
  const sock = dgram.createSocket('udp4');
  let n = 0;
  let seed = 12345;
  const rnd = () => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed / 0x7fffffff; };
  const perTick = Math.round(rate / 100);
  const timer = setInterval(() => {
    const lines = [];
    for (let i = 0; i < perTick; i++, n++) {
      // Steady: log-normal around 5 ms, a tail to about 40 ms.
      const u = Math.max(rnd(), 1e-9), v = rnd();
      let ms = 5 * Math.exp(0.45 * Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v));
      if (slowEvery && n % slowEvery === slowEvery - 1) ms = slowMs + 50 * rnd();
      lines.push(`http.request.duration:${ms.toFixed(3)}|ms|#worker:api,version:v1,route:/cart`);
    }
    sock.send(lines.join('\n'), port, '127.0.0.1');
  }, 10);
  return {
    setSlow(every) { slowEvery = every; },
    stop() { clearInterval(timer); return new Promise((r) => sock.close(r)); },
  };
}

test('P999: a steady stream flags nothing; a slow path for 1 in 500 flags exactly one spike and a CPU window; garbage is counted', { timeout: 90000 }, async () => {
  const node = await L.startNode(path.join(L.WORKLOADS, 'node-light.js'));
  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  const udp = await L.freePort();
  const d = await L.startDaemon(L.yamlConfig({
    store, targets: [{ port: node.port, worker: 'api', version: 'v1' }], duration: '2s', period: '60s',
    anomaly: `{cooldown: 20s, latency: {listen: "127.0.0.1:${udp}", window: 2s}}`,
  }), { dir });
  await d.waitLog((l) => l.msg === 'listening for DogStatsD latency', 10000, 'listener');
  await d.waitLog((l) => l.msg === 'target attached', 15000, 'attach');
  const s = statsdStream(udp, { rate: 2500 });
  try {
    // 14 s of steady traffic: seven windows, a baseline, and no flag.
    await new Promise((r) => setTimeout(r, 14000));
    assert.strictEqual(d.count(flagged('latency_p999_spike')), 0, 'a steady stream flagged a spike');
    s.setSlow(500);
    const spike = await d.waitLog(flagged('latency_p999_spike'), 12000, 'the spike');
    assert.strictEqual(spike.worker, 'api');
    assert.strictEqual(spike.version, 'v1');
    assert.ok(Number(spike.p999_ms) >= 250 && Number(spike.baseline_ms) < 60, spike.raw);
    const win = await d.waitLog((l) => l.seq > spike.seq && l.msg === 'anomaly window' && l.kind === 'latency_p999_spike', 5000, 'the CPU window');
    assert.ok(Date.parse(win.ts) - Date.parse(spike.ts) <= 2000, `CPU window ${Date.parse(win.ts) - Date.parse(spike.ts)} ms after the flag`);
    await d.waitLog((l) => l.msg === 'window stored' && l.anomaly === 'latency_p999_spike' && l.type === 'cpu', 10000, 'the spike window stored');
    // The slow path goes on: still the one episode.
    await new Promise((r) => setTimeout(r, 6000));
    assert.strictEqual(d.count(flagged('latency_p999_spike')), 1);
  } finally {
    await s.stop();
  }
  // A flood of garbage: counted, said once, the daemon fine.
  const g = dgram.createSocket('udp4');
  const junk = [Buffer.from('not a metric'), Buffer.from('x:1|ms'), Buffer.from('\u0000\u00ff|||#:'), Buffer.alloc(1400, 0x41)];
  for (let i = 0; i < 20000; i++) {
    g.send(junk[i % junk.length], udp, '127.0.0.1');
    if (i % 500 === 0) await new Promise((r) => setImmediate(r));
  }
  await new Promise((r) => setTimeout(r, 1000));
  g.close();
  await d.waitLog((l) => l.msg === 'DogStatsD input ignored', 5000, 'the garbage said');
  assert.ok(d.alive());
  const stop = await L.stopDaemon(d);
  assert.strictEqual(stop.code, 0, d.raw.slice(-2000));
  const counts = d.lines.find((l) => l.msg === 'DogStatsD counters');
  assert.ok(Number(counts.garbage) + Number(counts.unattributed) >= 1000, counts.raw);
  assert.ok(Number(counts.accepted) > 40000, counts.raw);
  const a = anomalies(store);
  assert.strictEqual(a.length, 1, JSON.stringify(a));
  assert.strictEqual(a[0].kind, 'latency_p999_spike');
  assert.strictEqual(a[0].unit, 'nanoseconds');
  assert.ok(a[0].limit === null && a[0].limit_source === null, JSON.stringify(a[0]));
  assert.ok(a[0].windows.length >= 1, JSON.stringify(a[0]));
  L.storeCheck(store);
  await L.stop(node);
});

test('a malformed heap profile: conversion error logged, the CPU windows go on', { timeout: 40000 }, async () => {
  const fake = await startFakeInspector({ mode: 'bad-heap' });
  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  const d = await L.startDaemon(L.yamlConfig({ store, targets: [{ port: fake.port }], duration: '500ms', period: '1s', heap: '{period: 1s}' }), { dir });
  const bad = await d.waitLog((l) => l.msg === 'conversion failed' && l.type === 'heap', 15000, 'heap conversion error');
  assert.match(bad.why, /id|node/);
  await d.waitLog((l) => l.seq > bad.seq && l.msg === 'window stored' && l.type === 'cpu', 10000, 'a CPU window after it');
  assert.ok(d.alive());
  const stop = await L.stopDaemon(d);
  assert.strictEqual(stop.code, 0);
  assert.ok(L.windows(store, ['--type', 'heap']).length === 0);
  L.storeCheck(store);
  await fake.close();
});
