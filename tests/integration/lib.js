// Shared harness of the integration tests: real runtimes on loopback ports,
// the real isoprofd and isoprof binaries, go tool pprof as the reader.
// Every child is started here and stopped by its PID; every temp dir is
// removed by cleanup(), which each test file runs in after(), and again
// (synchronously) when the test process exits.
//
// The binaries come from $ISOPROFD / $ISOPROF (CTest sets them), else
// build/agent/. workerd and Deno come from `packaging/setup.sh
// --print-runtimes`; a missing runtime fails the test, it never skips.
'use strict';
const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const http = require('node:http');
const zlib = require('node:zlib');

const ROOT = path.resolve(__dirname, '..', '..');
const ISOPROFD = process.env.ISOPROFD || path.join(ROOT, 'build', 'agent', 'isoprofd');
const ISOPROF = process.env.ISOPROF || path.join(ROOT, 'build', 'agent', 'isoprof');
const WORKLOADS = path.join(__dirname, 'workloads');
const VERBOSE = !!process.env.ISOPROF_TEST_VERBOSE;

// --- children and temp dirs ---------------------------------------------

const children = new Set();
const tmpdirs = [];

function killAllSync() {
  for (const c of children) {
    try { process.kill(c.pid, 'SIGKILL'); } catch (_) { /* already gone */ }
  }
  children.clear();
  while (tmpdirs.length) fs.rmSync(tmpdirs.pop(), { recursive: true, force: true });
}
process.on('exit', killAllSync);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => { killAllSync(); process.exit(128 + os.constants.signals[sig]); });
}

// Stops every child still running (SIGTERM, SIGKILL after 3 s), closes
// every fake inspector and removes the temp dirs. Registered with after()
// below for every test file that loads this module; safe to call again.
async function cleanup() {
  await Promise.all([...children].map((c) => stop(c, 'SIGTERM', 3000)));
  await require('./fake-inspector').closeAll();
  while (tmpdirs.length) fs.rmSync(tmpdirs.pop(), { recursive: true, force: true });
}
require('node:test').after(cleanup);

function tmpdir() {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'isoprof-it-'));
  tmpdirs.push(d);
  return d;
}

// No test reads the host's config. isoprof reads the installed config
// (/etc/isoprof/isoprof.yaml on a host with the .deb) when no --config is
// given, and $ISOPROF_CONFIG replaces that path. It is set here, in this
// process's environment, to a path in a temp dir of ours that is never
// created, so every isoprof and isoprofd started by a test (cli(),
// startDaemon(), any spawn that passes process.env on) gets it. A test that
// means a system config sets ISOPROF_CONFIG in its child's env.
const NO_SYSTEM_CONFIG = path.join(tmpdir(), 'absent', 'isoprof.yaml');
process.env.ISOPROF_CONFIG = NO_SYSTEM_CONFIG;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A port that was free a moment ago (for runtimes that cannot take port 0).
function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
}

// Is something accepting connections on 127.0.0.1:port?
function portOpen(port) {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port });
    s.on('connect', () => { s.destroy(); resolve(true); });
    s.on('error', () => resolve(false));
  });
}

// Registers a child for cleanup; .exited resolves to {code, signal}.
// stderr (if piped) is kept in .stderrText, bounded to its last 1 MiB.
function track(child, name) {
  children.add(child);
  child.name = name;
  child.stderrText = '';
  if (child.stderr) {
    child.stderr.on('data', (d) => {
      child.stderrText += d;
      if (child.stderrText.length > 2 << 20) child.stderrText = child.stderrText.slice(-(1 << 20));
    });
  }
  child.exited = new Promise((resolve) => {
    child.on('exit', (code, signal) => { children.delete(child); resolve({ code, signal }); });
    // Not started at all (ENOENT, EACCES): there will be no 'exit'.
    child.on('error', (err) => { child.spawnError = err; children.delete(child); resolve({ code: null, signal: null, error: err }); });
  });
  return child;
}

