// A real Deno isolate (from the npm registry): discovered, profiled, its
// hot function named with file and line in go tool pprof.
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const path = require('node:path');
const L = require('./lib');

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
