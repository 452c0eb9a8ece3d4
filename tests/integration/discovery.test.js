// Host process discovery (discovery.processes): real Node processes on
// loopback, found through /proc by one daemon scanning every 500 ms with
// activate on. Each process stands for one rule:
//   optin      --inspect-port=0, no inspector: opened with SIGUSR1, profiled
//              (its script's name has odd bytes: quotes, a backslash, é;
//              not a newline or a tab, which Node 20 writes raw into the
//              JSON of /json/list, so no client can read that list);
//   open       --inspect=127.0.0.1:0: found as it is, never signalled;
//              its script is in an app's tree whose package.json has a
//              version: its windows carry it (version_from);
//   named      --inspect=127.0.0.1:0 and named in targets: the config wins
//              (its label, no found endpoint), its windows get its pid and
//              the version of its environment's APP_VERSION;
//   plain      no opt-in, an HTTP server on loopback: probed, not an
//              inspector, never signalled, no inspector opens;
//   refused    --inspect-port=0.0.0.0:0: an opt-in on a host that is not
//              loopback, refused and said;
//   other      a second isoprofd (listed as an executable, not Node) with
//              a loopback metrics listener: probed, never attached nor
//              signalled.
// Then optin is killed and a new opted-in process started: the first is
// dropped and the second profiled, each within a few scans. A listener on
// 0.0.0.0 is the unit test's (tests/unit/agent/test_procscan.c): tests
// listen on loopback only. The daemon scans a /proc of this test's own
// processes ($ISOPROFD_PROC, L.procRoot), never the host's: it matches
// exactly the processes started here, and no other Node or isoprofd of the
// host (another test, another suite) is probed or signalled.
'use strict';
const { test, after } = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const { spawn } = require('node:child_process');
const L = require('./lib');

after(L.cleanup);

const GUARD = path.join(__dirname, 'parent-guard.js');

// A Node process with these options before the script; its stderr kept.
function node(name, opts, script, env = {}) {
  const c = L.track(spawn(process.execPath, [...opts, '--require', GUARD, script],
    { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } }), name);
  return c;
}

const seen = (d, msg, pid) => (l) => l.msg === msg && Number(l.pid) === pid;