// Sends `signal` to our child by PID; SIGKILL if it has not exited after
// timeoutMs. Resolves to {code, signal}.
async function stop(child, signal = 'SIGTERM', timeoutMs = 5000) {
  if (!children.has(child)) return child.exited;
  try { process.kill(child.pid, signal); } catch (_) { return child.exited; }
  const t = setTimeout(() => { try { process.kill(child.pid, 'SIGKILL'); } catch (_) { /* gone */ } }, timeoutMs);
  const r = await child.exited;
  clearTimeout(t);
  return r;
}

// --- waiting ------------------------------------------------------------

async function waitFor(pred, timeoutMs, what) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await pred();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(100);
  }
}

function getJson(port, p, timeoutMs = 1000) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: p, timeout: timeoutMs }, (res) => {
      let b = '';
      res.on('data', (d) => { b += d; });
      res.on('end', () => { try { resolve(JSON.parse(b)); } catch (e) { reject(e); } });
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
  });
}

// Waits until /json/list on the port names at least `min` targets.
async function waitInspector(port, { min = 1, timeoutMs = 15000, child } = {}) {
  return waitFor(async () => {
    if (child && child.exitCode !== null) throw new Error(`${child.name} exited (${child.exitCode}): ${child.stderrText.slice(-2000)}`);
    try { const l = await getJson(port, '/json/list'); return l.length >= min ? l : null; } catch (_) { return null; }
  }, timeoutMs, `${min} target(s) in /json/list on 127.0.0.1:${port}`);
}

// --- runtimes -----------------------------------------------------------

let runtimeCache = null;
function runtimes() {
  if (runtimeCache) return runtimeCache;
  const r = spawnSync(path.join(ROOT, 'packaging', 'setup.sh'), ['--print-runtimes'], { encoding: 'utf8' });
  const out = {};
  for (const line of (r.stdout || '').split('\n')) {
    const m = /^(\w+)=(.*)$/.exec(line);
    if (m) out[m[1]] = m[2];
  }
  runtimeCache = out;
  return out;
}

function runtimeBinary(name) {
  const bin = runtimes()[name];
  if (!bin || !fs.existsSync(bin)) {
    throw new Error(`${name} is not installed: run packaging/setup.sh --runtimes (it installs workerd and Deno into ~/.cache/isoprof/npm)`);
  }
  return bin;
}

// The workloads exit when their parent (this process) goes away
// (parent-guard.js, preloaded), so a test process that dies without cleanup
// (CTest's timeout kill) does not leave a core spinning.
const WORKLOAD_STDIO = ['ignore', 'ignore', 'pipe'];
const GUARD = path.join(__dirname, 'parent-guard.js');

// node --inspect on 127.0.0.1:port (0: a random port, read back from the
// "Debugger listening on ws://..." line). .port is the inspector port.
async function startNode(script, { port = 0, args = [], env = {} } = {}) {
  const c = track(spawn(process.execPath, [`--inspect=127.0.0.1:${port}`, '--require', GUARD, ...args, script],
    { stdio: WORKLOAD_STDIO, env: { ...process.env, ...env } }), 'node');
  const p = await waitFor(() => {
    const m = /Debugger listening on ws:\/\/127\.0\.0\.1:(\d+)\//.exec(c.stderrText);
    if (m) return parseInt(m[1], 10);
    if (c.exitCode !== null || /Starting inspector on .* failed/.test(c.stderrText)) return -1;
    return null;
  }, 15000, 'node to print its inspector port');
  if (p < 0) throw new Error(`node did not start its inspector: ${c.stderrText}`);
  c.port = p;
  await waitInspector(p, { child: c });
  return c;
}

