// The upload to Grafana Pyroscope, against the loopback test ingest server
// (ingest-server.js): every stored window arrives with its labels and reads
// in go tool pprof; an outage (refused, 503, 429 + Retry-After) loses
// nothing and does not storm; kill -9 during uploads loses nothing; a 400
// rejects only the windows it refuses, which stay in the store; a hostile
// server (huge Content-Length, garbage, a slow drip) is timed out and the
// daemon carries on; the legacy /ingest endpoint.
'use strict';
const { test, after } = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const L = require('./lib');
const { startIngestServer } = require('./ingest-server');

after(L.cleanup);

const LIGHT = path.join(L.WORKLOADS, 'node-light.js');

// The upload section of the config (YAML), url from the server.
function uploadYaml(srv, { api = 'push', maxProfiles = 32, maxDelay = '500ms', timeout = '2s', extra = [] } = {}) {
  return [
    'upload:',
    `  url: "${srv.url}"`,
    `  api: ${api}`,
    `  timeout: ${timeout}`,
    '  host: "test-host"',
    `  batch: {max_profiles: ${maxProfiles}, max_delay: ${maxDelay}}`,
    // what these tests time (deliveries, backoff) is not the rate limit's
    '  max_rate: 0B',
    ...extra,
  ].join('\n');
}

// The windows of a store that may not exist yet.
const windowsOf = (store) => (fs.existsSync(store) ? L.windows(store) : []);

// Stops the targets (so no window is stored after this), waits until every
// stored window is uploaded or rejected, then stops the daemon (exit 0).
async function finish(store, d, targets, timeoutMs) {
  for (const t of targets) await L.stop(t);
  await L.sleep(1500); // a window being converted when its target went is stored by now
  await L.waitFor(() => {
    if (!d.alive()) throw new Error(`isoprofd exited:\n${d.tail()}`);
    const ws = windowsOf(store);
    return ws.length > 0 && ws.every((w) => w.upload === 'uploaded' || w.upload === 'rejected');
  }, timeoutMs, 'every stored window uploaded');
  const r = await L.stopDaemon(d);
  assert.strictEqual(r.code, 0, d.tail());
  L.storeCheck(store);
}

// The profiles the server recorded, by window id (an id may come twice).
function byId(srv) {
  const m = new Map();
  for (const p of srv.profiles) {
    if (!m.has(p.id)) m.set(p.id, []);
    m.get(p.id).push(p);
  }
  return m;
}

test('every stored window arrives with its labels and reads in go tool pprof', { timeout: 90000 }, async () => {
  const dir = L.tmpdir();
  const srv = await startIngestServer({ dir: path.join(dir, 'ingest') });
  const node = await L.startNode(LIGHT);
  const store = path.join(dir, 'store');
  const token = 'tok-5ecret-8c1f';
  fs.writeFileSync(path.join(dir, 'token'), `${token}\n`);
  const cfg = L.yamlConfig({
    store, targets: [{ port: node.port, worker: 'checkout', version: 'v42' }],
    heap: '{period: 2s}',
    extra: uploadYaml(srv, {
      maxProfiles: 4,
      extra: ['  tenant_id: "team-a"', `  bearer_token_file: "${path.join(dir, 'token')}"`,
        '  labels: {region: "eu-1", team: "sre"}', '  headers: {X-Test: "yes"}'],
    }),
  });
  const d = await L.startDaemon(cfg, { dir });
  await d.waitLog((l) => l.msg === 'upload started', 5000, 'upload started');
  await L.waitFor(() => windowsOf(store).filter((w) => w.type === 'cpu').length >= 3 &&
    windowsOf(store).some((w) => w.type === 'heap'), 40000, 'three CPU windows and a heap window');
  await finish(store, d, [node], 20000);
  assert.ok(!d.raw.includes(token), 'the bearer token is never logged');

  const ws = L.windows(store);
  const got = byId(srv);
  let read = 0;
  for (const w of ws) {
    assert.strictEqual(w.upload, 'uploaded', JSON.stringify(w));
    const ps = got.get(w.id);
    assert.ok(ps && ps.length === 1, `window ${w.id} arrived once (${ps ? ps.length : 0})`);
    const p = ps[0];
    assert.strictEqual(p.api, 'push');
    const want = {
      __name__: w.type === 'heap' ? 'memory' : 'process_cpu', service_name: 'checkout', version: 'v42',
      host: 'test-host', runtime: w.runtime, thread: w.thread, region: 'eu-1', team: 'sre',
    };
    assert.strictEqual(w.thread, 'main');
    if (w.type === 'heap') want.__delta__ = 'false';
    assert.deepStrictEqual(p.labels, want, `labels of ${w.id}`);
    assert.strictEqual(p.headers['x-scope-orgid'], 'team-a');
    assert.strictEqual(p.headers.authorization, `Bearer ${token}`);
    assert.strictEqual(p.headers['x-test'], 'yes');
    assert.strictEqual(p.headers['connect-protocol-version'], '1');
    assert.ok(p.gzip, 'the profile is sent gzip\'d');
    if (read < 6 || w.type === 'heap') {
      const top = L.goPprof(['-top', p.file]);
      assert.match(top, w.type === 'heap' ? /inuse_space|Type: inuse/ : /Type: (cpu|samples)/);
      read++;
    }
  }
  assert.strictEqual(got.size, ws.length, 'nothing arrived that is not in the store');
  // A batch held several windows (max_profiles 4, max_delay 500ms).
  assert.ok(srv.requests.every((q) => q.profiles <= 4));
  const st = L.cli(['store', 'stat', '--store', store]);
  assert.strictEqual(st.status, 0, st.stderr);
  assert.match(st.stdout, /outbox\s+empty/);
  assert.match(st.stdout, new RegExp(`${ws.length} uploaded, 0 rejected`));
  await srv.close();
});

