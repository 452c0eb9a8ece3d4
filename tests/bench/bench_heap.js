#!/usr/bin/env node
// What heap sampling costs a Node target, and how fast the agent catches
// memory near the limit:
//   1. pause: the event-loop stall of one HeapProfiler.getSamplingProfile
//      (a forced full GC) with 16, 64 and 128 MiB of live heap, measured
//      inside the target (the longest gap between 1 ms ticks around the
//      call) and as the CDP round trip;
//   2. throughput: an allocation-heavy loop with and without the sampler
//      at 512 KiB, interleaved A B A B, ops/s as a ratio;
//   3. detection: isoprofd against the leak workload, from the first
//      memory poll at or above the threshold to the committed heap window
//      (the daemon's own log timestamps).
//
//   node --experimental-websocket tests/bench/bench_heap.js [--build build] [--reps 5] [--json out.json]
//
// It measures; it asserts nothing. Children run on 127.0.0.1 and are
// stopped by their PID.
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
const REPS = parseInt(arg('reps', '5'), 10);
const jsonOut = arg('json', null);
const children = [];
process.on('exit', () => { for (const c of children) { try { process.kill(c.pid, 'SIGKILL'); } catch (_) { /* gone */ } } });

const median = (a) => { const s = [...a].sort((x, y) => x - y); return s.length ? s[Math.floor((s.length - 1) / 2)] : NaN; };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A target holding `mib` of live objects; it reports, on request over
// stdout, the longest gap between its 1 ms ticks since the last request,
// and can run an allocation loop for a fixed time.
const target = `
const live = [];
const want = Number(process.env.LIVE_MIB) * 1048576;
let bytes = 0;
while (bytes < want) { live.push({ a: 'x'.repeat(200) + bytes, b: [bytes, bytes + 1] }); bytes += 300; }
let last = performance.now(), gap = 0;
setInterval(() => { const t = performance.now(); gap = Math.max(gap, t - last); last = t; }, 1);
process.stdin.on('data', (d) => {
  const cmd = String(d).trim();
  if (cmd === 'gap') { process.stdout.write(JSON.stringify({ gap }) + '\\n'); gap = 0; }
  else if (cmd === 'alloc') {
    const end = performance.now() + 2000; let ops = 0; let keep = null;
    while (performance.now() < end) { for (let i = 0; i < 1000; i++) keep = { i, s: 'y' + i, arr: [i, i] }; ops += 1000; }
    process.stdout.write(JSON.stringify({ ops: ops / 2, keep: !!keep }) + '\\n');
  }
});
`;

async function startTarget(mib) {
  const c = spawn(process.execPath, ['--inspect=127.0.0.1:0', '-e', target], { stdio: ['pipe', 'pipe', 'pipe'], env: { ...process.env, LIVE_MIB: String(mib) } });
  children.push(c);
  let err = '';
  c.stderr.on('data', (d) => { err += d; });
  const url = await new Promise((resolve, reject) => {
    const t = setInterval(() => {
      const m = /Debugger listening on (ws:\/\/\S+)/.exec(err);
      if (m) { clearInterval(t); resolve(m[1]); }
      if (c.exitCode !== null) { clearInterval(t); reject(new Error(err)); }
    }, 20);
  });
  let out = '';
  const waiters = [];
  c.stdout.on('data', (d) => {
    out += d;
    let i;
    while ((i = out.indexOf('\n')) >= 0) { const line = out.slice(0, i); out = out.slice(i + 1); const w = waiters.shift(); if (w) w(JSON.parse(line)); }
  });
  c.ask = (cmd) => new Promise((resolve) => { waiters.push(resolve); c.stdin.write(cmd + '\n'); });
  const ws = new WebSocket(url);
  await new Promise((resolve, reject) => { ws.onopen = resolve; ws.onerror = reject; });
  let id = 0;
  const pending = new Map();
  ws.onmessage = (m) => { const r = JSON.parse(m.data); if (pending.has(r.id)) { pending.get(r.id)(r); pending.delete(r.id); } };
  c.call = (method, params = {}) => new Promise((resolve) => { pending.set(++id, resolve); ws.send(JSON.stringify({ id, method, params })); });
  c.ws = ws;
  await sleep(1500); // let the heap settle
  return c;
}

async function stopTarget(c) {
  c.ws.close();
  c.kill('SIGKILL');
  await new Promise((r) => c.once('exit', r));
}

async function pauses() {
  const rows = [];
  for (const mib of [16, 64, 128]) {
    const c = await startTarget(mib);
    await c.call('HeapProfiler.startSampling', { samplingInterval: 524288 });
    const gaps = [], rtts = [];
    for (let r = 0; r < REPS; r++) {
      await sleep(300);
      await c.ask('gap');
      const t0 = performance.now();
      const res = await c.call('HeapProfiler.getSamplingProfile');
      rtts.push(performance.now() - t0);
      if (!res.result) throw new Error(JSON.stringify(res).slice(0, 200));
      await sleep(50);
      gaps.push((await c.ask('gap')).gap);
    }
    // The baseline: the same gap with no call in between.
    const idle = [];
    for (let r = 0; r < REPS; r++) { await c.ask('gap'); await sleep(400); idle.push((await c.ask('gap')).gap); }
    rows.push({ live_mib: mib, stall_ms: median(gaps), stall_max_ms: Math.max(...gaps), rtt_ms: median(rtts), idle_gap_ms: median(idle) });
    await stopTarget(c);
  }
  return rows;
}

