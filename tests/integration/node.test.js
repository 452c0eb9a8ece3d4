// A real Node 20 isolate: the daemon finds it, takes short CPU windows, and
// what it stored names the hot function with its file and line, both in
// `isoprof top` and in go tool pprof reading `isoprof export`.
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const path = require('node:path');
const fs = require('node:fs');
const L = require('./lib');

test('node: windows stored with labels, hot function first in go tool pprof', { timeout: 90000 }, async () => {
  const node = await L.startNode(path.join(L.WORKLOADS, 'node-hot.js'));
  const hotAt = new Date(Date.now() + 5500).toISOString(); // the workload's hot loop starts at 5 s
  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  // Back-to-back windows: V8 records where inlined frames are only in code
  // compiled while a profiler runs, and the hot loop starts at 5 s.
  const d = await L.startDaemon(L.yamlConfig({ store, targets: [{ port: node.port, version: 'v7' }], period: '2s', jitter: 0 }), { dir });
  const attached = await d.waitLog((l) => l.msg === 'target attached', 15000, 'target attached');
  assert.strictEqual(attached.worker, 'node-hot.js');
  assert.strictEqual(attached.runtime, 'node');
  // Read while the daemon writes: windows that began once the loop was hot.
  await L.waitFor(() => L.windows(store, ['--since', hotAt]).length >= 2, 40000, 'two hot windows');
  const stop = await L.stopDaemon(d);
  assert.strictEqual(stop.code, 0, d.raw.slice(-2000));
  assert.ok(stop.ms < 2500, `stopped in ${stop.ms} ms`);

  const ws = L.windows(store);
  assert.ok(ws.length >= 3, `windows: ${ws.length}`);
  for (const w of ws) {
    assert.strictEqual(w.worker, 'node-hot.js');
    assert.strictEqual(w.version, 'v7');
    assert.strictEqual(w.runtime, 'node');
    assert.strictEqual(w.type, 'cpu');
    assert.ok(w.bytes > 0);
    assert.match(w.id, /^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.ok(Math.abs(Date.parse(w.start) - Date.now()) < 120000, `start ${w.start} is near now`);
  }
  // Every window but the last (cut short by the stop) spans the configured 2 s.
  for (const w of ws.slice(0, -1)) assert.ok(Date.parse(w.end) - Date.parse(w.start) >= 1500, `${w.start} .. ${w.end}`);
  const isolates = new Set(ws.map((w) => w.isolate));
  assert.strictEqual(isolates.size, 1, 'one attach, one isolate id');

  // isoprof top: the hot function first, with file:line.
  const top = L.cli(['top', '--store', store, '--since', hotAt, '-n', '5']);
  assert.strictEqual(top.status, 0, top.stderr);
  const first = top.stdout.split('\n').find((l) => /%\s+\S/.test(l) && !/flat%/.test(l));
  assert.match(first, /crunchNumbers .*node-hot\.js:4$/);

  // One window by id, and all merged, read by go tool pprof.
  const hot = L.windows(store, ['--since', hotAt]);
  assert.ok(hot.every((w) => w.samples > 100 || Date.parse(w.end) - Date.parse(w.start) < 1500), JSON.stringify(hot));
  const one = L.exportTo(store, ['--id', hot[0].id], path.join(dir, 'one.pb.gz'));
  const rowsOne = L.pprofTop(one);
  assert.strictEqual(rowsOne[0].name, 'crunchNumbers');
  const all = L.exportTo(store, ['--worker', 'node-hot.js', '--type', 'cpu', '--since', hotAt], path.join(dir, 'all.pb.gz'));
  const rows = L.pprofTop(all, ['-lines']);
  assert.match(rows[0].name, /^crunchNumbers .*node-hot\.js:\d+$/, JSON.stringify(rows.slice(0, 3)));
  assert.ok(rows[0].flatPct > 50, `flat ${rows[0].flatPct}%`);
  const traces = L.goPprof(['-raw', all]);
  assert.match(traces, /crunchNumbers .*node-hot\.js:4 s=4/, 'function start line 4 (1-based)');
  assert.ok(fs.statSync(all).size > 0);

  const check = L.cli(['store', 'check', '--store', store]);
  assert.strictEqual(check.status, 0, check.stderr);
  await L.stop(node);
});