// A target's labels (Pyroscope's links to the code) go with every profile
// of that target, and replace an upload.labels entry of the same name; a
// target without labels keeps the static ones; a reload changing them
// applies to the windows taken after it.
test('a target\'s labels go with its profiles and override upload.labels', { timeout: 90000 }, async () => {
  const dir = L.tmpdir();
  const srv = await startIngestServer({ dir: path.join(dir, 'ingest') });
  const a = await L.startNode(LIGHT);
  const b = await L.startNode(LIGHT);
  const store = path.join(dir, 'store');
  const cfgFor = (ref) => L.yamlConfig({
    store,
    targets: [
      { port: a.port, worker: 'checkout', labels: { service_repository: 'https://github.com/acme/checkout', service_git_ref: ref } },
      { port: b.port, worker: 'cart' },
    ],
    extra: uploadYaml(srv, { extra: ['  labels: {region: "eu-1", service_git_ref: "main"}'] }),
  });
  const d = await L.startDaemon(cfgFor('v1.0.0'), { dir });
  await L.waitFor(() => windowsOf(store).filter((w) => w.worker === 'checkout').length >= 1 &&
    windowsOf(store).filter((w) => w.worker === 'cart').length >= 1, 40000, 'windows of both targets');
  const reloadAt = Date.now();
  fs.writeFileSync(d.config, cfgFor('v1.0.1'));
  d.kill('SIGHUP');
  await d.waitLog((l) => l.msg === 'config reloaded', 10000, 'the reload');
  const after = new Date(reloadAt + 200).toISOString();
  await L.waitFor(() => windowsOf(store).some((w) => w.worker === 'checkout' && w.start > after), 40000, 'a window after the reload');
  await finish(store, d, [a, b], 20000);
  const got = byId(srv);
  let before = 0, later = 0;
  for (const w of L.windows(store)) {
    const p = got.get(w.id)[0];
    assert.strictEqual(p.labels.region, 'eu-1');
    if (w.worker === 'cart') {
      assert.strictEqual(p.labels.service_git_ref, 'main', 'a target without labels keeps the static ones');
      assert.strictEqual(p.labels.service_repository, undefined);
      assert.strictEqual(w.labels, undefined);
      continue;
    }
    assert.strictEqual(p.labels.service_repository, 'https://github.com/acme/checkout');
    assert.deepStrictEqual(w.labels, { service_repository: 'https://github.com/acme/checkout', service_git_ref: p.labels.service_git_ref });
    if (w.start > after) { assert.strictEqual(p.labels.service_git_ref, 'v1.0.1'); later++; }
    else if (w.end < new Date(reloadAt).toISOString()) { assert.strictEqual(p.labels.service_git_ref, 'v1.0.0'); before++; }
  }
  assert.ok(before >= 1 && later >= 1, `windows before (${before}) and after (${later}) the reload`);
  await srv.close();
});

