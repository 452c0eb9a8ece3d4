// Pyroscope at fleet scale, against the loopback ingest server: the
// series a host makes stay few and stable. One Node process, the agent
// restarted twice: one series per profile type (its isolate label, on
// here, is the process's, not the agent run's). A job runner that starts
// an unnamed Worker every 2 s: one series per thread label ("main" and the
// script's file name), not one per job, while the store keeps each job's
// thread id. The server's acceptance window: after an outage of twice
// that window, the windows still young arrive, the older ones are expired
// and never sent, and nothing else is lost; `isoprof upload --since`
// sends them on demand once the server takes them.
'use strict';
const { test, after } = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const L = require('./lib');
const { startIngestServer } = require('./ingest-server');

after(L.cleanup);

const LIGHT = path.join(L.WORKLOADS, 'node-light.js');
const JOBS = path.join(L.WORKLOADS, 'node-jobs.js');

function uploadYaml(srv, extra = []) {
  return [
    'upload:',
    `  url: "${srv.url}"`,
    '  timeout: 2s',
    '  host: "test-host"',
    '  backoff: {min: 100ms, max: 1s}',
    '  batch: {max_profiles: 8, max_delay: 300ms}',
    ...extra,
  ].join('\n');
}

const windowsOf = (store) => (fs.existsSync(store) ? L.windows(store) : []);

// A series: the profile type and its labels, as the server keys it.
const seriesKey = (p) => JSON.stringify(Object.entries(p.labels).sort());
function seriesByType(srv) {
  const m = new Map();
  for (const p of srv.profiles) {
    const t = p.labels.__name__;
    if (!m.has(t)) m.set(t, new Set());
    m.get(t).add(seriesKey(p));
  }
  return m;
}

async function drained(store, d, ok, timeoutMs) {
  await L.waitFor(() => {
    if (!d.alive()) throw new Error(`isoprofd exited:\n${d.tail()}`);
    const ws = windowsOf(store);
    return ws.length > 0 && ws.every((w) => ok.includes(w.upload));
  }, timeoutMs, `every stored window ${ok.join(' or ')}`);
}

test('one process, the agent restarted twice: one series per profile type', { timeout: 150000 }, async () => {
  const dir = L.tmpdir();
  const srv = await startIngestServer({ dir: path.join(dir, 'ingest') });
  const node = await L.startNode(LIGHT);
  const store = path.join(dir, 'store');
  const cfg = L.yamlConfig({
    store, targets: [{ port: node.port, worker: 'checkout', version: 'v1' }],
    duration: '1s', period: '1500ms', heap: '{period: 2s}',
    extra: uploadYaml(srv, ['  isolate_label: true']),
  });
  for (let run = 0; run < 3; run++) {
    const d = await L.startDaemon(cfg, { dir });
    const before = srv.profiles.length;
    await L.waitFor(() => {
      if (!d.alive()) throw new Error(`isoprofd exited:\n${d.tail()}`);
      const got = srv.profiles.slice(before);
      return got.some((p) => p.labels.__name__ === 'process_cpu') && got.some((p) => p.labels.__name__ === 'memory');
    }, 60000, `run ${run}: a CPU and a heap profile uploaded`);
    const r = await L.stopDaemon(d, { timeoutMs: 20000 });
    assert.strictEqual(r.code, 0, d.tail());
  }
  await L.stop(node);
  const ws = L.windows(store);
  assert.strictEqual(new Set(ws.map((w) => w.isolate)).size, 1, 'the same isolate number in every run');
  const byType = seriesByType(srv);
  assert.deepStrictEqual([...byType.keys()].sort(), ['memory', 'process_cpu']);
  for (const [t, set] of byType) assert.strictEqual(set.size, 1, `${t}: ${[...set].join(' | ')}`);
  const one = srv.profiles.find((p) => p.labels.__name__ === 'process_cpu');
  assert.strictEqual(one.labels.isolate, String((ws[0].isolate & 0xfffff000) >>> 0));
  assert.ok(!('pid' in one.labels));
  L.storeCheck(store);
  await srv.close();
});