async function throughput() {
  const c = await startTarget(16);
  const off = [], on = [];
  for (let r = 0; r < REPS; r++) {
    off.push((await c.ask('alloc')).ops);
    await c.call('HeapProfiler.startSampling', { samplingInterval: 524288 });
    on.push((await c.ask('alloc')).ops);
    await c.call('HeapProfiler.stopSampling');
  }
  await stopTarget(c);
  const ratios = off.map((o, i) => on[i] / o);
  return { ops_off: median(off), ops_on: median(on), ratio: median(ratios), ratio_min: Math.min(...ratios), ratio_max: Math.max(...ratios) };
}

async function detection() {
  const results = [];
  for (let r = 0; r < Math.min(REPS, 3); r++) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'isoprof-bench-heap-'));
    const node = spawn(process.execPath, ['--inspect=127.0.0.1:0', '--max-old-space-size=64', path.join(root, 'tests/integration/workloads/node-leak.js')],
      { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, LEAK_PER_TICK: '60', LEAK_START_MS: '1500' } });
    children.push(node);
    let err = '';
    node.stderr.on('data', (d) => { err += d; });
    while (!/127\.0\.0\.1:(\d+)\//.test(err)) await sleep(20);
    const port = /127\.0\.0\.1:(\d+)\//.exec(err)[1];
    fs.writeFileSync(path.join(dir, 'c.yaml'), [
      `store: {path: ${JSON.stringify(path.join(dir, 'store'))}}`,
      `targets: [{inspector: "127.0.0.1:${port}", memory_limit: 56MiB}]`,
      'anomaly: {latency: {listen: ""}}',
      'log: {level: debug}', ''].join('\n'));
    const d = spawn(path.join(build, 'agent', 'isoprofd'), ['--config', path.join(dir, 'c.yaml')], { stdio: ['ignore', 'ignore', 'pipe'] });
    children.push(d);
    let log = '';
    d.stderr.on('data', (x) => { log += x; });
    const t0 = Date.now();
    while (Date.now() - t0 < 60000 && !/type=heap .*anomaly=memory_near_limit/.test(log)) await sleep(100);
    d.kill('SIGTERM');
    node.kill('SIGKILL');
    await new Promise((res) => d.once('exit', res));
    const ts = (re) => { const m = new RegExp('ts=(\\S+) [^\\n]*' + re).exec(log); return m ? Date.parse(m[1]) : NaN; };
    const crossed = ts('msg="anomaly flagged" kind=memory_near_limit');
    const stored = ts('msg="window stored"[^\\n]*type=heap[^\\n]*anomaly=memory_near_limit');
    results.push(stored - crossed);
    fs.rmSync(dir, { recursive: true, force: true });
  }
  // A run where the isolate died before the flag (or the flag came late)
  // has no figure; it is counted, not averaged.
  const ok = results.filter(Number.isFinite);
  return { detect_to_heap_window_ms: median(ok), runs_ms: ok, runs_without_figure: results.length - ok.length, poll_ms: 1000 };
}

(async () => {
  if (typeof WebSocket !== 'function') throw new Error('run with node --experimental-websocket');
  const out = { machine: `${os.cpus().length} x ${os.cpus()[0].model}`, node: process.version, reps: REPS };
  out.pauses = await pauses();
  out.throughput = await throughput();
  out.detection = await detection();
  console.log('heap window pause (getSamplingProfile, forced GC), medians of', REPS);
  console.log('live MiB  stall ms  (max)   CDP rtt ms  idle gap ms');
  for (const r of out.pauses) console.log(`${String(r.live_mib).padStart(8)}  ${r.stall_ms.toFixed(1).padStart(8)}  ${r.stall_max_ms.toFixed(1).padStart(6)}  ${r.rtt_ms.toFixed(1).padStart(10)}  ${r.idle_gap_ms.toFixed(1).padStart(11)}`);
  const t = out.throughput;
  console.log(`allocation loop with the sampler at 512 KiB: ${t.ratio.toFixed(3)}x of without (range ${t.ratio_min.toFixed(3)}..${t.ratio_max.toFixed(3)}; ${Math.round(t.ops_on)} vs ${Math.round(t.ops_off)} ops/s)`);
  console.log(`detection: threshold crossed (1 s polls) -> heap window committed: median ${out.detection.detect_to_heap_window_ms} ms (${out.detection.runs_ms.join(', ')}; ${out.detection.runs_without_figure} runs without a figure)`);
  if (jsonOut) fs.writeFileSync(jsonOut, JSON.stringify(out, null, 2));
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
