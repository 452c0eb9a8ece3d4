// A real Deno isolate (from the npm registry): discovered, profiled, its
// hot function named with file and line in go tool pprof.
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const path = require('node:path');
const L = require('./lib');

const MIB = 1048576;

test('deno: windows stored, runtime deno, hot function first', { timeout: 90000 }, async () => {
  const deno = await L.startDeno(path.join(L.WORKLOADS, 'deno-hot.js'));
  // The hot loop starts 5 s after the script does; Deno's own start-up comes first.
  const hotAt = new Date(Date.now() + 8000).toISOString();
  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  // Back-to-back windows: V8 records where inlined frames are only in code
  // compiled while a profiler runs, and the hot loop starts at 5 s.
  const d = await L.startDaemon(L.yamlConfig({ store, targets: [{ port: deno.port }], period: '2s', jitter: 0 }), { dir });
  const attached = await d.waitLog((l) => l.msg === 'target attached', 20000, 'target attached');
  assert.strictEqual(attached.runtime, 'deno');
  assert.strictEqual(attached.worker, 'deno-hot.js');
  // Read while the daemon writes: windows that began once the loop was hot.
  await L.waitFor(() => L.windows(store, ['--since', hotAt]).length >= 2, 40000, 'two hot windows');
  assert.strictEqual((await L.stopDaemon(d)).code, 0);
  const ws = L.windows(store);
  assert.ok(ws.length >= 2);
  assert.ok(ws.every((w) => w.runtime === 'deno' && w.worker === 'deno-hot.js'));
  const file = L.exportTo(store, ['--type', 'cpu', '--since', hotAt], path.join(dir, 'deno.pb.gz'));
  const rows = L.pprofTop(file, ['-lines']);
  assert.match(rows[0].name, /^denoCrunch .*deno-hot\.js:\d+$/, JSON.stringify(rows.slice(0, 3)));
  assert.match(L.goPprof(['-raw', file]), /denoCrunch .*deno-hot\.js:3 s=3/);
  await L.stop(deno);
});

// Deno 2 answers NodeWorker like Node: its Workers are isolates of their
// own, reached through the main thread's session. Its worker titles
// ("worker [1]") carry no name, so the thread label is what it runs, the
// script's file name (else "worker"), and its id: deno-threads-worker.js#1.
// The main thread holds about 40 MiB: under a 10 % threshold of its auto
// limit (25.6 MiB of 256) that is a near-limit episode, with a heap window.
test('deno workers: watched as threads of the target, their own windows; a near-limit episode by the auto limit', { timeout: 90000 }, async () => {
  // Deno asks for read access to load a Worker's module from a file
  // Its V8 flags set the heap limit of the process, which a Worker gets too.
  const deno = await L.startDeno(path.join(L.WORKLOADS, 'deno-threads.js'),
    { args: [`--allow-read=${L.WORKLOADS}`, '--v8-flags=--max-old-space-size=160'] });
  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  const d = await L.startDaemon(L.yamlConfig({ store, targets: [{ port: deno.port, worker: 'dn' }], duration: '1s', period: '1500ms', jitter: 0,
    anomaly: '{memory: {threshold: 10%}, latency: {listen: ""}}' }), { dir });
  const att = await d.waitLog((l) => l.msg === 'thread attached', 30000, 'a Deno worker attached');
  assert.match(att.thread, /^(deno-threads-worker\.js|worker)#\d+$/);
  // memory_limit auto: measured on Deno 2, --max-old-space-size=160 gives 256 MiB.
  const lim = (thread) => d.lines.find((l) => l.msg === 'heap limit' && l.thread === thread);
  await L.waitFor(() => lim('main') && lim(att.thread), 30000, 'the limits of both threads');
  assert.strictEqual(lim('main').source, 'auto:flag', lim('main').raw);
  assert.strictEqual(Number(lim('main').limit), 256 * 1024 * 1024, lim('main').raw);
  assert.strictEqual(lim(att.thread).source, 'auto:process', lim(att.thread).raw);
  assert.strictEqual(lim(att.thread).limit, lim('main').limit);
  const near = await d.waitLog((l) => l.msg === 'anomaly flagged' && l.kind === 'memory_near_limit', 30000, 'memory_near_limit');
  assert.strictEqual(near.worker, 'dn', near.raw);
  assert.strictEqual(near.thread, 'main', near.raw);
  assert.strictEqual(near.limit_source, 'auto:flag', near.raw);
  assert.strictEqual(Number(near.threshold), Math.floor(0.1 * 256 * MIB), near.raw);
  const top = () => L.cli(['top', '--store', store, '--type', 'cpu', '--thread', att.thread, '-n', '3']);
  await L.waitFor(() => { const r = top(); return r.status === 0 && /denoThreadCrunch/.test(r.stdout.split('\n').slice(3, 4).join('\n')); }, 40000, 'worker windows led by denoThreadCrunch');
  await L.waitFor(() => L.windows(store, ['--thread', 'main', '--type', 'cpu']).length >= 2, 30000, 'main thread windows');
  const main = L.cli(['top', '--store', store, '--type', 'cpu', '--thread', 'main', '-n', '20']);
  assert.ok(!/denoThreadCrunch/.test(main.stdout), main.stdout);
  assert.ok(L.windows(store, ['--thread', att.thread]).every((w) => w.runtime === 'deno' && w.worker === 'dn'));
  // The episode's heap windows: one at once, then backing off from
  // heap_period (10 s), so at most 1 + log2(1 + t / 10 s) by t.
  const pinned = () => d.count((l) => l.msg === 'window stored' && l.type === 'heap' && l.anomaly === 'memory_near_limit');
  await L.waitFor(() => pinned() >= 1, 30000, 'the heap window of the episode');
  const st = L.status(store).targets.find((x) => x.worker === 'dn' && x.thread === 'main');
  assert.strictEqual(st.anomaly.kind, 'memory_near_limit', JSON.stringify(st));
  assert.ok(st.anomaly.cost.heap_windows >= 1, JSON.stringify(st.anomaly));
  const heapWindows = pinned();
  const t = Date.now() - Date.parse(near.ts);
  assert.ok(heapWindows <= 1 + Math.log2(1 + t / 10000), `${heapWindows} heap windows in ${t} ms`);
  assert.strictEqual((await L.stopDaemon(d, { signal: 'SIGTERM' })).code, 0, d.tail());
  const eps = L.anomalies(store, ['--kind', 'memory_near_limit']);
  assert.strictEqual(eps.length, 1, JSON.stringify(eps));
  assert.strictEqual(eps[0].worker, 'dn');
  assert.strictEqual(eps[0].threshold, Math.floor(0.1 * 256 * MIB), JSON.stringify(eps[0]));
  assert.strictEqual(eps[0].limit, 256 * MIB, JSON.stringify(eps[0]));
  assert.strictEqual(eps[0].limit_source, 'auto:flag', JSON.stringify(eps[0]));
  const heap = L.windows(store, ['--anomaly', 'memory_near_limit', '--type', 'heap']);
  assert.ok(heap.length >= 1 && heap.every((w) => w.runtime === 'deno' && w.worker === 'dn'), JSON.stringify(heap));
  assert.strictEqual(d.count((l) => l.level === 'error'), 0, d.tail());
  await L.stop(deno);
});
