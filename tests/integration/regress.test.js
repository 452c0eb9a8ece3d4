// Deploy regressions with real Node: two workers run v1, then both are
// redeployed (new processes, a config reload that gives them the version
// label v2). The ledger's v2 walks each document's subtree in its JSON
// replacer (walkNested, about 30 % of its CPU): flagged against v1, naming
// walkNested. The other worker's v2 is the same code: judged, not flagged.
// `isoprof compare` shows both; the uploads of the ledger's v2 windows
// carry anomaly=version_regression.
//
// Short on purpose (the suite's wall time): 2 s windows at 1 ms every 3 s
// give ~1,200 busy samples a window, so each version is judged from its
// third window (min_windows); every wait is on a condition.
'use strict';
const { test, after } = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const L = require('./lib');
const { startIngestServer } = require('./ingest-server');

after(L.cleanup);

const REPLACER = path.join(L.WORKLOADS, 'node-replacer.js');
const startReplacer = (variant) => L.startNode(REPLACER, { env: { REPLACER_VARIANT: variant } });

test('a deploy that makes the replacer walk subtrees is flagged, naming walkNested; the same code redeployed is not', { timeout: 240000 }, async () => {
  const dir = L.tmpdir();
  const srv = await startIngestServer({ dir: path.join(dir, 'ingest') });
  const store = path.join(dir, 'store');
  const [ledger1, same1] = await Promise.all([startReplacer('v1'), startReplacer('v1')]);
  const upload = ['upload:', `  url: "${srv.url}"`, '  host: "test-host"',
    '  batch: {max_profiles: 8, max_delay: 300ms}', '  max_rate: 0B'].join('\n');
  const config = (ledgerPort, samePort, version) => L.yamlConfig({
    store, duration: '2s', period: '3s', interval: '1ms', jitter: '5%',
    targets: [{ port: ledgerPort, worker: 'ledger', version }, { port: samePort, worker: 'same', version }],
    anomaly: '{latency: {listen: ""}, regression: {min_samples: 1000, extra_windows: 4, warmup: 2500ms}}',
    extra: upload,
  });
  const d = await L.startDaemon(config(ledger1.port, same1.port, 'v1'), { dir });
  const agg = (worker, version, busy, from = 0) => d.waitLog((l) => l.msg === 'version aggregate' &&
    l.worker === worker && l.version === version && Number(l.busy) >= busy && Number(l.windows) >= 3,
  90000, `${worker} ${version} at ${busy} busy samples in 3 windows`, from);
  // v1 runs until each worker's aggregate holds a few windows' worth (a
  // version is judged from anomaly.regression.min_windows, 3, windows).
  await Promise.all([agg('ledger', 'v1', 2500), agg('same', 'v1', 2500)]);

  // The deploy: new processes, the config reloaded with the new label.
  const [ledger2, same2] = await Promise.all([startReplacer('v2'), startReplacer('v1')]);
  fs.writeFileSync(d.config, config(ledger2.port, same2.port, 'v2'));
  process.kill(d.pid, 'SIGHUP');
  const rel = await d.waitLog((l) => l.msg === 'config reloaded', 30000, 'the reload');
  await Promise.all([L.stop(ledger1), L.stop(same1)]);

  const flag = await d.waitLog((l) => l.msg === 'anomaly flagged' && l.kind === 'version_regression' &&
    l.worker === 'ledger', 90000, 'the ledger flagged', rel.seq);
  assert.strictEqual(flag.version, 'v2');
  assert.strictEqual(flag.baseline, 'v1');
  // Re-judged with each window: walkNested is named once the replacer
  // above it has grown beyond doubt too (the caller check).
  const named = () => L.anomalies(store, ['--kind', 'version_regression']).find((a) =>
    a.worker === 'ledger' && (a.functions || []).some((f) => f.name === 'walkNested'));
  await L.waitFor(named, 30000, 'the ledger\'s regression naming walkNested');
  // The same code redeployed: judged (twice, to give it a chance to go
  // wrong), never flagged.
  await L.waitFor(() => d.count((l) => l.msg === 'version aggregate' && l.worker === 'same' &&
    l.version === 'v2' && l.judged === '1' && l.seq > rel.seq) >= 2, 40000, 'the same code judged twice');
  assert.strictEqual(d.count((l) => l.msg === 'anomaly flagged' && l.worker === 'same'), 0, d.story());

  const an = L.anomalies(store, ['--kind', 'version_regression']);
  assert.strictEqual(an.length, 1, JSON.stringify(an));
  assert.strictEqual(an[0].worker, 'ledger');
  assert.strictEqual(an[0].version, 'v2');
  assert.strictEqual(an[0].baseline, 'v1');
  const walk = an[0].functions.find((f) => f.name === 'walkNested');
  assert.ok(walk, JSON.stringify(an[0]));
  assert.ok(walk.share_before < 0.01 && walk.share_after > 0.15, JSON.stringify(walk));
  assert.ok(walk.p_adj < 1e-4 && walk.z > 5, JSON.stringify(walk));
  assert.ok(an[0].windows.length >= 2, 'it pins the windows it was computed from');

  // isoprof compare shows both: the ledger's regression with walkNested
  // grown from nothing, the same code without one.
  const cmp = (worker, extra = []) => {
    const r = L.cli(['compare', '--store', store, '--worker', worker, '--from', 'v1', '--to', 'v2', ...extra]);
    assert.strictEqual(r.status, 0, r.stderr);
    return r.stdout;
  };
  const lj = JSON.parse(cmp('ledger', ['--json']));
  assert.strictEqual(lj.verdict, 'regression', JSON.stringify(lj).slice(0, 2000));
  const lw = lj.grown.find((g) => g.name === 'walkNested');
  assert.ok(lw && lw.regression && lw.share_before === 0 && lw.ratio === null && lw.caller === 'replacer', JSON.stringify(lw));
  assert.ok(lj.from.busy >= 1000 && lj.to.busy >= 1000 && lj.to.cpu > 0, JSON.stringify(lj.to));
  const sj = JSON.parse(cmp('same', ['--json']));
  assert.strictEqual(sj.verdict, 'no_regression', JSON.stringify(sj).slice(0, 2000));
  assert.strictEqual(sj.regressions, 0);
  assert.match(cmp('ledger'), /verdict: REGRESSION[^\n]*\n[\s\S]*walkNested/);
  assert.match(cmp('same'), /verdict: no regression/);
  // ... and a diff flame graph of the two aggregates.
  const html = path.join(dir, 'ledger.html');
  cmp('ledger', ['--html', html]);
  const page = fs.readFileSync(html, 'utf8');
  assert.ok(page.includes('walkNested') && /<html/i.test(page), 'the page names walkNested');
  // top over a version's aggregate.
  const top = L.cli(['top', '--store', store, '--worker', 'ledger', '--version', 'v2', '-n', '5']);
  assert.strictEqual(top.status, 0, top.stderr);
  assert.match(top.stdout, /the aggregate of ledger v2/);
  assert.match(top.stdout, /walkNested/);

  // Uploads: the ledger's v2 windows stored from the flag on carry the
  // label; no window of the same code does.
  await L.waitFor(() => srv.profiles.some((p) => p.labels.service_name === 'ledger' &&
    p.labels.version === 'v2' && p.labels.anomaly === 'version_regression'), 30000, 'a labelled upload');
  assert.ok(!srv.profiles.some((p) => p.labels.service_name === 'same' && p.labels.anomaly), 'the same code is never labelled');
  assert.ok(!srv.profiles.some((p) => p.labels.version === 'v1' && p.labels.anomaly), 'nor is the baseline');

  const r = await L.stopDaemon(d);
  assert.strictEqual(r.code, 0, d.tail());
  L.storeCheck(store);
  await srv.close();
});
