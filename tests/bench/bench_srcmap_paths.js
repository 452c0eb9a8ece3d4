#!/usr/bin/env node
// What one app whose frames name many big scripts costs the daemon and the
// other targets on the host: isoprofd profiling
//   paths  a Node app whose CPU frames name --paths script paths, each a
//          hard link to one --mib MiB file without a newline (the app
//          compiles a small script under each path with vm.Script, so the
//          frames name the big file while Node never reads it:
//          tests/integration/workloads/node-many-paths.js), and
//   ok     a light Node app beside it,
// both on CPU windows of 2 s every 3 s, for --seconds. Prints the daemon's
// CPU over the run (utime + stime from /proc/PID/stat, as a share of one
// core), the windows each target got against the ones due (seconds / 3),
// the source-map figures of /status, and how long SIGTERM took to end the
// daemon (SIGKILL after --kill-after seconds). Works against any build
// (--build DIR), so that one command measures before and after.
//
// --fill b64 makes the big file base64 letters that end like an inline
// map's data, which the daemon follows back as far as source_maps_max_file:
// each path then costs real work, and the target's CPU allowance
// (source_maps_cpu) is what bounds it.
//
//   node tests/bench/bench_srcmap_paths.js [--build DIR] [--paths 2000] [--mib 60]
//        [--fill x|b64] [--seconds 60] [--kill-after 20] [--json FILE]
//
// It measures; it asserts nothing.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const common = require('./common');

if (process.argv.includes('--help')) {
  console.log(fs.readFileSync(__filename, 'utf8').split('\n').slice(1, 25).map((l) => l.replace(/^\/\/ ?/, '')).join('\n'));
  process.exit(0);
}

const WORKLOADS = path.join(common.ROOT, 'tests', 'integration', 'workloads');

function windowsOf(bin, store, worker) {
  const r = spawnSync(bin.isoprof, ['windows', '--store', store, '--worker', worker, '--type', 'cpu', '--json'],
    { encoding: 'utf8', timeout: 30000 });
  if (r.status !== 0) return [];
  const t = r.stdout.trim();
  if (!t) return [];
  try { const v = JSON.parse(t); return Array.isArray(v) ? v : [v]; } catch (_) { return t.split('\n').filter(Boolean).map((l) => JSON.parse(l)); }
}

function status(bin, sock) {
  const r = spawnSync(bin.isoprof, ['status', '--socket', sock, '--json'], { encoding: 'utf8', timeout: 10000 });
  if (r.status !== 0) return null;
  try { return JSON.parse(r.stdout); } catch (_) { return null; }
}

async function main() {
  const bin = common.binaries(common.arg('build'));
  const npaths = Number(common.arg('paths', 2000));
  const mib = Number(common.arg('mib', 60));
  const seconds = Number(common.arg('seconds', 60));
  const killAfter = Number(common.arg('kill-after', 20));
  const dir = common.tmpdir('srcpaths');
  const app = path.join(dir, 'app');
  fs.mkdirSync(app);

  // The app: its main script and the paths beneath one directory, so that
  // they are in its tree (the directory of its main script) and looked at.
  const main = path.join(app, 'main.js');
  fs.copyFileSync(path.join(WORKLOADS, 'node-many-paths.js'), main);
  const fill = common.arg('fill', 'x');
  const paths = common.start(process.execPath, ['--inspect=127.0.0.1:0', main, app, String(npaths), String(mib), fill], { cwd: app });
  await common.waitFor(() => {
    if (paths.exitCode !== null) throw new Error(`the app exited: ${paths.err.slice(-2000)}`);
    return /ready/.test(paths.out);
  }, 300000, 'the app to compile its scripts');
  paths.port = Number(/Debugger listening on ws:\/\/127\.0\.0\.1:(\d+)\//.exec(paths.err)[1]);
  const ok = await common.startNode(path.join(WORKLOADS, 'node-light.js'));

  const store = path.join(dir, 'store');
  const cfg = path.join(dir, 'isoprof.yaml');
  fs.writeFileSync(cfg, [
    `store: {path: ${JSON.stringify(store)}}`,
    'targets:',
    `  - {inspector: "127.0.0.1:${paths.port}", worker: paths}`,
    `  - {inspector: "127.0.0.1:${ok.port}", worker: ok}`,
    'sampling: {cpu: {duration: 2s, period: 3s, interval: 1ms}, heap: {period: 24h}, budget: {pause_share: 100%}}',
    'anomaly: {latency: {listen: ""}}',
    'log: {level: info}',
    '',
  ].join('\n'));
  const d = common.start(bin.isoprofd, ['--config', cfg]);
  await common.sleep(500);
  if (d.exitCode !== null) throw new Error(`isoprofd exited: ${d.err.slice(-2000)}`);
  const cpu0 = common.procCpu(d.pid);
  const t0 = Date.now();
  await common.sleep(seconds * 1000);
  const cpu = common.procCpu(d.pid) - cpu0;
  const wall = (Date.now() - t0) / 1000;
  const st = status(bin, path.join(store, 'control.sock'));
  const due = Math.floor(seconds / 3);
  const ts = Date.now();
  const r = await common.stop(d, 'SIGTERM', killAfter * 1000);
  const stopMs = Date.now() - ts;
  const wp = windowsOf(bin, store, 'paths').length;
  const wo = windowsOf(bin, store, 'ok').length;
  await common.stop(paths);
  await common.stop(ok);

  const out = {
    paths: npaths, mib, fill, seconds: wall,
    daemon_cpu_s: cpu, daemon_cpu_share: cpu / wall,
    windows_due: due, windows_paths: wp, windows_ok: wo,
    sigterm_ms: stopMs, sigterm_exit: r.signal ? `signal ${r.signal}` : `code ${r.code}`,
    source_maps: st ? st.source_maps : null,
  };
  common.printTable(['figure', 'value'], [
    ['daemon CPU', `${cpu.toFixed(2)} s in ${wall.toFixed(1)} s (${(100 * cpu / wall).toFixed(1)} % of a core)`],
    ['windows of ok', `${wo} of ${due} due`],
    ['windows of paths', `${wp} of ${due} due`],
    ['SIGTERM to exit', `${stopMs} ms (${out.sigterm_exit}${r.signal === 'SIGKILL' ? `, killed after ${killAfter} s` : ''})`],
    ['source_maps', st ? JSON.stringify(st.source_maps) : '(no status)'],
  ]);
  const json = common.arg('json');
  if (json) fs.writeFileSync(json, JSON.stringify(out, null, 2) + '\n');
}

main().then(() => process.exit(0), (e) => { console.error(e.stack || e); process.exit(1); });
