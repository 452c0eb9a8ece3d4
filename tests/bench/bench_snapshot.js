// What a heap snapshot near the limit costs isoprofd itself
// (anomaly.memory.snapshot): for each live heap size, an app holding that
// much (workloads/pauses-app.js, LIVE_MIB: a module-level Map of session
// records) and a daemon whose memory_limit puts the app past the
// threshold at once. The daemon takes the snapshot, streams it into its
// store and builds the retained profile; this measures, from the
// daemon's /proc/PID/status sampled every 20 ms (and its VmHWM at the end):
//   - its RSS before, its peak while the snapshot streams (from "heap
//     snapshot started" to "heap snapshot stored"), and its peak while
//     the retained profile is made (to "window stored type=retained");
//   - the snapshot's text bytes and the target's stall (the daemon's
//     pause_ms, the CDP round trip), how often the daemon paused its
//     reads to let the store catch up, the target's extra memory (its
//     VmHWM, reset through /proc/PID/clear_refs before the snapshot,
//     above its RSS then; and what it still holds after), the retained
//     window's nodes (its
//     samples: the reachable nodes) and the time the retained profile
//     took (log timestamps);
//   - the store's bytes for the raw snapshot (compressed);
//   - the daemon's VmHWM at the end, and a retained profile refused for
//     the conversion's budget (the raw snapshot kept) with its reason.
// It asserts nothing.
//
//   node tests/bench/bench_snapshot.js [--build DIR] [--mib 32,64,128] [--reps 1]
//                                      [--json FILE]
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const common = require('./common');

const APP = path.join(__dirname, 'workloads', 'pauses-app.js');

function usage(code) {
  (code ? process.stderr : process.stdout).write(
    'usage: node tests/bench/bench_snapshot.js [--build DIR] [--mib 32,64,128] [--reps N] [--json FILE]\n');
  process.exit(code);
}

function parseLog(line) {
  const o = {};
  const re = /([A-Za-z_][\w.]*)=(?:"((?:[^"\\]|\\.)*)"|(\S*))/g;
  let m;
  while ((m = re.exec(line)) !== null) o[m[1]] = m[2] !== undefined ? m[2] : m[3];
  return o;
}