test('processes found, activated, ignored and followed through /proc', { timeout: 150000 }, async () => {
  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  // The opted-in workload under a name of odd bytes.
  const odd = path.join(dir, 'we"ird\\ é x.js');
  fs.copyFileSync(path.join(L.WORKLOADS, 'node-light.js'), odd);
  const server = path.join(dir, 'server.js');
  fs.writeFileSync(server, "require('node:http').createServer((q, s) => s.end('app')).listen(0, '127.0.0.1', function () { process.stderr.write('app on ' + this.address().port + '\\n'); });\nsetInterval(() => {}, 1000);\n");

  const optin = node('optin', ['--inspect-port=0'], odd);
  // open's app: its script one directory below its package.json.
  fs.mkdirSync(path.join(dir, 'app', 'lib'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'app', 'package.json'), JSON.stringify({ name: 'shop', version: '2.4.0-rc.1' }));
  fs.copyFileSync(path.join(L.WORKLOADS, 'node-light.js'), path.join(dir, 'app', 'lib', 'main.js'));
  const open = node('open', ['--inspect=127.0.0.1:0'], path.join(dir, 'app', 'lib', 'main.js'));
  const plain = node('plain', [], server);
  const named = node('named', ['--inspect=127.0.0.1:0'], path.join(L.WORKLOADS, 'node-light.js'), { APP_VERSION: 'env-7' });
  const refused = node('refused', ['--inspect-port=0.0.0.0:0'], path.join(L.WORKLOADS, 'node-light.js'));
  await L.waitFor(() => /Debugger listening/.test(open.stderrText) && /Debugger listening/.test(named.stderrText) &&
    /app on \d+/.test(plain.stderrText), 30000, 'the workloads to listen');

  // The other executable: an isoprofd with a metrics listener, no targets.
  const metricsPort = await L.freePort();
  const otherDir = L.tmpdir();
  const other = await L.startDaemon(L.yamlConfig({ store: path.join(otherDir, 'store'), targets: [], level: 'info',
    extra: `metrics: {listen: "127.0.0.1:${metricsPort}"}` }), { dir: otherDir });
  await L.waitFor(() => L.portOpen(metricsPort), 30000, 'the other daemon\'s metrics listener');

  const PROCESSES = 'processes: {enabled: true, activate: true, executables: [node, isoprofd], version_from: [env:APP_VERSION, package.json]}';
  const namedPort = Number(/Debugger listening on ws:\/\/127\.0\.0\.1:(\d+)\//.exec(named.stderrText)[1]);
  const cfg = L.yamlConfig({ store, targets: [{ port: namedPort, worker: 'configured' }], duration: '1s', period: '2s', interval: '1ms', discovery: '500ms' })
    .replace('discovery: {interval: 500ms}', `discovery: {interval: 500ms, ${PROCESSES}}`);
  const proc = L.procRoot([optin, open, plain, named, refused, other].map((c) => c.pid));
  const d = await L.startDaemon(cfg, { env: proc.env });

  // optin: SIGUSR1, then its inspector found, then a window with its pid.
  await d.waitLog(seen(d, 'inspector opened with SIGUSR1', optin.pid), 30000, 'optin activated');
  // Node writes its line once the inspector listens, which on a loaded
  // machine may come after the daemon logged the signal: wait for it.
  await L.waitFor(() => /Debugger listening on ws:\/\/127\.0\.0\.1:\d+\//.test(optin.stderrText), 30000, 'optin to say its inspector listens');
  await d.waitLog(seen(d, 'inspector found on the host', optin.pid), 30000, 'optin found');
  await d.waitLog(seen(d, 'inspector found on the host', open.pid), 30000, 'open found');
  await L.waitFor(() => {
    const w = L.windows(store);
    return w.some((x) => x.pid === optin.pid && x.type === 'cpu') && w.some((x) => x.pid === open.pid && x.type === 'cpu') &&
      w.some((x) => x.pid === named.pid && x.worker === 'configured');
  }, 60000, 'CPU windows of optin and open with their pids').catch((e) => {
    const w = L.windows(store).map((x) => `${x.pid} ${x.type} ${x.worker}`);
    throw new Error(`${e.message}; optin ${optin.pid}, open ${open.pid}; windows:\n${w.slice(-20).join('\n')}\n${d.story()}`);
  });
  const mine = L.windows(store).filter((x) => x.pid === optin.pid);
  // The label is the script's file name, its odd bytes made safe.
  assert.ok(mine.every((x) => /^we.ird. .+ x\.js$/.test(x.worker)), JSON.stringify(mine[0]));

  // /status: found targets with their pids; the discovery figures.
  const st = L.status(store);
  assert.strictEqual(st.discovery.enabled, true);
  assert.ok(st.discovery.scans >= 2, JSON.stringify(st.discovery));
  assert.ok(st.discovery.activated >= 1);
  const tOpt = st.targets.find((t) => t.pid === optin.pid);
  assert.ok(tOpt && tOpt.found === true, JSON.stringify(st.targets));
  // Versions read from the processes: open's package.json, named's
  // environment.
  await d.waitLog((l) => l.msg === 'version found' && Number(l.pid) === open.pid && l.source === 'package.json' &&
    l.version === '2.4.0-rc.1' && l.file === path.join(dir, 'app', 'package.json'), 30000, 'open\'s version found');
  await L.waitFor(() => L.windows(store).some((x) => x.pid === named.pid && x.version === 'env-7'), 60000, 'a window of named with its version');
  const wOpen = L.windows(store).filter((x) => x.pid === open.pid);
  assert.ok(wOpen.length > 0 && wOpen.every((x) => x.version === '2.4.0-rc.1'), JSON.stringify(wOpen.map((x) => x.version)));
  const st1 = L.status(store);
  const tOpen = st1.targets.find((t) => t.pid === open.pid && t.thread === 'main');
  assert.strictEqual(tOpen && tOpen.version_source, 'package.json', JSON.stringify(st1.targets));
  const tNamed = st1.targets.find((t) => t.worker === 'configured' && t.thread === 'main');
  assert.ok(tNamed && tNamed.version === 'env-7' && tNamed.version_source === 'env:APP_VERSION', JSON.stringify(st1.targets));
  assert.ok(st.counters.process_scans >= 2);
  assert.ok(st.counters.processes_activated >= 1);

  // plain: probed and not an inspector; never signalled.
  await d.waitLog(seen(d, 'listener is not an inspector', plain.pid), 30000, 'plain probed');
  // refused: said once, never signalled.
  await d.waitLog(seen(d, 'not activated: --inspect-port does not name a loopback address', refused.pid), 30000, 'refused said');
  // other: probed (isoprofd answers 404), never attached.
  await d.waitLog(seen(d, 'listener is not an inspector', other.pid), 30000, 'the other daemon probed');

  // optin dies; a new opted-in process takes its place.
  const scans0 = L.status(store).discovery.scans;
  await L.stop(optin, 'SIGKILL');
  await d.waitLog((l) => l.msg === 'endpoint gone' && Number(l.pid) === optin.pid && l.why === 'process exited', 30000, 'optin dropped');
  proc.remove(optin.pid);
  const optin2 = node('optin2', ['--inspect-port=0'], path.join(L.WORKLOADS, 'node-light.js'));
  proc.add(optin2.pid);
  await d.waitLog(seen(d, 'inspector found on the host', optin2.pid), 30000, 'optin2 found');
  const scans1 = L.status(store).discovery.scans;
  await L.waitFor(() => L.windows(store).some((x) => x.pid === optin2.pid), 60000, 'a window of optin2');

  // What must never have happened, over the whole run.
  for (const c of [open, plain, refused, named]) {
    assert.strictEqual(d.count(seen(d, 'inspector opened with SIGUSR1', c.pid)), 0, `${c.name} was signalled`);
  }
  for (const c of [plain, refused, open, optin2]) assert.strictEqual(c.exitCode, null, `${c.name} exited: ${c.stderrText}`);
  assert.ok(other.alive(), 'the other daemon died');
  assert.doesNotMatch(plain.stderrText, /Debugger listening/);
  assert.doesNotMatch(refused.stderrText, /Debugger listening/);
  assert.ok(L.windows(store).every((x) => x.pid !== named.pid || x.worker === 'configured'), 'named profiled as found');
  for (const pid of [plain.pid, refused.pid, other.pid, named.pid]) {
    assert.strictEqual(d.count(seen(d, 'inspector found on the host', pid)), 0, `pid ${pid} attached`);
  }
  const st2 = L.status(store);
  assert.ok(st2.targets.every((t) => t.pid !== plain.pid && t.pid !== other.pid), JSON.stringify(st2.targets));
  // Only this test's processes were there to match: the six it started
  // (optin gone, optin2 in its place), none of the host's.
  assert.strictEqual(st2.discovery.processes, 6, JSON.stringify(st2.discovery));
  assert.strictEqual(st2.discovery.proc_entries, 6, JSON.stringify(st2.discovery));
  console.log(`scans from optin's death to optin2 found: ${scans1 - scans0}; scan CPU last ${st2.discovery.last_scan_cpu_us} us, ` +
    `processes matched ${st2.discovery.processes}`);

  // A reload that turns discovery off lets the found endpoints go; the
  // configured one stays.
  const from = d.lines.length;
  fs.writeFileSync(d.config, cfg.replace(PROCESSES, 'processes: {enabled: false}'));
  process.kill(d.pid, 'SIGHUP');
  await d.waitLog((l) => l.msg === 'endpoint gone' && Number(l.pid) === optin2.pid && l.why === 'discovery.processes turned off', 30000, 'found endpoints dropped at the reload', from);
  assert.ok(L.status(store).targets.every((t) => !t.found), 'a found target outlived the reload');
  assert.ok(L.status(store).targets.some((t) => t.worker === 'configured'), 'the configured target went');

  const r = await L.stopDaemon(d);
  assert.strictEqual(r.code, 0);
  await L.stopDaemon(other);
  L.storeCheck(store);
});