async function startDeno(script, { port, args = [] } = {}) {
  port = port || await freePort();
  const bin = runtimeBinary('deno');
  const c = track(spawn(bin, ['run', '--no-prompt', `--inspect=127.0.0.1:${port}`, '--preload', GUARD, ...args, script], {
    stdio: WORKLOAD_STDIO,
    env: { ...process.env, DENO_DIR: path.join(tmpdir(), 'deno'), NO_COLOR: '1', DENO_NO_UPDATE_CHECK: '1' },
  }), 'deno');
  c.port = port;
  await waitInspector(port, { child: c });
  return c;
}

// workerd serving `script` (an ES module) as each of `services` ([{name,
// port}]: one worker service each, with an HTTP socket on its port), with
// the inspector on `port`. One inspector target per service.
// compatibilityDate: a date this workerd accepts (it rejects dates after
// its own release).
const WORKERD_COMPAT_DATE = '2024-09-23';
async function startWorkerd(script, services, { port } = {}) {
  port = port || await freePort();
  const bin = runtimeBinary('workerd');
  const dir = tmpdir();
  fs.copyFileSync(script, path.join(dir, 'worker.js'));
  const capnp = [
    'using Workerd = import "/workerd/workerd.capnp";',
    'const config :Workerd.Config = (',
    `  services = [ ${services.map((s) => `(name = "${s.name}", worker = .w)`).join(', ')} ],`,
    `  sockets = [ ${services.map((s) => `(name = "${s.name}-http", address = "127.0.0.1:${s.port}", http = (), service = "${s.name}")`).join(', ')} ]`,
    ');',
    `const w :Workerd.Worker = ( modules = [ (name = "worker.js", esModule = embed "worker.js") ], compatibilityDate = "${WORKERD_COMPAT_DATE}" );`,
  ].join('\n');
  fs.writeFileSync(path.join(dir, 'config.capnp'), capnp);
  const c = track(spawn(bin, ['serve', path.join(dir, 'config.capnp'), `--inspector-addr=127.0.0.1:${port}`],
    { stdio: ['ignore', 'ignore', 'pipe'], cwd: dir }), 'workerd');
  c.port = port;
  await waitInspector(port, { min: services.length, timeoutMs: 20000, child: c });
  return c;
}

// Keeps sending requests to 127.0.0.1:port until stop() is called.
function loadLoop(port) {
  let running = true;
  const agent = new http.Agent({ keepAlive: true, maxSockets: 2 });
  const done = (async () => {
    while (running) {
      await new Promise((resolve) => {
        const req = http.get({ host: '127.0.0.1', port, path: '/', agent, timeout: 2000 }, (res) => { res.resume(); res.on('end', resolve); });
        req.on('error', () => setTimeout(resolve, 50));
        req.on('timeout', () => req.destroy());
      });
    }
  })();
  return { stop() { running = false; agent.destroy(); return done; } };
}

// A WebSocket client (Node 20 needs --experimental-websocket, which the
// CTest command passes). Resolves once open.
function connectWs(url, timeoutMs = 5000) {
  if (typeof WebSocket !== 'function') throw new Error('global WebSocket missing: run node with --experimental-websocket');
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    const t = setTimeout(() => { reject(new Error(`WebSocket ${url}: open timed out`)); try { ws.close(); } catch (_) { /* */ } }, timeoutMs);
    ws.onopen = () => { clearTimeout(t); resolve(ws); };
    ws.onerror = (e) => { clearTimeout(t); reject(new Error(`WebSocket ${url}: ${e.message || 'error'}`)); };
  });
}

// --- the daemon ---------------------------------------------------------

