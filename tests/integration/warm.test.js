// Warm windows (sampling.cpu.mode, agent/daemon/warm.h) on real Node: a
// 100,000-function app on a 2 s of every 5 s schedule with the budget off
// keeps its schedule with at most one event-loop stall over 40 ms after
// its first 10 s (its own clock: node-many.js STALLS_FILE), every window
// with samples; V8's sampler thread (v8:ProfEvntProc in /proc/PID/task)
// is gone after a reload to cold, after SIGTERM and after kill -9 of the
// daemon. A runtime that will not start the keep-alive, and another client
// profiling the isolate, leave the windows cold, taken, and say so.
'use strict';
const test = require('node:test');
const { after } = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const L = require('./lib');

after(L.cleanup);

const MANY = path.join(L.WORKLOADS, 'node-many.js');

// Is the app's CPU sampler thread alive?
function sampler(pid) {
  let tasks;
  try { tasks = fs.readdirSync(`/proc/${pid}/task`); } catch (_) { return false; }
  return tasks.some((t) => { try { return fs.readFileSync(`/proc/${pid}/task/${t}/comm`, 'utf8').startsWith('v8:ProfEvnt'); } catch (_) { return false; } });
}

// Waits until the sampler has been absent for holdMs in a row.
async function samplerGone(pid, holdMs, timeoutMs, what) {
  let since = null;
  await L.waitFor(() => {
    if (sampler(pid)) { since = null; return null; }
    since = since || Date.now();
    return Date.now() - since >= holdMs ? true : null;
  }, timeoutMs, what);
}

function status(sock) {
  return new Promise((resolve, reject) => {
    const req = http.request({ socketPath: sock, path: '/status', timeout: 5000 }, (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => { try { resolve(JSON.parse(body)); } catch (e) { reject(e); } });
    });
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error('status timeout')));
    req.end();
  });
}

function config(store, port, sock, mode, extra = {}) {
  return L.yamlConfig({
    store, targets: [{ port, worker: extra.worker || 'many' }], duration: '2s', period: '5s', interval: '10ms', jitter: '0%',
    heap: '{period: 1h}', extra: `control: {socket: ${JSON.stringify(sock)}}\n`, mode,
  });
}

