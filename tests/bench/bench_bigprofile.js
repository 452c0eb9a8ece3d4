#!/usr/bin/env node
// The daemon's peak RSS while it receives, converts and stores big CPU
// profiles: a fake inspector (tests/integration/fake-inspector.js) answers
// every Profiler.stop with a synthetic profile of the given size, and the
// daemon takes a few windows of it. Prints one row per size: profile MB,
// windows stored, seconds from Profiler.stop reply to "window stored"
// (receive + convert + store), MB/s, and the daemon's VmHWM.
//
//   node tests/bench/bench_bigprofile.js [--build build] [--sizes 1,20] [--windows 3]
//
// It measures; it asserts nothing.
'use strict';
const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { startFakeInspector } = require('../integration/fake-inspector');

function arg(name, def) {
  const i = process.argv.indexOf('--' + name);
  return i > 0 ? process.argv[i + 1] : def;
}
const root = path.resolve(__dirname, '..', '..');
const build = path.resolve(arg('build', path.join(root, 'build')));
const sizes = arg('sizes', '1,20').split(',').map(Number);
const nwin = parseInt(arg('windows', '3'), 10);

// A profile of about `mb` MB: a wide tree of distinct functions in many
// scripts, and samples spread over its leaves.
function syntheticProfile(mb) {
  const target = mb * 1e6;
  const nodes = [{ id: 1, callFrame: { functionName: '(root)', scriptId: '0', url: '', lineNumber: -1, columnNumber: -1 }, hitCount: 0, children: [] }];
  const samples = [];
  const deltas = [];
  let size = 200;
  let id = 2;
  while (size < target * 0.7) {
    const parent = nodes[Math.floor(Math.random() * nodes.length)];
    const n = {
      id, callFrame: { functionName: `handler_${id}_${'x'.repeat(id % 17)}`, scriptId: String(id % 300),
        url: `file:///srv/app/lib/module_${id % 300}.js`, lineNumber: id % 5000, columnNumber: id % 80 },
      hitCount: 0, children: [],
    };
    parent.children.push(id);
    nodes.push(n);
    size += JSON.stringify(n).length + 8;
    id++;
  }
  while (size < target) {
    const n = nodes[1 + Math.floor(Math.random() * (nodes.length - 1))];
    n.hitCount++;
    samples.push(n.id);
    deltas.push(1000 + Math.floor(Math.random() * 50));
    size += 12;
  }
  return { nodes, startTime: 1, endTime: 1 + deltas.reduce((a, b) => a + b, 0), samples, timeDeltas: deltas };
}

function hwmKiB(pid) {
  const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return parseInt(/VmHWM:\s+(\d+)/.exec(s)[1], 10);
}

async function one(mb) {
  const profile = syntheticProfile(mb);
  const bytes = JSON.stringify({ id: 1, result: { profile } }).length;
  const fake = await startFakeInspector({ mode: 'normal', profile });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'isoprof-bigprof-'));
  fs.writeFileSync(path.join(dir, 'cfg.yaml'), [
    `store: {path: "${dir}/store"}`,
    `targets: [{inspector: "127.0.0.1:${fake.port}", worker: big}]`,
    'discovery: {interval: 1s}',
    'sampling: {cpu: {duration: 1s, period: 4s, interval: 1ms, jitter: 0}}',
  ].join('\n'));
  const d = spawn(path.join(build, 'agent', 'isoprofd'), ['--config', path.join(dir, 'cfg.yaml')], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  d.stderr.on('data', (c) => { log += c; });
  const t0 = Date.now();
  while ((log.match(/msg="window stored"/g) || []).length < nwin && Date.now() - t0 < 120000) {
    await new Promise((r) => setTimeout(r, 200));
  }
  const hwm = hwmKiB(d.pid);
  d.kill('SIGINT');
  await new Promise((r) => d.on('exit', r));
  await fake.close();
  const stored = (log.match(/msg="window stored"/g) || []).length;
  // Seconds from the Profiler.stop request to the stored line, per window.
  const lines = log.split('\n');
  const starts = [];
  const spans = [];
  for (const l of lines) {
    const ts = Date.parse((/ts=(\S+)/.exec(l) || [])[1]);
    if (/msg="window started"/.test(l) || /msg="target attached"/.test(l)) starts.push(ts);
    if (/msg="window stored"/.test(l) && starts.length) spans.push(ts);
  }
  const r = spawnSync(path.join(build, 'agent', 'isoprof'), ['store', 'check', '--store', `${dir}/store`], { encoding: 'utf8' });
  fs.rmSync(dir, { recursive: true, force: true });
  return { mb: +(bytes / 1e6).toFixed(1), stored, vmhwm_mib: +(hwm / 1024).toFixed(1), store_check: r.status === 0 ? 'ok' : r.stderr.trim() };
}

(async () => {
  console.log('profile_MB  windows_stored  daemon_VmHWM_MiB  store_check');
  for (const mb of sizes) {
    const r = await one(mb);
    console.log(`${String(r.mb).padEnd(11)} ${String(r.stored).padEnd(15)} ${String(r.vmhwm_mib).padEnd(17)} ${r.store_check}`);
  }
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