// The outage an operator sees: the ingest endpoint refuses connections a
// while, comes back answering three 503s and two 429s with Retry-After: 1,
// then 200s. The first answer ends the doubling the refusals built up, each
// Retry-After is the wait (not a floor under the doubled delay), so every
// window is delivered within upload.backoff.max (60 s) of the recovery.
test('outage: refused, then 503s and 429s with Retry-After: 1: every window delivered within 60 s of the recovery, no storm', { timeout: 240000 }, async () => {
  const dir = L.tmpdir();
  const srv = await startIngestServer({ dir: path.join(dir, 'ingest') });
  srv.pause();
  const node = await L.startNode(LIGHT);
  const store = path.join(dir, 'store');
  const cfg = L.yamlConfig({ store, targets: [{ port: node.port, worker: 'outage' }], extra: uploadYaml(srv, { maxDelay: '200ms' }) });
  const d = await L.startDaemon(cfg, { dir });
  await d.waitLog((l) => l.msg === 'window stored', 15000, 'a first window');
  // refused until the doubling has grown past 8 s (six tries: caps 0.5 ... 16 s)
  const refused = () => d.count((l) => l.msg === 'upload failed, will retry');
  await L.waitFor(() => refused() >= 6, 120000, 'six refused tries');
  const tDown = Date.now();
  const scripted = [];
  for (let i = 0; i < 3; i++) scripted.push({ status: 503, body: 'overloaded', retryAfter: 1 });
  for (let i = 0; i < 2; i++) scripted.push({ status: 429, retryAfter: 1 });
  srv.queue(scripted);
  const tUp = Date.now();
  srv.resume();
  const before = windowsOf(store).map((w) => w.id);
  assert.ok(before.length >= 1);
  await L.waitFor(() => { const got = byId(srv); return before.every((id) => got.has(id)); }, 90000, 'every window stored during the outage at the server');
  const got = byId(srv);
  const last = Math.max(...before.map((id) => got.get(id)[0].time));
  assert.ok(last - tUp <= 60000, `the last window of the outage arrived ${last - tUp} ms after the recovery`);
  // Retry-After is the wait: each scripted answer is followed ~1 s later
  const since = srv.requests.filter((q) => q.time >= tUp);
  assert.ok(since.length >= 6, `${since.length} requests since the recovery`);
  for (let i = 1; i <= 5; i++) {
    const gap = since[i].time - since[i - 1].time;
    assert.ok(gap >= 950 && gap < 10000, `request ${i + 1} came ${gap} ms after a Retry-After: 1 answer`);
  }
  // no storm: the five scripted answers, then the successful batches
  assert.ok(since.length - 5 <= before.length + 3, `${since.length} requests for ${before.length} windows`);
  d.lines.filter((l) => l.msg === 'upload failed, will retry' && Date.parse(l.ts) < tDown).forEach((l) => assert.ok(Number(l.retry_ms) <= 60000, l.raw));
  await finish(store, d, [node], 30000);
  const ws = L.windows(store);
  const all = byId(srv);
  for (const w of ws) {
    assert.strictEqual(w.upload, 'uploaded');
    // No request that failed was recorded, so nothing came twice.
    assert.strictEqual((all.get(w.id) || []).length, 1, `window ${w.id}`);
  }
  await srv.close();
});

test('kill -9 during uploads, three times, then a restart: every window delivered', { timeout: 150000 }, async () => {
  const dir = L.tmpdir();
  const srv = await startIngestServer({ dir: path.join(dir, 'ingest') });
  // Slow answers keep a request in flight most of the time.
  srv.script(() => ({ status: 200, delayMs: 400 }));
  const node = await L.startNode(LIGHT);
  const store = path.join(dir, 'store');
  const cfg = L.yamlConfig({ store, targets: [{ port: node.port, worker: 'killed' }], duration: '1s', period: '1500ms', extra: uploadYaml(srv, { maxProfiles: 1, maxDelay: '10ms' }) });
  for (let i = 0; i < 3; i++) {
    const d = await L.startDaemon(cfg, { dir });
    await d.waitLog((l) => l.msg === 'window stored', 15000, 'a window stored');
    await L.sleep(1500 + 700 * i);
    await L.stop(d, 'SIGKILL');
  }
  const before = L.windows(store);
  assert.ok(before.some((w) => w.upload === 'pending') || before.length > 0);
  srv.script(() => ({ status: 200 }));
  const d = await L.startDaemon(cfg, { dir });
  await finish(store, d, [node], 40000);
  const got = byId(srv);
  const ws = L.windows(store);
  for (const w of ws) {
    assert.strictEqual(w.upload, 'uploaded');
    assert.ok(got.has(w.id), `window ${w.id} arrived`);
  }
  // Duplicates come only from a request in flight at a kill: at most one each.
  const dups = [...got.values()].filter((ps) => ps.length > 1).length;
  assert.ok(dups <= 3, `${dups} windows arrived twice`);
  await srv.close();
});