// The first test times a 100,000-function app's event loop for 70 s: the
// plain suite's measure. Under the sanitizers it would add that much to the
// suite's serial chain and time nothing more; the keep-alive's C paths run
// there in the tests after it (refused, disturbed, auto, Deno, workerd).
test('warm windows: a 100,000-function app keeps its schedule without stalls; nothing left running after', { timeout: 400000, skip: L.sanitizedBuild() && 'timing, measured by the plain suite' }, async () => {
  const dir = L.tmpdir();
  const stalls = path.join(dir, 'stalls.txt');
  const twinStalls = path.join(dir, 'twin-stalls.txt');
  const app = await L.startNode(MANY, { env: { FUNCS: '100000', STALLS_FILE: stalls } });
  // The same app beside it, not profiled: this machine's own stalls (a
  // busy shared machine stalls any app; the profiler must add none).
  const twin = await L.startNode(MANY, { env: { FUNCS: '100000', STALLS_FILE: twinStalls } });
  const store = path.join(dir, 'store');
  const sock = path.join(dir, 'control.sock');
  const d = await L.startDaemon(config(store, app.port, sock, 'warm'), { dir });
  const on = await d.waitLog((l) => l.msg === 'warm windows on', 120000, 'the keep-alive');
  const t0 = Date.now();
  const from = on.seq;
  // 70 s of windows from the keep-alive's start.
  await new Promise((r) => setTimeout(r, 70000));
  const stored = d.lines.slice(from).filter((l) => l.msg === 'window stored' && l.type === 'cpu');
  const withSamples = stored.filter((l) => Number(l.samples) > 0);
  assert.ok(withSamples.length >= 8, `${withSamples.length} windows with samples in 70 s (${stored.length} stored):\n${d.story()}`);
  assert.strictEqual(withSamples.length, stored.length, 'every window holds samples');
  // The app's clock: stalls over 40 ms from 10 s after the keep-alive
  // started to the end of the 70 s: at most one more than its twin had
  // (half as many more again when the machine stalls the twin too).
  const read = (f) => (fs.existsSync(f) ? fs.readFileSync(f, 'utf8').trim().split('\n').filter(Boolean).map((r) => r.split(' ').map(Number)) : [])
    .filter(([ts]) => ts >= t0 + 10000 && ts <= t0 + 70000);
  const late = read(stalls), base = read(twinStalls);
  assert.ok(late.length <= base.length + Math.max(1, Math.floor(base.length / 2)),
    `event-loop stalls over 40 ms after the first 10 s: ${late.length}, the unprofiled twin ${base.length}: ${JSON.stringify(late)} / ${JSON.stringify(base)}\n${d.story()}`);
  // The daemon's measure: each warm window's start answered within ~ms.
  const starts = d.lines.slice(from).filter((l) => l.msg === 'window started' && l.warm === '1').map((l) => Number(l.start_us) / 1000).sort((a, b) => a - b);
  assert.ok(starts.length >= 8 && starts[starts.length >> 1] < 40, `warm starts (ms): ${starts}`);
  console.log(`warm: ${withSamples.length} windows in 70 s; stalls > 40 ms after 10 s: ${late.length} (twin ${base.length}); start ms p50 ${starts[starts.length >> 1]} max ${starts[starts.length - 1]}`);
  const st = await status(sock);
  const t = st.targets.find((x) => x.worker === 'many');
  assert.strictEqual(t.cpu_mode.mode, 'warm', JSON.stringify(t.cpu_mode));
  assert.strictEqual(t.cpu_mode.keepalive, 'on', JSON.stringify(t.cpu_mode));
  assert.ok(t.cpu_mode.warm_windows >= 8, JSON.stringify(t.cpu_mode));
  // The sampler's own CPU, measured from its thread in /proc.
  assert.ok(t.cpu_mode.sampler_ms_per_s > 0 && t.cpu_mode.sampler_interval_us === 10000, JSON.stringify(t.cpu_mode));
  console.log(`warm: the sampler thread measured at ${t.cpu_mode.sampler_ms_per_s} ms of CPU a second`);
  assert.ok(sampler(app.pid), 'the sampler runs between warm windows');
  // The keep-alive was rotated (every 60 s), so its samples stay bounded.
  assert.ok(t.cpu_mode.rotations >= 1, JSON.stringify(t.cpu_mode));
  assert.ok(d.count((l) => l.msg === 'keep-alive rotated' && l.worker === 'many') >= 1, d.story());
  // Reload to cold: the keep-alive ends; between windows no sampler.
  const mark = d.lines.length;
  fs.writeFileSync(d.config, config(store, app.port, sock, 'cold'));
  process.kill(d.pid, 'SIGHUP');
  await d.waitLog((l) => l.msg === 'warm windows off', 30000, 'the keep-alive ended by the reload', mark);
  await samplerGone(app.pid, 1500, 30000, 'the sampler gone between cold windows');
  // Warm again, then SIGTERM: gone and stays gone.
  const mark2 = d.lines.length;
  fs.writeFileSync(d.config, config(store, app.port, sock, 'warm'));
  process.kill(d.pid, 'SIGHUP');
  await d.waitLog((l) => l.msg === 'warm windows on', 120000, 'warm again', mark2);
  await L.stopDaemon(d, { signal: 'SIGTERM', timeoutMs: 20000 });
  await samplerGone(app.pid, 3000, 30000, 'the sampler gone after SIGTERM');
  // And kill -9.
  const d2 = await L.startDaemon(config(store, app.port, sock, 'warm'), { dir: L.tmpdir() });
  await d2.waitLog((l) => l.msg === 'warm windows on', 120000, 'warm, second daemon');
  assert.ok(sampler(app.pid));
  await L.stop(d2, 'SIGKILL');
  await samplerGone(app.pid, 3000, 30000, 'the sampler gone after kill -9');
});

