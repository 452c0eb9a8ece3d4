#!/usr/bin/env node
// Measures the daemon's own cost: CPU seconds per profiled isolate-hour and
// RSS (steady VmRSS, peak VmHWM) with N attached Node isolates at a given
// schedule (the embedded defaults unless told otherwise).
//
//   node tests/bench/bench_daemon.js --isolates 10 --seconds 180 [--build build]
//        [--duration 10s --period 60s --interval 10ms] [--json out.json]
//
// It measures; it asserts nothing. Every child is started here on 127.0.0.1
// and stopped by its PID at the end.
'use strict';
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

function arg(name, def) {
  const i = process.argv.indexOf('--' + name);
  return i > 0 ? process.argv[i + 1] : def;
}
const root = path.resolve(__dirname, '..', '..');
const build = path.resolve(arg('build', path.join(root, 'build')));
const N = parseInt(arg('isolates', '10'), 10);
const SECONDS = parseInt(arg('seconds', '180'), 10);
const sched = { duration: arg('duration', '10s'), period: arg('period', '60s'), interval: arg('interval', '10ms') };
const jsonOut = arg('json', null);
const TICKS = 100; // sysconf(_SC_CLK_TCK) on Linux

const children = [];
function cleanup() {
  for (const c of children) { try { process.kill(c.pid, 'SIGKILL'); } catch (_) {} }
}
process.on('exit', cleanup);
process.on('SIGINT', () => process.exit(130));

const workload = `
function handle(i){const o={id:i,items:[]};for(let k=0;k<50;k++)o.items.push({k,v:Math.sqrt(k*i)});return JSON.stringify(o).length}
let n=0;setInterval(()=>{for(let i=0;i<200;i++)n+=handle(i)},20);
`;

function startNode(dir, i) {
  const file = path.join(dir, `iso${i}.js`);
  fs.writeFileSync(file, workload);
  return new Promise((resolve, reject) => {
    const c = spawn(process.execPath, ['--inspect=127.0.0.1:0', file], { stdio: ['ignore', 'ignore', 'pipe'] });
    children.push(c);
    let buf = '';
    const t = setTimeout(() => reject(new Error('node did not print its inspector port')), 10000);
    c.stderr.on('data', (d) => {
      buf += d;
      const m = /ws:\/\/127\.0\.0\.1:(\d+)\//.exec(buf);
      if (m) { clearTimeout(t); resolve(parseInt(m[1], 10)); }
    });
  });
}

function procStat(pid) {
  const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
  return (parseInt(f[11], 10) + parseInt(f[12], 10)) / TICKS; // utime + stime
}
function procMem(pid) {
  const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k) => parseInt(new RegExp(k + ':\\s+(\\d+)').exec(s)[1], 10);
  return { rss: kb('VmRSS'), hwm: kb('VmHWM') };
}

(async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'isoprof-bench-'));
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  const ports = [];
  for (let i = 0; i < N; i++) ports.push(await startNode(dir, i));
  const cfg = [
    `store: {path: "${dir}/store"}`,
    'targets:',
    ...ports.map((p, i) => `  - {inspector: "127.0.0.1:${p}", worker: "bench${i}"}`),
    `sampling: {cpu: {duration: ${sched.duration}, period: ${sched.period}, interval: ${sched.interval}}}`,
    'log: {level: warn}',
  ].join('\n');
  fs.writeFileSync(path.join(dir, 'cfg.yaml'), cfg);
  const d = spawn(path.join(build, 'agent', 'isoprofd'), ['--config', path.join(dir, 'cfg.yaml')], { stdio: ['ignore', 'ignore', 'inherit'] });
  children.push(d);
  await new Promise((r) => setTimeout(r, 3000)); // attach
  const cpu0 = procStat(d.pid);
  const rssSamples = [];
  const t0 = Date.now();
  while (Date.now() - t0 < SECONDS * 1000) {
    await new Promise((r) => setTimeout(r, 1000));
    rssSamples.push(procMem(d.pid).rss);
  }
  const cpu1 = procStat(d.pid);
  const mem = procMem(d.pid);
  d.kill('SIGINT');
  await new Promise((r) => d.on('exit', r));
  const wall = (Date.now() - t0) / 1000;
  const windows = require('node:child_process')
    .spawnSync(path.join(build, 'agent', 'isoprof'), ['windows', '--store', `${dir}/store`, '--json'], { encoding: 'utf8' })
    .stdout.split('\n').filter(Boolean).length;
  rssSamples.sort((a, b) => a - b);
  const res = {
    isolates: N, seconds: wall, schedule: sched, windows_stored: windows,
    daemon_cpu_s: +(cpu1 - cpu0).toFixed(3),
    cpu_pct_of_core: +(100 * (cpu1 - cpu0) / wall).toFixed(3),
    cpu_s_per_isolate_hour: +((cpu1 - cpu0) / (N * wall / 3600)).toFixed(3),
    rss_median_kib: rssSamples[rssSamples.length >> 1], rss_end_kib: mem.rss, vmhwm_kib: mem.hwm,
  };
  console.log('isolates  seconds  windows  cpu_s  %core   cpu_s/isolate-h  rss_med_MiB  hwm_MiB');
  console.log(`${String(N).padEnd(9)} ${wall.toFixed(0).padEnd(8)} ${String(windows).padEnd(8)} ${res.daemon_cpu_s.toFixed(2).padEnd(6)} ${res.cpu_pct_of_core.toFixed(3).padEnd(7)} ${res.cpu_s_per_isolate_hour.toFixed(3).padEnd(16)} ${(res.rss_median_kib / 1024).toFixed(1).padEnd(12)} ${(res.vmhwm_kib / 1024).toFixed(1)}`);
  if (jsonOut) fs.writeFileSync(jsonOut, JSON.stringify(res, null, 2));
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