// The config the tests use: short windows, fast discovery, debug logs.
// targets: [{port | inspector, worker, version, memory_limit, threads, root,
// source_maps: [DIR], labels: {name: value}}].
// heap/memoryPoll/anomaly: YAML flow mappings of sampling.heap and
// anomaly; the latency listener is off unless anomaly names one.
// budget: sampling.budget; by default none (100 %), so that the short
// periods tests use are kept as written (budget.test.js tests the budget).
function yamlConfig({ store, targets, duration = '2s', period = '3s', interval = '1ms', jitter, discovery = '500ms', maxConcurrent = 4, mode = 'cold', level = 'debug', maxSize, pendingMax, heap, memoryPoll, anomaly, budget = '{pause_share: 100%}', extra = '' }) {
  const q = (s) => JSON.stringify(String(s));
  const target = (t) => {
    const f = [`inspector: ${q(t.inspector || `127.0.0.1:${t.port}`)}`];
    if (t.worker) f.push(`worker: ${q(t.worker)}`);
    if (t.version) f.push(`version: ${q(t.version)}`);
    if (t.memory_limit) f.push(`memory_limit: ${t.memory_limit}`);
    if (t.threads) f.push(`threads: ${t.threads}`);
    if (t.root) f.push(`root: ${q(t.root)}`);
    if (t.source_maps) f.push(`source_maps: [${t.source_maps.map(q).join(', ')}]`);
    if (t.labels) f.push(`labels: {${Object.entries(t.labels).map(([k, v]) => `${k}: ${q(v)}`).join(', ')}}`);
    return `  - {${f.join(', ')}}`;
  };
  const cpu = [`duration: ${duration}`, `period: ${period}`, `interval: ${interval}`, `max_concurrent: ${maxConcurrent}`];
  // Tests of other features pin cold windows (the daemon's default, auto,
  // would warm a costly app on the tests' short schedules); warm.test.js
  // passes its own.
  if (mode) cpu.push(`mode: ${mode}`);
  if (jitter !== undefined) cpu.push(`jitter: ${jitter}`);
  return [
    `store: {path: ${q(store)}${maxSize ? `, max_size: ${maxSize}` : ''}${pendingMax ? `, pending_max: ${pendingMax}` : ''}}`,
    targets.length ? 'targets:' : 'targets: []',
    ...targets.map(target),
    `discovery: {interval: ${discovery}}`,
    `sampling: {cpu: {${cpu.join(', ')}}${heap ? `, heap: ${heap}` : ''}${memoryPoll ? `, memory_poll: ${memoryPoll}` : ''}${budget ? `, budget: ${budget}` : ''}}`,
    `anomaly: ${anomaly || '{latency: {listen: ""}}'}`,
    `log: {level: ${level}}`,
    extra,
  ].join('\n') + '\n';
}

// One logfmt line -> {key: value}; quoted values unescaped (\" \\ \n \t
// \xNN, as agent/daemon/log.c writes them). Lines that are not logfmt give {}.
function parseLogfmt(line) {
  const out = {};
  if (!/^ts=/.test(line)) return out;
  const re = /([A-Za-z_][\w.]*)=(?:"((?:[^"\\]|\\.)*)"|(\S*))/g;
  let m;
  while ((m = re.exec(line)) !== null) {
    out[m[1]] = m[2] !== undefined
      ? m[2].replace(/\\(x[0-9a-fA-F]{2}|.)/g, (_, e) => (e === 'n' ? '\n' : e === 't' ? '\t' : e[0] === 'x' && e.length === 3 ? String.fromCharCode(parseInt(e.slice(1), 16)) : e))
      : m[3];
  }
  return out;
}

const SANITIZER_RE = /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error: |SUMMARY: (Address|Undefined|Leak)Sanitizer/;