test('warm windows refused (console.profile replaced) or disturbed (another client profiles): cold, taken, said; worker threads warm too', { timeout: 240000 }, async () => {
  const dir = L.tmpdir();
  const refusing = await L.startNode(MANY, { env: { FUNCS: '2000', NO_CONSOLE_PROFILE: '1' } });
  const other = await L.startNode(MANY, { env: { FUNCS: '2000' } });
  const threads = await L.startNode(path.join(L.WORKLOADS, 'node-threads.js'), { env: { POOL_IDLE: '1' } });
  const store = path.join(dir, 'store');
  const sock = path.join(dir, 'control.sock');
  const text = L.yamlConfig({
    store, targets: [{ port: refusing.port, worker: 'refusing' }, { port: other.port, worker: 'other' }, { port: threads.port, worker: 'pool', threads: '{enabled: true}' }],
    duration: '1s', period: '3s', interval: '10ms', heap: '{period: 1h}', extra: `control: {socket: ${JSON.stringify(sock)}}\n`, maxConcurrent: 8, mode: 'warm',
  });
  const d = await L.startDaemon(text, { dir });
  // The refusal: said, and windows carry on cold.
  const ref = await d.waitLog((l) => l.msg === 'warm windows refused, windows stay cold' && l.worker === 'refusing', 60000, 'the refusal');
  assert.match(ref.err, /no console profile started/);
  await d.waitLog((l) => l.msg === 'window stored' && l.worker === 'refusing' && Number(l.samples) > 0, 30000, 'a cold window of the refusing app', ref.seq);
  // A worker thread's keep-alive, over its NodeWorker session.
  await d.waitLog((l) => l.msg === 'warm windows on' && l.worker === 'pool' && l.thread !== 'main', 60000, 'a worker thread warm');
  // Another client on 'other': its console profile is a disturbance.
  const on = await d.waitLog((l) => l.msg === 'warm windows on' && l.worker === 'other', 60000, 'other warm');
  const list = await L.getJson(other.port, '/json/list');
  const ws = await L.connectWs(list[0].webSocketDebuggerUrl);
  const events = [];
  let id = 0;
  const pending = new Map();
  ws.onmessage = (m) => { const j = JSON.parse(m.data); if (j.id && pending.has(j.id)) { pending.get(j.id)(j); pending.delete(j.id); } else events.push(j); };
  const call = (method, params = {}) => new Promise((resolve) => { const i = ++id; pending.set(i, resolve); ws.send(JSON.stringify({ id: i, method, params })); });
  await call('Profiler.enable');
  await call('Runtime.evaluate', { expression: "console.profile('devtools')" });
  const dist = await d.waitLog((l) => l.msg === 'warm windows disturbed, windows stay cold' && l.worker === 'other', 30000, 'the disturbance', on.seq);
  assert.strictEqual(dist.title, 'devtools');
  await d.waitLog((l) => l.msg === 'warm windows off' && l.worker === 'other', 30000, 'ours ended', dist.seq);
  // The client's own profile is whole: its end gives it back.
  await call('Runtime.evaluate', { expression: "console.profileEnd('devtools')" });
  await L.waitFor(() => events.find((e) => e.method === 'Profiler.consoleProfileFinished' && e.params.title === 'devtools') || null, 10000, "the client's profile");
  ws.close();
  // The windows go on, cold.
  await d.waitLog((l) => l.msg === 'window stored' && l.worker === 'other' && Number(l.samples) > 0, 30000, 'a window after the disturbance', dist.seq);
  const st = await status(sock);
  const by = Object.fromEntries(st.targets.filter((t) => t.thread === 'main').map((t) => [t.worker, t.cpu_mode]));
  assert.strictEqual(by.refusing.mode, 'cold', JSON.stringify(by));
  assert.strictEqual(by.refusing.why, 'refused', JSON.stringify(by));
  assert.ok(by.refusing.retry_in_s > 0, JSON.stringify(by));
  assert.strictEqual(by.other.mode, 'cold', JSON.stringify(by));
  assert.strictEqual(by.other.why, 'disturbed', JSON.stringify(by));
  assert.strictEqual(by.other.disturbances, 1, JSON.stringify(by));
  assert.strictEqual(by.pool.mode, 'warm', JSON.stringify(by));
  await L.stopDaemon(d);
});