test('a 400 rejects only the windows it refuses; they stay in the store; the rest flow', { timeout: 90000 }, async () => {
  const dir = L.tmpdir();
  const srv = await startIngestServer({ dir: path.join(dir, 'ingest') });
  srv.script((q) => (q.series && q.series.some((s) => s.labels.service_name === 'bad')
    ? { status: 400, body: 'invalid profile: bad' } : { status: 200 }));
  const good = await L.startNode(LIGHT);
  const bad = await L.startNode(LIGHT);
  const store = path.join(dir, 'store');
  const cfg = L.yamlConfig({ store, targets: [{ port: good.port, worker: 'good' }, { port: bad.port, worker: 'bad' }], extra: uploadYaml(srv, { maxDelay: '1s' }) });
  const d = await L.startDaemon(cfg, { dir });
  await L.waitFor(() => windowsOf(store).filter((w) => w.worker === 'bad').length >= 2 &&
    windowsOf(store).filter((w) => w.worker === 'good').length >= 2, 40000, 'two windows of each');
  await finish(store, d, [good, bad], 30000);
  assert.ok(d.lines.some((l) => l.msg === 'upload rejected, window kept' && l.status === '400'), 'the rejection logged');
  const got = byId(srv);
  for (const w of L.windows(store)) {
    if (w.worker === 'bad') {
      assert.strictEqual(w.upload, 'rejected', JSON.stringify(w));
      assert.strictEqual(w.upload_status, 400);
      assert.match(w.upload_reason, /invalid profile: bad/);
      assert.ok(!got.has(w.id));
      // Kept: it still exports.
      L.exportTo(store, ['--id', w.id], path.join(dir, 'bad.pb.gz'));
    } else {
      assert.strictEqual(w.upload, 'uploaded', JSON.stringify(w));
      assert.ok(got.has(w.id));
    }
  }
  await srv.close();
});

test('a hostile server: huge Content-Length, garbage, a slow drip, a reset: timed out, the daemon fine', { timeout: 120000 }, async () => {
  const dir = L.tmpdir();
  const srv = await startIngestServer({ dir: path.join(dir, 'ingest') });
  const actions = ['huge', 'garbage', 'drip', 'reset', 'hang'];
  let i = 0;
  srv.script(() => (i < actions.length ? actions[i++] : { status: 200 }));
  const node = await L.startNode(LIGHT);
  const store = path.join(dir, 'store');
  const cfg = L.yamlConfig({ store, targets: [{ port: node.port, worker: 'hostile' }], extra: uploadYaml(srv, { maxDelay: '100ms', timeout: '1500ms' }) });
  const d = await L.startDaemon(cfg, { dir });
  await L.waitFor(() => srv.profiles.length > 0, 90000, 'a profile once the server behaves');
  assert.ok(d.alive(), d.tail());
  const fails = d.lines.filter((l) => l.msg === 'upload failed, will retry');
  assert.ok(fails.length >= 1, 'the failures were reported');
  const status = fs.readFileSync(`/proc/${d.pid}/status`, 'utf8');
  const hwm = parseInt(/VmHWM:\s+(\d+)/.exec(status)[1], 10);
  // Nothing was buffered for the 1 GB Content-Length: the peak stays far
  // below it (an ASan build alone runs at about 200 MiB).
  assert.ok(hwm < 512 * 1024, `daemon peak RSS ${hwm} KiB`);
  await finish(store, d, [node], 30000);
  await srv.close();
});

test('/ingest: one multipart request a window, labels in the name, readable profiles', { timeout: 90000 }, async () => {
  const dir = L.tmpdir();
  const srv = await startIngestServer({ dir: path.join(dir, 'ingest') });
  const node = await L.startNode(LIGHT);
  const store = path.join(dir, 'store');
  const cfg = L.yamlConfig({
    store, targets: [{ port: node.port, worker: 'legacy-app', version: 'v1' }], heap: '{period: 2s}',
    extra: uploadYaml(srv, { api: 'ingest', extra: ['  labels: {zone: "z1"}'] }),
  });
  const d = await L.startDaemon(cfg, { dir });
  await L.waitFor(() => windowsOf(store).filter((w) => w.type === 'cpu').length >= 2, 40000, 'two CPU windows');
  await finish(store, d, [node], 20000);
  const ws = L.windows(store);
  assert.strictEqual(srv.profiles.length, ws.length);
  for (const p of srv.profiles) {
    assert.strictEqual(p.api, 'ingest');
    assert.strictEqual(p.labels.service_name || p.app, 'legacy-app');
    assert.strictEqual(p.labels.version, 'v1');
    assert.strictEqual(p.labels.host, 'test-host');
    assert.strictEqual(p.labels.zone, 'z1');
    assert.strictEqual(p.spyName, 'isoprof');
    assert.ok(Number(p.until) > Number(p.from) && String(p.from).length === 10, `${p.from}..${p.until}`);
  }
  assert.ok(srv.requests.every((q) => q.profiles === 1));
  const top = L.goPprof(['-top', srv.profiles[0].file]);
  assert.match(top, /Type:/);
  await srv.close();
});