// Starts isoprofd --config <dir>/isoprof.yaml. The returned child has
// .lines (every parsed stderr line, in order, with .raw and .seq),
// .waitLog(pred, ms, what), .count(pred), .since(seq) and .alive().
async function startDaemon(configText, { dir, args = [], env = {} } = {}) {
  if (!fs.existsSync(ISOPROFD)) throw new Error(`${ISOPROFD} not found: build it, or set ISOPROFD (CTest does)`);
  dir = dir || tmpdir();
  const cfg = path.join(dir, 'isoprof.yaml');
  fs.writeFileSync(cfg, configText);
  const d = track(spawn(ISOPROFD, ['--config', cfg, ...args], { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } }), 'isoprofd');
  d.config = cfg;
  d.lines = [];
  d.raw = '';
  let partial = '';
  d.stderr.on('data', (chunk) => {
    d.raw += chunk;
    partial += chunk;
    let i;
    while ((i = partial.indexOf('\n')) >= 0) {
      const line = partial.slice(0, i);
      partial = partial.slice(i + 1);
      const rec = parseLogfmt(line);
      Object.defineProperty(rec, 'raw', { value: line });
      Object.defineProperty(rec, 'seq', { value: d.lines.length });
      d.lines.push(rec);
      if (VERBOSE) process.stderr.write(`[isoprofd] ${line}\n`);
    }
  });
  d.tail = (n = 40) => d.raw.split('\n').slice(-n).join('\n');
  d.waitLog = (pred, timeoutMs, what, from = 0) => waitFor(() => {
    const hit = d.lines.slice(from).find(pred);
    if (hit) return hit;
    if (d.exitCode !== null || d.signalCode !== null || d.spawnError) {
      throw new Error(`isoprofd exited (${d.exitCode ?? d.signalCode}) while waiting for ${what}:\n${d.tail()}`);
    }
    return null;
  }, timeoutMs, what).catch((e) => {
    throw new Error(`${e.message}\n--- isoprofd stderr, info and above but windows stored (tail) ---\n${d.story()}\n--- isoprofd stderr (tail) ---\n${d.tail(15)}`);
  });
  d.story = (n = 60) => d.lines.filter((l) => l.level !== 'debug' && l.msg !== 'window stored').slice(-n).map((l) => l.raw).join('\n');
  d.count = (pred) => d.lines.filter(pred).length;
  d.alive = () => d.exitCode === null && d.signalCode === null && children.has(d);
  return d;
}

// SIGINT (or `signal`), wait (then SIGKILL: code null); {code, signal, ms}.
// Throws if the daemon's stderr holds a sanitizer report. The wait is
// generous: an ASan daemon with six targets beside a CPU hog took over 5 s
// to drain its writer; a test that bounds the shutdown checks ms itself.
async function stopDaemon(d, { signal = 'SIGINT', timeoutMs = 20000 } = {}) {
  const t0 = Date.now();
  const r = await stop(d, signal, timeoutMs);
  const res = { ...r, ms: Date.now() - t0 };
  assertNoSanitizer(d.raw, 'isoprofd');
  return res;
}

function assertNoSanitizer(text, who) {
  const m = SANITIZER_RE.exec(text || '');
  if (m) {
    const at = Math.max(0, m.index - 200);
    throw new Error(`${who} reported a sanitizer error:\n${text.slice(at, at + 6000)}`);
  }
}

// --- the CLI ------------------------------------------------------------

// Runs isoprof (or isoprofd with {bin: ISOPROFD}); {status, stdout, stderr}.
function cli(args, opts = {}) {
  const r = spawnSync(opts.bin || ISOPROF, args, {
    encoding: opts.encoding === undefined ? 'utf8' : opts.encoding, timeout: opts.timeout || 30000, maxBuffer: 256 << 20,
    env: { ...process.env, ...(opts.env || {}) }, cwd: opts.cwd,
  });
  if (r.error) throw new Error(`${opts.bin || ISOPROF} ${args.join(' ')}: ${r.error.message}`);
  assertNoSanitizer(String(r.stderr), path.basename(opts.bin || ISOPROF));
  return { status: r.status, signal: r.signal, stdout: r.stdout, stderr: String(r.stderr) };
}