test('auto: warm for the app whose cold windows cost more than the sampler, cold for the small one; isoprof status says which and why', { timeout: 240000 }, async () => {
  const dir = L.tmpdir();
  const big = await L.startNode(MANY, { env: { FUNCS: '200000' } });
  const small = await L.startNode(MANY, { env: { FUNCS: '200' } });
  const store = path.join(dir, 'store');
  const sock = path.join(dir, 'control.sock');
  // 1 s of every 6 s at 1 ms: the sampler would cost ~64 ms/s x 5 s = 320 ms
  // a period; 200,000 functions cost twice that or more to start and stop
  // cold (660 ms on a quiet machine, seconds on a busy one; 100,000 cost
  // 255 ms on a quiet one, under the sampler), 200 much less (5-120 ms).
  const text = L.yamlConfig({
    store, targets: [{ port: big.port, worker: 'big' }, { port: small.port, worker: 'small' }],
    duration: '1s', period: '6s', interval: '1ms', heap: '{period: 1h}', extra: `control: {socket: ${JSON.stringify(sock)}}\n`, mode: 'auto',
  });
  const d = await L.startDaemon(text, { dir });
  const bigWarm = await d.waitLog((l) => l.msg === 'cpu mode' && l.worker === 'big' && l.mode === 'warm', 120000, 'auto choosing warm for the big app');
  assert.strictEqual(bigWarm.why, 'cold_costlier');
  assert.ok(Number(bigWarm.cold_ms) > Number(bigWarm.sampler_ms), bigWarm.raw);
  await d.waitLog((l) => l.msg === 'warm windows on' && l.worker === 'big', 60000, 'the big app warm', bigWarm.seq);
  const smallCold = await d.waitLog((l) => l.msg === 'cpu mode' && l.worker === 'small' && l.why === 'cold_cheaper', 120000, 'auto keeping the small app cold');
  assert.ok(Number(smallCold.cold_ms) < Number(smallCold.sampler_ms), smallCold.raw);
  // Warm windows after: their starts are cheap.
  await d.waitLog((l) => l.msg === 'window started' && l.worker === 'big' && l.warm === '1', 30000, 'a warm window');
  const r = L.cli(['status', '--socket', sock]);
  assert.strictEqual(r.status, 0, r.stderr);
  assert.match(r.stdout, /big\/main isolate \d+: warm \(auto: cold_costlier, cold start\+stop \d+ ms, sampler \d+ ms a period\)/, r.stdout);
  assert.match(r.stdout, /small\/main isolate \d+: cold \(auto: cold_cheaper/, r.stdout);
  assert.strictEqual(d.count((l) => l.msg === 'warm windows on' && l.worker === 'small'), 0);
  await L.stopDaemon(d);
});

test('Deno warm, workerd refused (no default execution context): both profiled', { timeout: 240000 }, async () => {
  const deno = await L.startDeno(path.join(L.WORKLOADS, 'deno-hot.js'));
  const services = [{ name: 'alpha', port: await L.freePort() }];
  const wd = await L.startWorkerd(path.join(L.WORKLOADS, 'worker-hot.js'), services);
  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  const text = L.yamlConfig({
    store, targets: [{ port: deno.port, worker: 'deno' }, { port: wd.port }],
    duration: '1s', period: '3s', interval: '10ms', heap: '{period: 1h}', mode: 'warm',
  });
  const d = await L.startDaemon(text, { dir });
  const loads = services.map((s) => L.loadLoop(s.port));
  try {
    const on = await d.waitLog((l) => l.msg === 'warm windows on' && l.worker === 'deno', 60000, 'Deno warm');
    await d.waitLog((l) => l.msg === 'window started' && l.worker === 'deno' && l.warm === '1', 30000, 'a warm Deno window', on.seq);
    await L.waitFor(() => d.lines.slice(on.seq).filter((l) => l.msg === 'window stored' && l.worker === 'deno' && Number(l.samples) > 0).length >= 2 || null,
      60000, 'warm Deno windows with samples');
    const ref = await d.waitLog((l) => l.msg === 'warm windows refused, windows stay cold' && l.worker === 'alpha', 60000, 'workerd refusing');
    assert.match(ref.why, /execution context/, ref.raw);
    await d.waitLog((l) => l.msg === 'window stored' && l.worker === 'alpha', 60000, 'a cold workerd window', ref.seq);
  } finally {
    await Promise.all(loads.map((l) => l.stop()));
  }
  await L.stopDaemon(d);
});
