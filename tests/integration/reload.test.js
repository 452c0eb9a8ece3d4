// Running as a service: SIGHUP reloads the config (a new target, a shorter
// period, a new log level) without dropping the sessions it keeps; an
// invalid file is refused with its problems logged and the old config kept;
// a change that needs a restart is reported. sd_notify: READY=1 once the
// store is open and the control socket listens, RELOADING=1 and READY=1
// around a reload, STOPPING=1 at the end.
'use strict';
const { test, after } = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const { spawn } = require('node:child_process');
const L = require('./lib');

after(L.cleanup);

const LIGHT = path.join(L.WORKLOADS, 'node-light.js');
const NOTIFY = process.env.ISOPROF_NOTIFY_LISTEN ||
  path.join(L.ROOT, 'build', 'tests', 'integration', 'notify-listen');

const windowsOf = (store) => (fs.existsSync(store) ? L.windows(store) : []);

test('SIGHUP: a new target and a shorter period apply; the kept session carries on', { timeout: 90000 }, async () => {
  const a = await L.startNode(LIGHT);
  const b = await L.startNode(LIGHT);
  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  const base = { store, duration: '1s', jitter: '10%', level: 'debug' };
  const d = await L.startDaemon(L.yamlConfig({ ...base, period: '60s', targets: [{ port: a.port, worker: 'kept' }] }), { dir });
  const att = await d.waitLog((l) => l.msg === 'target attached' && l.worker === 'kept', 15000, 'the first target attached');
  await d.waitLog((l) => l.msg === 'window stored' && l.worker === 'kept', 15000, 'its first window');
  const before = windowsOf(store).filter((w) => w.worker === 'kept').length;

  fs.writeFileSync(d.config, L.yamlConfig({ ...base, period: '2s', level: 'info', targets: [{ port: a.port, worker: 'kept' }, { port: b.port, worker: 'added' }] }));
  process.kill(d.pid, 'SIGHUP');
  const rel = await d.waitLog((l) => l.msg === 'config reloaded', 5000, 'the reload');
  await d.waitLog((l) => l.msg === 'target attached' && l.worker === 'added' && l.seq > rel.seq, 15000, 'the added target attached');
  // With a 2 s period the kept target now takes a window every ~2 s, not
  // one a minute.
  await L.waitFor(() => windowsOf(store).filter((w) => w.worker === 'kept').length >= before + 3, 20000, 'three more windows of the kept target');
  await L.waitFor(() => windowsOf(store).some((w) => w.worker === 'added'), 15000, 'a window of the added target');
  // Its session was not dropped: no detach, no second attach, one isolate.
  assert.strictEqual(d.count((l) => l.msg === 'target attached' && l.worker === 'kept'), 1, d.tail());
  assert.strictEqual(d.count((l) => (l.msg === 'session dropped' || l.msg === 'target detached') && l.seq > att.seq && l.worker === 'kept'), 0);
  assert.strictEqual(new Set(windowsOf(store).filter((w) => w.worker === 'kept').map((w) => w.isolate)).size, 1);
  // log.level info applies: no debug lines after the reload.
  await L.sleep(1000);
  assert.strictEqual(d.lines.filter((l) => l.seq > rel.seq && l.level === 'debug').length, 0);

  // Dropping a target from the file detaches it.
  fs.writeFileSync(d.config, L.yamlConfig({ ...base, period: '2s', level: 'info', targets: [{ port: a.port, worker: 'kept' }] }));
  process.kill(d.pid, 'SIGHUP');
  await d.waitLog((l) => l.msg === 'endpoint removed', 5000, 'the endpoint removed');
  const r = await L.stopDaemon(d);
  assert.strictEqual(r.code, 0, d.tail());
  L.storeCheck(store);
  await L.stop(a);
  await L.stop(b);
});