// cli() without blocking this process meanwhile (a fake inspector it hosts
// keeps answering): for commands that wait on the daemon, like `profile`.
function cliAsync(args, opts = {}) {
  return new Promise((resolve, reject) => {
    const c = track(spawn(opts.bin || ISOPROF, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...(opts.env || {}) }, cwd: opts.cwd }),
      path.basename(opts.bin || ISOPROF));
    let stdout = '';
    c.stdout.on('data', (d) => { stdout += d; });
    const t = setTimeout(() => { try { process.kill(c.pid, 'SIGKILL'); } catch (_) { /* gone */ } }, opts.timeout || 30000);
    c.on('error', (e) => { clearTimeout(t); reject(new Error(`${opts.bin || ISOPROF} ${args.join(' ')}: ${e.message}`)); });
    // 'close': the process exited and its pipes are drained (stderr is
    // collected by track()).
    c.on('close', (status, signal) => {
      clearTimeout(t);
      const stderr = c.stderrText || '';
      try { assertNoSanitizer(stderr, path.basename(opts.bin || ISOPROF)); } catch (e) { reject(e); return; }
      resolve({ status, signal, stdout, stderr });
    });
  });
}

// `isoprof windows --json` as objects ([] when nothing matched).
function windows(store, extra = []) {
  const r = cli(['windows', '--store', store, '--json', ...extra]);
  if (r.status === 1) return [];
  if (r.status !== 0) throw new Error(`isoprof windows failed (${r.status}): ${r.stderr}`);
  return r.stdout.split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

// `isoprof anomalies --json` as objects ([] when nothing matched).
function anomalies(store, extra = []) {
  const r = cli(['anomalies', '--store', store, '--json', ...extra]);
  if (r.status === 1) return [];
  if (r.status !== 0) throw new Error(`isoprof anomalies failed (${r.status}): ${r.stderr}`);
  return r.stdout.split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

// `isoprof status --json` of the daemon whose control socket is
// <store>/control.sock (the default without control.socket).
function status(store) {
  const r = cli(['status', '--json', '--socket', path.join(store, 'control.sock')]);
  if (r.status !== 0) throw new Error(`isoprof status failed (${r.status}): ${r.stderr}`);
  return JSON.parse(r.stdout);
}

function exportTo(store, args, file) {
  const r = cli(['export', '--store', store, ...args, '-o', file]);
  if (r.status !== 0) throw new Error(`isoprof export ${args.join(' ')} failed (${r.status}): ${r.stderr}`);
  return file;
}

// `isoprof store check` must pass.
function storeCheck(store) {
  const r = cli(['store', 'check', '--store', store]);
  if (r.status !== 0) throw new Error(`isoprof store check failed (${r.status}): ${r.stdout}${r.stderr}`);
  return r.stdout;
}

// --- go tool pprof ------------------------------------------------------

let goHome = null;
// go tool pprof with HOME and GOCACHE in a temp dir of ours.
function goPprof(args) {
  if (!goHome) goHome = tmpdir();
  const r = spawnSync('go', ['tool', 'pprof', ...args], {
    encoding: 'utf8', timeout: 120000, maxBuffer: 64 << 20,
    env: { ...process.env, HOME: goHome, GOCACHE: path.join(goHome, 'gocache'), PPROF_TMPDIR: goHome, GOFLAGS: '' },
  });
  if (r.error) throw new Error(`go tool pprof: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`go tool pprof ${args.join(' ')} failed (${r.status}): ${r.stderr}`);
  return r.stdout;
}

// Rows of `go tool pprof -top [-lines]`: {flat, flatPct, sumPct, cum, cumPct, name}.
function parsePprofTop(out) {
  const rows = [];
  for (const line of out.split('\n')) {
    const m = /^\s*(-?[\d.]+[a-zA-Z]*)\s+(-?[\d.]+)%\s+(-?[\d.]+)%\s+(-?[\d.]+[a-zA-Z]*)\s+(-?[\d.]+)%\s+(.+)$/.exec(line);
    if (m) rows.push({ flat: m[1], flatPct: parseFloat(m[2]), sumPct: parseFloat(m[3]), cum: m[4], cumPct: parseFloat(m[5]), name: m[6].trim() });
  }
  return rows;
}

function pprofTop(file, extra = []) {
  return parsePprofTop(goPprof(['-top', '-nodecount=100', ...extra, file]));
}

// `go tool pprof -raw`: {sampleTypes, samples: [{values, locs}], locations:
// Map id -> [{fn, file, line, start}], header}. Lines of a location are
// innermost first, as pprof prints them.
function parsePprofRaw(out) {
  const res = { header: [], sampleTypes: [], samples: [], locations: new Map() };
  let section = 'header';
  let loc = null;
  for (const line of out.split('\n')) {
    if (/^Samples:/.test(line)) { section = 'samples'; continue; }
    if (/^Locations/.test(line)) { section = 'locations'; continue; }
    if (/^Mappings/.test(line)) { section = 'mappings'; continue; }
    if (section === 'header') { if (line.trim()) res.header.push(line); continue; }
    if (section === 'samples') {
      if (!res.sampleTypes.length && /\S/.test(line) && !/:/.test(line)) {
        res.sampleTypes = line.trim().split(/\s+/);
        continue;
      }
      const m = /^\s*(-?\d+(?:\s+-?\d+)*):\s*([\d\s]*)$/.exec(line);
      if (m) res.samples.push({ values: m[1].trim().split(/\s+/).map(Number), locs: m[2].trim().split(/\s+/).filter(Boolean).map(Number) });
      continue;
    }
    if (section === 'locations') {
      // "     1: 0x0 fakeHot /fake/app.js:11:0 s=10" or continuation lines
      const m = /^\s*(\d+):\s+0x[0-9a-f]+\s*(M=\d+\s+)?(.*)$/.exec(line);
      const body = m ? m[3] : line.trim();
      if (m) { loc = []; res.locations.set(Number(m[1]), loc); }
      if (!loc || !body) continue;
      const f = /^(.*?) (\S*?):(-?\d+)(?::\d+)? s=(-?\d+)(?:\(.*\))?$/.exec(body.trim());
      if (f) loc.push({ fn: f[1], file: f[2], line: Number(f[3]), start: Number(f[4]) });
    }
  }
  return res;
}

function pprofRaw(file) {
  return parsePprofRaw(goPprof(['-raw', file]));
}

// --- a minimal pprof writer (for checking the reader side of the harness)

function pbVarint(n) {
  const out = [];
  let v = BigInt(n);
  if (v < 0n) v += 1n << 64n;
  do { let b = Number(v & 0x7fn); v >>= 7n; if (v) b |= 0x80; out.push(b); } while (v);
  return Buffer.from(out);
}
const pbKey = (field, wire) => pbVarint((field << 3) | wire);
const pbInt = (field, v) => Buffer.concat([pbKey(field, 0), pbVarint(v)]);
const pbBytes = (field, b) => { const buf = Buffer.isBuffer(b) ? b : Buffer.from(b); return Buffer.concat([pbKey(field, 2), pbVarint(buf.length), buf]); };

// profile: {sampleTypes: [[type, unit]], samples: [{stack: [{fn, file,
// line}] leaf first, values: [...]}], periodType: [type, unit], period}.
function encodePprof(profile) {
  const strings = [''];
  const sid = (s) => { let i = strings.indexOf(s); if (i < 0) { i = strings.length; strings.push(s); } return i; };
  const fns = new Map(); const locs = new Map();
  const parts = [];
  for (const [t, u] of profile.sampleTypes) parts.push(pbBytes(1, Buffer.concat([pbInt(1, sid(t)), pbInt(2, sid(u))])));
  const sampleParts = [];
  for (const s of profile.samples) {
    const ids = s.stack.map((fr) => {
      const fkey = `${fr.fn}\0${fr.file}`;
      if (!fns.has(fkey)) fns.set(fkey, { id: fns.size + 1, fr });
      const lkey = `${fkey}\0${fr.line}`;
      if (!locs.has(lkey)) locs.set(lkey, { id: locs.size + 1, fid: fns.get(fkey).id, line: fr.line });
      return locs.get(lkey).id;
    });
    sampleParts.push(pbBytes(2, Buffer.concat([...ids.map((i) => pbInt(1, i)), ...s.values.map((v) => pbInt(2, v))])));
  }
  parts.push(...sampleParts);
  for (const l of locs.values()) parts.push(pbBytes(4, Buffer.concat([pbInt(1, l.id), pbBytes(4, Buffer.concat([pbInt(1, l.fid), pbInt(2, l.line)]))])));
  for (const f of fns.values()) parts.push(pbBytes(5, Buffer.concat([pbInt(1, f.id), pbInt(2, sid(f.fr.fn)), pbInt(3, sid(f.fr.fn)), pbInt(4, sid(f.fr.file)), pbInt(5, f.fr.startLine || f.fr.line)])));
  const pt = profile.periodType || profile.sampleTypes[profile.sampleTypes.length - 1];
  const tail = [pbBytes(11, Buffer.concat([pbInt(1, sid(pt[0])), pbInt(2, sid(pt[1]))])), pbInt(12, profile.period || 1)];
  const st = strings.map((s) => pbBytes(6, s));
  return zlib.gzipSync(Buffer.concat([...parts, ...st, ...tail]));
}

// A directory laid out as /proc that holds only the processes a test
// started, for the daemon's $ISOPROFD_PROC: host discovery then never
// sees, probes or signals a process of the host (another test, another
// user's Node). Each pid is a symlink to /proc/PID; net and self are the
// daemon's own (/proc/net and /proc/self resolve in the reader).
// {dir, env, add(pid), remove(pid)}.
function procRoot(pids = []) {
  const dir = path.join(tmpdir(), 'proc');
  fs.mkdirSync(dir);
  fs.symlinkSync('/proc/net', path.join(dir, 'net'));
  fs.symlinkSync('/proc/self', path.join(dir, 'self'));
  const root = {
    dir,
    env: { ISOPROFD_PROC: dir },
    add(pid) { fs.symlinkSync(`/proc/${pid}`, path.join(dir, String(pid))); return root; },
    remove(pid) { fs.rmSync(path.join(dir, String(pid)), { force: true }); return root; },
  };
  for (const pid of pids) root.add(pid);
  return root;
}

// Are the binaries under test a sanitizer build's (ASan or UBSan linked
// in)? Read once from isoprofd.
let sanitizedBuildMemo = null;
function sanitizedBuild() {
  if (sanitizedBuildMemo === null) {
    const bin = fs.readFileSync(ISOPROFD);
    sanitizedBuildMemo = bin.includes('__asan_init') || bin.includes('__ubsan_handle');
  }
  return sanitizedBuildMemo;
}

// Is the process pid a sanitizer build's (ASan's runtime mapped)? Its
// VmHWM then holds the shadow memory and the quarantine (freed blocks kept
// from reuse), so a bound on its growth says nothing of the daemon's own.
function sanitized(pid) {
  return /libasan|libclang_rt\.asan/.test(fs.readFileSync(`/proc/${pid}/maps`, 'utf8'));
}

module.exports = {
  procRoot, sanitized, sanitizedBuild, ROOT, NO_SYSTEM_CONFIG, ISOPROFD, ISOPROF, WORKLOADS, WORKERD_COMPAT_DATE, tmpdir, sleep, freePort, portOpen, track, stop,
  cleanup, getJson, waitFor, waitInspector, runtimes, runtimeBinary, startNode, startDeno, startWorkerd,
  loadLoop, connectWs, yamlConfig, parseLogfmt, startDaemon, stopDaemon, assertNoSanitizer, cli, cliAsync, windows, anomalies, status,
  exportTo, storeCheck, goPprof, parsePprofTop, pprofTop, parsePprofRaw, pprofRaw, encodePprof,
};
