#!/usr/bin/env node
// Does a long-lived warm keep-alive grow the target's memory? Per runtime
// (Node, this node; Deno 2, from packaging/setup.sh --print-runtimes) two
// identical apps (workloads/many-light.js: ~20,000 functions, a 10 ms timer
// doing a little work) run side by side; one isoprofd profiles the first of
// each pair with sampling.cpu.mode: warm, a second isoprofd its twin with
// mode: cold. Both daemons have the default schedule (10 s windows every
// 60 s at 10 ms, heap windows every 5 m) and the default budget.
//
// Every --every seconds it reads VmRSS (and VmHWM, RssAnon) of each target
// and each daemon from /proc/PID/status; nothing is evaluated in a target.
// After --warmup minutes it measures for --minutes more, then prints per
// runtime and mode the RSS at the start of the measurement, at the end, the
// max, the least-squares slope (MiB/hour), the keep-alive rotations the
// warm daemon logged ("keep-alive rotated", log level debug) and the CPU
// windows stored, then warm minus cold side by side.
//
//   node tests/bench/bench_warm_memory.js [--build DIR | --isoprofd FILE]
//        [--minutes 60] [--every 60] [--warmup 2] [--funcs 20000]
//        [--runtimes node,deno] [--json FILE]
//
// Everything listens on 127.0.0.1; temp dirs only; it stops what it started
// by PID, and gives up --minutes + --warmup + 10 minutes after it began.
// It measures; it asserts nothing.
'use strict';
const fs = require('node:fs');
const http = require('node:http');
const net = require('node:net');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const common = require('./common');

const arg = common.arg;
const sleep = common.sleep;
const APP = path.join(__dirname, 'workloads', 'many-light.js');
const GUARD = path.join(common.ROOT, 'tests', 'integration', 'parent-guard.js');
const MiB = 1024; // /proc reports KiB

if (process.argv.includes('--help') || process.argv.includes('-h')) {
  console.log(fs.readFileSync(__filename, 'utf8').split('\n').slice(1, 25).map((l) => l.replace(/^\/\/ ?/, '')).join('\n'));
  process.exit(0);
}

function denoBinary() {
  const r = spawnSync(path.join(common.ROOT, 'packaging', 'setup.sh'), ['--print-runtimes'], { encoding: 'utf8' });
  const m = /^deno=(.*)$/m.exec(r.stdout || '');
  if (!m || !fs.existsSync(m[1])) throw new Error('deno is not installed: run packaging/setup.sh --runtimes (it installs Deno into ~/.cache/isoprof/npm)');
  return m[1];
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
}