test('SIGHUP with an invalid file: refused, problems logged, the old config runs on', { timeout: 60000 }, async () => {
  const node = await L.startNode(LIGHT);
  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  const cfg = L.yamlConfig({ store, duration: '1s', period: '2s', targets: [{ port: node.port, worker: 'steady' }] });
  const d = await L.startDaemon(cfg, { dir });
  await d.waitLog((l) => l.msg === 'window stored', 15000, 'a window');
  fs.writeFileSync(d.config, cfg.replace('period: 2s', 'period: soon') + 'bogus_key: 1\n');
  process.kill(d.pid, 'SIGHUP');
  const ref = await d.waitLog((l) => l.msg === 'reload refused, the running config is kept', 5000, 'the refusal');
  assert.strictEqual(ref.level, 'error');
  const problems = d.lines.filter((l) => l.msg === 'reload: config problem').map((l) => l.problem);
  assert.ok(problems.some((p) => /sampling\.cpu\.period/.test(p) && /:\d+:\d+:/.test(p)), problems.join('\n'));
  assert.ok(problems.some((p) => /bogus_key/.test(p)), problems.join('\n'));
  // Windows go on at the old schedule.
  await d.waitLog((l) => l.msg === 'window stored' && l.seq > ref.seq, 10000, 'a window after the refusal');
  // A restart-only change is reported, the rest applied.
  fs.writeFileSync(d.config, cfg.replace(`path: ${JSON.stringify(store)}`, `path: ${JSON.stringify(store + '-other')}`).replace('level: debug', 'level: info'));
  process.kill(d.pid, 'SIGHUP');
  const warn = await d.waitLog((l) => l.msg === 'reload: not applied until a restart', 5000, 'the restart-only warning');
  assert.match(warn.problem, /store\.path/);
  await d.waitLog((l) => l.msg === 'config reloaded', 5000, 'the reload');
  assert.ok(d.alive());
  const r = await L.stopDaemon(d);
  assert.strictEqual(r.code, 0, d.tail());
  assert.ok(!fs.existsSync(store + '-other'), 'the store was not moved');
  L.storeCheck(store);
  await L.stop(node);
});

test('SIGHUP with new upload labels: the uploader restarts, later windows carry them, no ack is lost', { timeout: 60000 }, async () => {
  const { startIngestServer } = require('./ingest-server');
  const node = await L.startNode(LIGHT);
  const dir = L.tmpdir();
  const srv = await startIngestServer({ dir: path.join(dir, 'ingest') });
  const store = path.join(dir, 'store');
  const up = (team) => `upload: {url: "${srv.url}", host: h, labels: {team: ${team}}, batch: {max_delay: 200ms}}`;
  const cfg = (team) => L.yamlConfig({ store, duration: '1s', period: '2s', targets: [{ port: node.port, worker: 'relabel' }], extra: up(team) });
  const d = await L.startDaemon(cfg('a'), { dir });
  await L.waitFor(() => srv.profiles.length >= 2, 20000, 'two profiles labelled team=a');
  fs.writeFileSync(d.config, cfg('b'));
  process.kill(d.pid, 'SIGHUP');
  await d.waitLog((l) => l.msg === 'upload settings applied', 10000, 'the uploader restarted');
  await L.waitFor(() => srv.profiles.some((p) => p.labels.team === 'b'), 20000, 'a profile labelled team=b');
  await L.stop(node);
  await L.sleep(1500);
  await L.waitFor(() => windowsOf(store).every((w) => w.upload === 'uploaded'), 20000, 'every window uploaded');
  const r = await L.stopDaemon(d);
  assert.strictEqual(r.code, 0, d.tail());
  // Only a request in flight at the reload may go twice (it is cancelled
  // and its batch resent with the new settings).
  const ids = srv.profiles.map((p) => p.id);
  assert.ok(ids.length - new Set(ids).size <= 1, `${ids.length - new Set(ids).size} windows sent twice`);
  assert.strictEqual(new Set(ids).size, windowsOf(store).length);
  await srv.close();
});

test('sd_notify: READY=1 after start, RELOADING=1/READY=1 around a reload, STOPPING=1', { timeout: 60000 }, async () => {
  if (!fs.existsSync(NOTIFY)) throw new Error(`${NOTIFY} not found: build the tree (or set ISOPROF_NOTIFY_LISTEN)`);
  const dir = L.tmpdir();
  const sock = path.join(dir, 'notify.sock');
  const lst = L.track(spawn(NOTIFY, [sock, '50'], { stdio: ['ignore', 'pipe', 'pipe'] }), 'notify-listen');
  let out = '';
  lst.stdout.on('data', (x) => { out += x; });
  await L.waitFor(() => out.includes('listening'), 5000, 'the notify socket');
  const store = path.join(dir, 'store');
  const d = await L.startDaemon(L.yamlConfig({ store, targets: [] }), { dir, env: { NOTIFY_SOCKET: sock } });
  await L.waitFor(() => /READY=1/.test(out), 10000, 'READY=1');
  assert.match(out, /STATUS=running/);
  process.kill(d.pid, 'SIGHUP');
  await L.waitFor(() => /RELOADING=1[\s\S]*READY=1[^\n]*config reloaded/.test(out), 10000, 'RELOADING=1 then READY=1');
  const r = await L.stopDaemon(d);
  assert.strictEqual(r.code, 0, d.tail());
  await L.waitFor(() => /STOPPING=1/.test(out), 5000, 'STOPPING=1');
  assert.ok(!d.lines.some((l) => l.msg === 'loop closed with handles open'), d.tail());
  await L.stop(lst);
});
