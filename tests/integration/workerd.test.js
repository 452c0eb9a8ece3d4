// workerd from the npm registry: one target per service, worker = service
// name; a second client evicting the agent's session makes the agent back
// off instead of fighting, and it resumes after the other client leaves.
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const path = require('node:path');
const L = require('./lib');

test('workerd: per-service targets, hot function, eviction backs off then resumes', { timeout: 360000 }, async () => {
  const services = [{ name: 'alpha', port: await L.freePort() }, { name: 'beta', port: await L.freePort() }];
  const wd = await L.startWorkerd(path.join(L.WORKLOADS, 'worker-hot.js'), services);
  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  const d = await L.startDaemon(L.yamlConfig({ store, targets: [{ port: wd.port, version: 'w1' }] }), { dir });
  let loads = [];
  try {
    await L.waitFor(() => d.count((l) => l.msg === 'target attached') >= 2, 60000, 'both services attached');
    // Traffic starts once each isolate has had a profiler: V8 keeps the
    // positions of inlined frames only in code compiled after that.
    await L.waitFor(() => ['alpha', 'beta'].every((w) => d.count((l) => l.msg === 'window started' && l.worker === w) >= 1),
      60000, 'a window started on each service');
    loads = services.map((s) => L.loadLoop(s.port));
    const names = d.lines.filter((l) => l.msg === 'target attached').map((l) => l.worker).sort();
    assert.deepStrictEqual(names, ['alpha', 'beta']);
    assert.ok(d.lines.filter((l) => l.msg === 'target attached').every((l) => l.runtime === 'workerd'));
    // memory_limit auto: workerd's isolate limit, 128 MiB.
    await L.waitFor(() => d.count((l) => l.msg === 'heap limit') >= 2, 30000, 'both limits');
    for (const l of d.lines.filter((x) => x.msg === 'heap limit')) {
      assert.strictEqual(l.source, 'auto:workerd', l.raw);
      assert.strictEqual(Number(l.limit), 128 * 1024 * 1024, l.raw);
    }
    await L.waitFor(() => ['alpha', 'beta'].every((w) => d.count((l) => l.msg === 'window stored' && l.worker === w) >= 2),
      60000, 'windows of each service');

    const file = L.exportTo(store, ['--worker', 'alpha', '--type', 'cpu'], path.join(dir, 'alpha.pb.gz'));
    const rows = L.pprofTop(file, ['-lines']);
    const hot = rows.find((r) => /^workerCrunch /.test(r.name));
    assert.ok(hot, `workerCrunch in ${JSON.stringify(rows.slice(0, 5))}`);
    assert.match(hot.name, /worker\.js:\d+$/);
    assert.match(L.goPprof(['-raw', file]), /workerCrunch .*worker\.js:3 s=3/);

    // A second client (a person with DevTools) takes alpha's session.
    const evictions = d.count((l) => l.msg === 'session evicted, backing off' && l.worker === 'alpha');
    const attachesBefore = d.count((l) => l.msg === 'target attached' && l.worker === 'alpha');
    const intruder = new WebSocket(`ws://127.0.0.1:${wd.port}/alpha`);
    await new Promise((resolve, reject) => { intruder.onopen = resolve; intruder.onerror = reject; });
    await d.waitLog((l) => l.msg === 'session evicted, backing off' && l.worker === 'alpha' &&
      d.count((x) => x.msg === 'session evicted, backing off' && x.worker === 'alpha') > evictions, 30000, 'eviction noticed');
    // While the other client is there the agent does not take the session back.
    await L.sleep(6000);
    assert.strictEqual(d.count((l) => l.msg === 'target attached' && l.worker === 'alpha'), attachesBefore,
      'no reattach while backing off');
    assert.ok(d.alive());
    intruder.close();
    await L.waitFor(() => d.count((l) => l.msg === 'target attached' && l.worker === 'alpha') > attachesBefore,
      180000, 'alpha reattached after the backoff');
    const storedAfter = d.count((l) => l.msg === 'window stored' && l.worker === 'alpha');
    const back = d.lines.length;
    try {
      await L.waitFor(() => d.count((l) => l.msg === 'window stored' && l.worker === 'alpha') > storedAfter, 60000,
        'alpha profiled again');
    } catch (e) {
      // Once, under ASan beside a CPU hog, no window of alpha came in the
      // minute after its reattach: what the daemon said since of alpha, of
      // workerd's endpoint, and every warning.
      const ep = `127.0.0.1:${wd.port}`;
      const said = d.lines.slice(back).filter((l) => l.inspector === ep || l.level === 'warn' || l.level === 'error' ||
        (l.worker === 'alpha' && l.level !== 'debug'));
      e.message += `\n--- since alpha's reattach ---\n${said.slice(-80).map((l) => l.raw).join('\n')}`;
      throw e;
    }
    // beta was never disturbed.
    assert.strictEqual(d.count((l) => l.msg === 'session dropped' && l.worker === 'beta'), 0);
  } finally {
    loads.forEach((l) => l.stop());
  }
  assert.strictEqual((await L.stopDaemon(d)).code, 0);
  assert.strictEqual(L.cli(['store', 'check', '--store', store]).status, 0);
  const ws = L.windows(store);
  assert.ok(ws.every((w) => w.runtime === 'workerd' && w.version === 'w1'));
  await L.stop(wd);
});