test('a job runner starting a Worker every 2 s: one series per thread label', { timeout: 120000 }, async () => {
  const dir = L.tmpdir();
  const srv = await startIngestServer({ dir: path.join(dir, 'ingest') });
  const node = await L.startNode(JOBS);
  const store = path.join(dir, 'store');
  const cfg = L.yamlConfig({
    store, targets: [{ port: node.port, worker: 'jobs', version: 'v1' }],
    duration: '1s', period: '1200ms', jitter: '0%', heap: '{period: 5s}',
    extra: uploadYaml(srv),
  });
  const d = await L.startDaemon(cfg, { dir });
  // 30 s of jobs (15 of them) shows what 60 s would: every job a new thread.
  await L.sleep(30000);
  const jobThreads = () => new Set(windowsOf(store).filter((w) => w.thread !== 'main').map((w) => w.thread));
  await L.waitFor(() => jobThreads().size >= 3, 30000, 'windows of three jobs');
  await L.stop(node);
  await L.sleep(1500);
  await drained(store, d, ['uploaded'], 30000);
  const r = await L.stopDaemon(d);
  assert.strictEqual(r.code, 0, d.tail());

  const ws = L.windows(store);
  const threads = jobThreads();
  // The store keeps each job's thread id; the label says what it runs.
  for (const t of threads) assert.match(t, /^node-jobs\.js#\d+$/);
  const labels = new Set(ws.map((w) => w.thread.replace(/#\d+$/, '')));
  assert.deepStrictEqual([...labels].sort(), ['main', 'node-jobs.js']);
  const cpu = srv.profiles.filter((p) => p.labels.__name__ === 'process_cpu');
  const series = new Set(cpu.map(seriesKey));
  assert.ok(series.size <= labels.size, `${series.size} process_cpu series for ${labels.size} thread labels: ${[...series].join(' | ')}`);
  assert.deepStrictEqual([...new Set(cpu.map((p) => p.labels.thread))].sort(), ['main', 'node-jobs.js']);
  assert.ok(cpu.every((p) => !('isolate' in p.labels)), 'no per-process label by default');
  L.storeCheck(store);
  await srv.close();
});

test('an outage of twice the server\'s acceptance window: young windows arrive, older ones expire unsent, nothing else is lost', { timeout: 150000 }, async () => {
  const N = 15; // the server refuses profiles older than N s (newer than 10 s ahead)
  const dir = L.tmpdir();
  const srv = await startIngestServer({ dir: path.join(dir, 'ingest'), window: { olderThanS: N, newerThanS: 10 } });
  const node = await L.startNode(LIGHT);
  const store = path.join(dir, 'store');
  const cfg = L.yamlConfig({
    store, targets: [{ port: node.port, worker: 'checkout', version: 'v1' }],
    duration: '1s', period: '1500ms', heap: '{period: 4s}',
    extra: uploadYaml(srv, [`  max_age: ${N}s`]),
  });
  const d = await L.startDaemon(cfg, { dir });
  await L.waitFor(() => srv.profiles.length >= 2, 30000, 'two profiles before the outage');
  await srv.pause();
  const outageStart = Date.now();
  await L.sleep(2 * N * 1000);
  await srv.resume();
  const back = Date.now();
  await d.waitLog((l) => l.msg === 'windows expired unsent during the upload outage, kept in the store', 30000, 'the outage\'s expiry logged');
  await L.stop(node);
  await L.sleep(1500);
  await drained(store, d, ['uploaded', 'expired'], 30000);
  // /status reads the store's figures every few seconds
  const nExpired = L.windows(store).filter((w) => w.upload === 'expired').length;
  const st = await L.waitFor(() => { const x = L.status(store); return x.outbox.expired === nExpired ? x : null; },
    20000, `isoprof status to count ${nExpired} expired`);
  const r = await L.stopDaemon(d);
  assert.strictEqual(r.code, 0, d.tail());

  const ws = L.windows(store);
  const sent = new Set(srv.profiles.map((p) => p.id));
  const expired = ws.filter((w) => w.upload === 'expired');
  const uploaded = ws.filter((w) => w.upload === 'uploaded');
  assert.strictEqual(expired.length + uploaded.length, ws.length, 'every window uploaded or expired');
  assert.ok(expired.length >= 5, `windows of the outage's first half expired (${expired.length})`);
  for (const w of expired) {
    assert.ok(!sent.has(w.id), `expired window ${w.id} never arrived`);
    assert.ok(Date.parse(w.start) < back - N * 1000 + 2000, `expired ${w.start}: older than the window when the server came back`);
    assert.ok(Date.parse(w.start) >= outageStart - 5000, 'only windows of the outage expired');
  }
  for (const w of uploaded) assert.ok(sent.has(w.id), `uploaded window ${w.id} arrived`);
  const young = uploaded.filter((w) => Date.parse(w.start) > outageStart + N * 1000 + 3000 && Date.parse(w.start) < back);
  assert.ok(young.length >= 3, `windows of the outage's last N s arrived (${young.length})`);
  // The server refused nothing (a window leaving on the way would be
  // refused as too old and then expired, never rejected).
  assert.ok(srv.windowRefused.every((x) => x.why === 'old' && expired.some((w) => w.id === x.id)));
  assert.strictEqual(d.count((l) => l.msg === 'windows expired unsent during the upload outage, kept in the store'), 1, 'logged once');
  assert.strictEqual(st.outbox.expired, expired.length);
  assert.ok(st.upload.profiles_expired >= expired.length - srv.windowRefused.length);
  L.storeCheck(store);

  // A backfill: `isoprof upload --since` sends the outage's windows again:
  // refused while the server keeps its window (the old ones), accepted
  // once it is raised; the store is only read. (cliAsync: the server runs
  // in this process.)
  const since = new Date(outageStart).toISOString();
  // Old when the replay starts: refused whenever it is sent (the replay is
  // paced by max_rate, so a window young at the start may be sent in time
  // and be old by the end).
  const replayStart = Date.now();
  const refused = await L.cliAsync(['upload', '--store', store, '--config', d.config, '--since', since, '--type', 'cpu']);
  assert.strictEqual(refused.status, 1, refused.stderr);
  const outageCpu = ws.filter((w) => w.type === 'cpu' && Date.parse(w.start) >= outageStart);
  const old = outageCpu.filter((w) => Date.parse(w.start) < replayStart - N * 1000).length;
  assert.match(refused.stdout, new RegExp(`^${outageCpu.length} windows: \\d+ accepted, (\\d+) refused`));
  assert.ok(Number(/, (\d+) refused/.exec(refused.stdout)[1]) >= old, refused.stdout);
  assert.match(refused.stdout, /first refused: \S+, status 400: outside of ingestion window \(profile timestamp: .*starts at/);
  srv.acceptWindow(null);
  const n0 = srv.profiles.length;
  const ok = await L.cliAsync(['upload', '--store', store, '--config', d.config, '--since', since, '--json']);
  assert.strictEqual(ok.status, 0, ok.stderr + ok.stdout);
  const res = JSON.parse(ok.stdout);
  const outage = ws.filter((w) => Date.parse(w.start) >= outageStart);
  assert.deepStrictEqual([res.windows, res.accepted, res.refused], [outage.length, outage.length, 0]);
  const again = new Set(srv.profiles.slice(n0).map((p) => p.id));
  for (const w of expired) assert.ok(again.has(w.id), `expired window ${w.id} sent on demand`);
  assert.deepStrictEqual(L.windows(store).filter((w) => w.upload === 'expired').map((w) => w.id).sort(),
    expired.map((w) => w.id).sort(), 'the store is only read');
  const none = await L.cliAsync(['upload', '--store', store, '--config', d.config, '--since', '+1h']);
  assert.strictEqual(none.status, 1);
  assert.match(none.stderr, /no window matches/);
  await srv.close();
});