async function startApp(mib) {
  const c = common.start(process.execPath, ['--inspect=127.0.0.1:0', `--max-old-space-size=${4 * mib + 256}`, APP],
    { stdio: ['pipe', 'pipe', 'pipe'], env: { FUNCS: '200', LIVE_MIB: String(mib) } });
  await common.waitFor(() => {
    if (c.exitCode !== null) throw new Error(`pauses-app exited: ${c.err.slice(-1000)}`);
    return /"ready"/.test(c.out) && /Debugger listening on ws:\/\//.test(c.err);
  }, 300000, `pauses-app with ${mib} MiB to start`);
  c.port = parseInt(/ws:\/\/127\.0\.0\.1:(\d+)\//.exec(c.err)[1], 10);
  return c;
}

async function one(bin, mib) {
  const app = await startApp(mib);
  const dir = common.tmpdir('snap');
  const store = path.join(dir, 'store');
  const cfg = path.join(dir, 'isoprof.yaml');
  // memory_limit 1 MiB: the app is past its threshold at the first poll.
  fs.writeFileSync(cfg, [
    `store: {path: ${JSON.stringify(store)}}`,
    'targets:',
    `  - {inspector: "127.0.0.1:${app.port}", worker: bench, version: v1, memory_limit: 1MiB}`,
    'sampling: {cpu: {duration: 2s, period: 600s}, memory_poll: 500ms}',
    'anomaly: {memory: {snapshot: true, snapshot_max_heap: 4GiB, heap_period: 600s}, latency: {listen: ""}}',
    `control: {socket: ${JSON.stringify(path.join(dir, 'control.sock'))}}`,
    'log: {level: info}',
  ].join('\n') + '\n');
  const d = common.start(bin.isoprofd, ['--config', cfg]);
  const lines = () => d.err.split('\n').map(parseLog);
  const find = (pred) => lines().find(pred);
  const samples = [];
  const timer = setInterval(() => {
    try { samples.push({ t: Date.now(), rss: common.procMem(d.pid).rss }); } catch (_) { /* exited */ }
  }, 20);
  await common.waitFor(() => find((l) => l.msg === 'window stored' && l.type === 'cpu'), 120000, 'the first window');
  const before = common.procMem(d.pid).rss;
  // The target's peak from here (VmHWM reset to the current RSS).
  let reset = true;
  try { fs.writeFileSync(`/proc/${app.pid}/clear_refs`, '5'); } catch (_) { reset = false; }
  const appBefore = common.procMem(app.pid).rss;
  const started = await common.waitFor(() => find((l) => l.msg === 'heap snapshot started'), 300000, 'the snapshot to start');
  const stored = await common.waitFor(() => find((l) => l.msg === 'heap snapshot stored' || l.msg === 'heap snapshot discarded'), 900000, 'the snapshot');
  if (stored.msg !== 'heap snapshot stored') { fs.writeFileSync('/tmp/bsd.log', d.err); throw new Error(`snapshot discarded: ${stored.why}`); }
  const ret = await common.waitFor(() => find((l) => (l.msg === 'window stored' && l.type === 'retained') ||
    (l.msg === 'conversion failed' && l.type === 'retained')), 900000, 'the retained profile');
  clearInterval(timer);
  // A snapshot past the conversion's budget is refused (its raw window
  // kept): that is a result, with the daemon's peak through it.
  const refused = ret.msg !== 'window stored' ? ret.why : null;
  const ts = (l) => Date.parse(l.ts);
  const peakIn = (t0, t1) => Math.max(...samples.filter((s) => s.t >= t0 && s.t <= t1 + 20).map((s) => s.rss), before);
  const hwm = common.procMem(d.pid).hwm;
  const appAfter = common.procMem(app.pid);
  await common.stop(d);
  await common.stop(app);
  const w = spawnSync(bin.isoprof, ['windows', '--store', store, '--type', 'snapshot', '--json'], { encoding: 'utf8' });
  const snapWin = w.status === 0 ? JSON.parse(w.stdout.trim().split('\n')[0]) : {};
  fs.rmSync(dir, { recursive: true, force: true });
  const MiB = 1048576, KiB = 1024; // procMem is in kB
  return {
    live_mib: mib,
    used_mib: +(Number(started.used) / MiB).toFixed(1),
    text_mib: +(Number(stored.bytes) / MiB).toFixed(1),
    stored_mib: snapWin.bytes !== undefined ? +(snapWin.bytes / MiB).toFixed(1) : null,
    pause_ms: Number(stored.pause_ms),
    reads_paused: Number(stored.reads_paused),
    target_rss_before_mib: +(appBefore / KiB).toFixed(1),
    target_peak_extra_mib: reset ? +((appAfter.hwm - appBefore) / KiB).toFixed(1) : null,
    target_after_extra_mib: +((appAfter.rss - appBefore) / KiB).toFixed(1),
    nodes: refused ? null : Number(ret.samples),
    retained_refused: refused,
    daemon_hwm_mib: +(hwm / KiB).toFixed(1),
    retained_s: +((ts(ret) - ts(stored)) / 1000).toFixed(2),
    rss_before_mib: +(before / KiB).toFixed(1),
    stream_peak_extra_mib: +((peakIn(ts(started), ts(stored)) - before) / KiB).toFixed(1),
    retained_peak_extra_mib: +((Math.max(hwm, peakIn(ts(stored), ts(ret))) - before) / KiB).toFixed(1),
  };
}

async function main() {
  const argv = process.argv.slice(2);
  if (argv.includes('-h') || argv.includes('--help')) usage(0);
  const opt = (n, def) => { const i = argv.indexOf(`--${n}`); return i >= 0 ? argv[i + 1] : def; };
  const bin = common.binaries(opt('build', path.join(__dirname, '..', '..', 'build')));
  const sizes = opt('mib', '32,64,128').split(',').map(Number);
  const reps = parseInt(opt('reps', '1'), 10);
  if (sizes.some((x) => !(x > 0)) || !(reps > 0)) usage(2);
  const rows = [];
  for (const mib of sizes) {
    for (let r = 0; r < reps; r++) {
      const x = await one(bin, mib);
      rows.push(x);
      process.stderr.write(`${mib} MiB: ${JSON.stringify(x)}\n`);
    }
  }
  common.printTable(['live MiB', 'used MiB', 'text MiB', 'stored MiB', 'stall ms', 'paused', 'target +peak',
    'target +after', 'nodes', 'retained s', 'daemon RSS MiB', '+peak streaming', '+peak retained', 'MiB / M nodes',
    'daemon VmHWM MiB'],
  rows.map((x) => [x.live_mib, x.used_mib, x.text_mib, x.stored_mib, x.pause_ms, x.reads_paused,
    x.target_peak_extra_mib, x.target_after_extra_mib, x.nodes === null ? 'refused' : x.nodes, x.retained_s,
    x.rss_before_mib, x.stream_peak_extra_mib, x.retained_peak_extra_mib,
    x.nodes === null ? '-' : (x.retained_peak_extra_mib / (x.nodes / 1e6)).toFixed(1), x.daemon_hwm_mib]));
  for (const x of rows) if (x.retained_refused) process.stdout.write(`${x.live_mib} MiB: retained profile refused: ${x.retained_refused}\n`);
  const json = opt('json', null);
  if (json) fs.writeFileSync(json, JSON.stringify({ started: new Date().toISOString(), rows }, null, 2) + '\n');
}

main().catch((e) => { process.stderr.write(`bench_snapshot: ${e.stack || e}\n`); process.exit(1); });