function getJson(opts) {
  return new Promise((resolve, reject) => {
    const req = http.get({ timeout: 5000, ...opts }, (res) => {
      let b = '';
      res.on('data', (d) => { b += d; });
      res.on('end', () => { try { resolve(JSON.parse(b)); } catch (e) { reject(e); } });
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
  });
}

async function waitInspector(c, port, what) {
  await common.waitFor(async () => {
    if (c.exitCode !== null) throw new Error(`${what} exited: ${c.err.slice(-2000)}`);
    try { return (await getJson({ host: '127.0.0.1', port, path: '/json/list' })).length > 0; } catch (_) { return false; }
  }, 30000, `${what}'s inspector`);
}

// One app; resolves the child with .port.
async function startApp(runtime, funcs, deno) {
  let c;
  if (runtime === 'node') {
    c = common.start(process.execPath, ['--inspect=127.0.0.1:0', '--require', GUARD, APP, String(funcs)]);
    c.port = await common.waitFor(() => {
      const m = /Debugger listening on ws:\/\/127\.0\.0\.1:(\d+)\//.exec(c.err);
      if (m) return Number(m[1]);
      if (c.exitCode !== null) throw new Error(`node exited: ${c.err.slice(-2000)}`);
      return null;
    }, 30000, 'node to print its inspector port');
  } else {
    const port = await freePort();
    c = common.start(deno, ['run', '--no-prompt', `--inspect=127.0.0.1:${port}`, '--preload', GUARD, APP, String(funcs)], {
      env: { DENO_DIR: path.join(common.tmpdir('warmmem-deno'), 'deno'), NO_COLOR: '1', DENO_NO_UPDATE_CHECK: '1' },
    });
    c.port = port;
  }
  await waitInspector(c, c.port, runtime);
  return c;
}

// An isoprofd for targets [{port, worker}] in one mode, log level debug
// (the rotations are logged at debug). Counts, as its log streams, the
// rotations and stored CPU windows per worker.
async function startDaemon(isoprofd, mode, targets) {
  const dir = common.tmpdir(`warmmem-${mode}`);
  const sock = path.join(dir, 'ctl.sock');
  fs.writeFileSync(path.join(dir, 'cfg.yaml'), [
    `store: {path: "${dir}/store"}`, 'targets:',
    ...targets.map((t) => `  - {inspector: "127.0.0.1:${t.port}", worker: "${t.worker}"}`),
    `sampling: {cpu: {mode: ${mode}}}`, 'anomaly: {latency: {listen: ""}}', 'log: {level: debug}',
    `control: {socket: "${sock}"}`,
  ].join('\n') + '\n');
  const d = common.start(isoprofd, ['--config', path.join(dir, 'cfg.yaml')], { stdio: ['ignore', 'ignore', 'pipe'] });
  d.mode = mode;
  d.sock = sock;
  d.rotations = {};
  d.windows = {};
  d.warmOn = {};
  let partial = '';
  d.stderr.on('data', (chunk) => {
    partial += chunk;
    let i;
    while ((i = partial.indexOf('\n')) >= 0) {
      const line = partial.slice(0, i);
      partial = partial.slice(i + 1);
      const w = / worker=(\S+) thread=main /.exec(line) || / worker=(\S+) /.exec(line);
      if (!w) continue;
      if (line.includes('msg="keep-alive rotated"')) d.rotations[w[1]] = (d.rotations[w[1]] || 0) + 1;
      else if (line.includes('msg="warm windows on"')) d.warmOn[w[1]] = (d.warmOn[w[1]] || 0) + 1;
      else if (line.includes('msg="window stored"') && / type=cpu/.test(line)) d.windows[w[1]] = (d.windows[w[1]] || 0) + 1;
    }
  });
  await common.waitFor(() => fs.existsSync(sock) || d.exitCode !== null, 30000, 'the control socket');
  if (d.exitCode !== null) throw new Error(`isoprofd (${mode}) exited: ${d.err.slice(-2000)}`);
  return d;
}

function mem(pid) {
  try { return common.procMem(pid); } catch (_) { return null; } // gone
}

// Least-squares slope of ys over xs.
function slope(xs, ys) {
  const n = xs.length;
  if (n < 2) return NaN;
  const mx = common.mean(xs), my = common.mean(ys);
  let sxy = 0, sxx = 0;
  for (let i = 0; i < n; i++) { sxy += (xs[i] - mx) * (ys[i] - my); sxx += (xs[i] - mx) ** 2; }
  return sxx > 0 ? sxy / sxx : NaN;
}

// start/end/max/slope of one series over the measured samples.
function stats(samples, key, warmupS) {
  const pts = samples.filter((s) => s.t_s >= warmupS && s[key]).map((s) => [s.t_s / 3600, s[key].rss / MiB]);
  if (!pts.length) return { n: 0 };
  const ys = pts.map((p) => p[1]);
  return { n: pts.length, start: ys[0], end: ys[ys.length - 1], max: Math.max(...ys), min: Math.min(...ys),
    slope_mib_h: slope(pts.map((p) => p[0]), ys) };
}

(async () => {
  const isoprofd = arg('isoprofd', null) || common.binaries(arg('build', null)).isoprofd;
  const minutes = Number(arg('minutes', '60'));
  const every = Number(arg('every', '60'));
  const warmup = Number(arg('warmup', '2'));
  const funcs = Number(arg('funcs', '20000'));
  const runtimes = arg('runtimes', 'node,deno').split(',');
  const json = arg('json', null);
  for (const r of runtimes) if (r !== 'node' && r !== 'deno') throw new Error(`unknown runtime ${r}`);
  if (!(minutes > 0 && every > 0 && warmup >= 0 && funcs > 0)) throw new Error('--minutes, --every and --funcs must be > 0, --warmup >= 0');
  const began = Date.now();
  // Bounded: whatever happens, stop everything and leave.
  const limit = setTimeout(() => { console.error('bench_warm_memory: time limit reached, stopping'); process.exit(2); }, (minutes + warmup + 10) * 60000);
  limit.unref();

  const deno = runtimes.includes('deno') ? denoBinary() : null;
  const apps = {}; // key "node-warm" -> child
  for (const r of runtimes) {
    for (const mode of ['warm', 'cold']) {
      apps[`${r}-${mode}`] = await startApp(r, funcs, deno);
      console.error(`${r}-${mode}: pid ${apps[`${r}-${mode}`].pid}, inspector 127.0.0.1:${apps[`${r}-${mode}`].port}`);
    }
  }
  const daemons = {};
  for (const mode of ['warm', 'cold']) {
    daemons[mode] = await startDaemon(isoprofd, mode, runtimes.map((r) => ({ port: apps[`${r}-${mode}`].port, worker: `${r}-${mode}` })));
    console.error(`isoprofd ${mode}: pid ${daemons[mode].pid}`);
  }

  const t0 = Date.now();
  const samples = [];
  const take = () => {
    const s = { t_s: +((Date.now() - t0) / 1000).toFixed(1) };
    for (const [k, c] of Object.entries(apps)) s[k] = mem(c.pid);
    for (const [m, d] of Object.entries(daemons)) {
      s[`isoprofd-${m}`] = mem(d.pid);
      s[`rotations-${m}`] = { ...d.rotations };
      s[`windows-${m}`] = { ...d.windows };
    }
    samples.push(s);
    const brief = Object.keys(apps).map((k) => `${k}=${s[k] ? (s[k].rss / MiB).toFixed(1) : 'gone'}`).join(' ');
    console.error(`t=${Math.round(s.t_s)}s ${brief} isoprofd warm/cold=${['warm', 'cold'].map((m) => (s[`isoprofd-${m}`] ? (s[`isoprofd-${m}`].rss / MiB).toFixed(1) : 'gone')).join('/')} rotations=${JSON.stringify(daemons.warm.rotations)}`);
    return s;
  };
  const total = (warmup + minutes) * 60;
  let rotAtStart = null, winAtStart = null;
  for (let k = 0; ; k++) {
    const due = t0 + k * every * 1000;
    if (due > Date.now()) await sleep(due - Date.now());
    const s = take();
    if (rotAtStart === null && s.t_s >= warmup * 60) {
      rotAtStart = { ...daemons.warm.rotations };
      winAtStart = { warm: { ...daemons.warm.windows }, cold: { ...daemons.cold.windows } };
    }
    if (s.t_s >= total - 0.5) break;
    if (Object.values(daemons).some((d) => d.exitCode !== null)) { console.error('an isoprofd exited; stopping early'); break; }
  }
  let status = {};
  for (const [m, d] of Object.entries(daemons)) {
    try { status[m] = await getJson({ socketPath: d.sock, path: '/status' }); } catch (e) { status[m] = { error: e.message }; }
  }
  const cpuMode = {};
  for (const [m, st] of Object.entries(status)) for (const t of st.targets || []) if (t.thread === 'main') cpuMode[t.worker] = t.cpu_mode;
  for (const d of Object.values(daemons)) await common.stop(d, 'SIGTERM', 15000);
  for (const c of Object.values(apps)) await common.stop(c);

  const warmupS = warmup * 60;
  const rows = [];
  const result = { isoprofd, node: process.version, deno: deno && spawnSync(deno, ['--version'], { encoding: 'utf8' }).stdout.split('\n')[0],
    funcs, minutes, every_s: every, warmup_min: warmup, began: new Date(began).toISOString(), summary: {}, cpu_mode: cpuMode, samples };
  const f = (x, d = 1) => common.fx(x, d);
  const sgn = (x, d = 1) => (Number.isFinite(x) ? (x >= 0 ? '+' : '') + x.toFixed(d) : '-');
  for (const r of runtimes) {
    const by = {};
    for (const mode of ['warm', 'cold']) {
      const key = `${r}-${mode}`;
      const st = stats(samples, key, warmupS);
      const d = daemons[mode];
      st.rotations = (d.rotations[key] || 0) - ((rotAtStart && rotAtStart[key]) || 0);
      st.rotations_total = d.rotations[key] || 0;
      st.cpu_windows = (d.windows[key] || 0) - ((winAtStart && winAtStart[mode][key]) || 0);
      by[mode] = st;
      result.summary[key] = st;
      rows.push([r, mode, f(st.start), f(st.end), f(st.max), sgn(st.slope_mib_h, 2), mode === 'warm' ? st.rotations : '-', st.cpu_windows]);
    }
    const w = by.warm, c = by.cold;
    result.summary[`${r}-warm-minus-cold`] = { start: w.start - c.start, end: w.end - c.end, max: w.max - c.max, slope_mib_h: w.slope_mib_h - c.slope_mib_h };
    rows.push([r, 'warm-cold', sgn(w.start - c.start), sgn(w.end - c.end), sgn(w.max - c.max), sgn(w.slope_mib_h - c.slope_mib_h, 2), '', '']);
  }
  for (const mode of ['warm', 'cold']) {
    const st = stats(samples, `isoprofd-${mode}`, warmupS);
    result.summary[`isoprofd-${mode}`] = st;
    rows.push(['isoprofd', mode, f(st.start), f(st.end), f(st.max), sgn(st.slope_mib_h, 2), '', '']);
  }
  const measured = samples.filter((s) => s.t_s >= warmupS);
  console.log(`RSS (MiB) over ${measured.length ? ((measured[measured.length - 1].t_s - measured[0].t_s) / 60).toFixed(1) : 0} min after a ${warmup} min warm-up, ` +
    `${measured.length} samples every ${every} s, ${funcs} functions, node ${process.version}${deno ? `, ${result.deno}` : ''}`);
  common.printTable(['runtime', 'mode', 'start', 'end', 'max', 'slope MiB/h', 'rotations', 'cpu windows'], rows);
  if (json) fs.writeFileSync(json, JSON.stringify(result, null, 1));
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
