#!/usr/bin/env node
// What host process discovery costs: the CPU time of one /proc scan on a
// host of --procs processes, and isoprofd's CPU at the default interval
// (discovery.interval 5 s) with discovery on against off, side by side.
//
//   node tests/bench/bench_procscan.js [--build DIR] [--procs 500]
//        [--nodes 20] [--scans 50] [--seconds 60] [--json out.json]
//
// The host gets --procs sleeping processes (/bin/sleep) and --nodes idle
// Node processes (no inspector), so a scan for `node` reads every /proc
// entry's executable and the Node ones in full. Three scans are timed by
// tests/bench/bench_procscan.c: executables [node] (the default; --nodes
// matched), [sleep] (every sleeper matched: the worst case, each read in
// full) and [none-such] (nothing matched: the floor). Then two daemons
// with no targets run at once for --seconds, one with
// discovery.processes.enabled, one without, their CPU read from
// /proc/PID/stat. It measures; it asserts nothing.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const common = require('./common');

const HELP = `usage: node tests/bench/bench_procscan.js [options]

  --build DIR    the build tree (DIR/agent/isoprofd, DIR/tests/bench/bench_procscan; default build)
  --procs N      sleeping processes to start (default 500)
  --nodes N      idle Node processes to start (default 20)
  --scans N      scans timed per case (default 50)
  --seconds S    the daemons' measured run (default 60)
  --json FILE    write the figures
`;

async function main() {
  if (process.argv.includes('-h') || process.argv.includes('--help')) {
    process.stdout.write(HELP);
    return 0;
  }
  const arg = common.arg;
  const bin = common.binaries(arg('build'));
  const nprocs = Number(arg('procs', 500));
  const nnodes = Number(arg('nodes', 20));
  const scans = Number(arg('scans', 50));
  const seconds = Number(arg('seconds', 60));
  if (!(nprocs >= 0 && nnodes >= 0 && scans >= 1 && seconds >= 10)) {
    process.stderr.write(HELP);
    return 2;
  }
  const log = (m) => process.stderr.write(`${m}\n`);
  const scanBin = bin.bench('bench_procscan');
  if (!fs.existsSync(scanBin)) throw new Error(`${scanBin} not found: build the tree first`);

  log(`starting ${nprocs} sleepers and ${nnodes} idle Node processes`);
  const kids = [];
  for (let i = 0; i < nprocs; i++) kids.push(common.start('sleep', ['3600'], { stdio: 'ignore' }));
  for (let i = 0; i < nnodes; i++) kids.push(common.start(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' }));
  await common.sleep(2000);
  const entries = fs.readdirSync('/proc').filter((n) => /^\d+$/.test(n)).length;

  const cases = [['node', 'node'], ['sleep (all matched)', 'sleep'], ['nothing matched', 'none-such']];
  const scanRows = [];
  for (const [name, exe] of cases) {
    const r = spawnSync(scanBin, ['--scans', String(scans), exe], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`bench_procscan: ${r.stderr}`);
    scanRows.push({ case: name, ...JSON.parse(r.stdout) });
  }
  const fx = common.fx;
  console.log(`\n/proc scan, ${entries} processes on the host, ${scans} scans a case (CPU of the scanning thread)`);
  const floor = scanRows[2].cpu.median_us;
  common.printTable(['executables', 'matched', 'CPU median µs', 'mean', 'max', 'wall median µs', 'x nothing matched'],
    scanRows.map((s) => [s.case, s.matched, fx(s.cpu.median_us, 1), fx(s.cpu.mean_us, 1), fx(s.cpu.max_us, 1),
      fx(s.wall.median_us, 1), fx(s.cpu.median_us / floor, 2)]));

  log(`two daemons for ${seconds} s, discovery on and off`);
  const run = [];
  for (const on of [true, false]) {
    const dir = common.tmpdir('procscan');
    const cfg = path.join(dir, 'isoprof.yaml');
    fs.writeFileSync(cfg, [
      `store: {path: ${JSON.stringify(path.join(dir, 'store'))}}`, 'targets: []',
      `discovery: {processes: {enabled: ${on}}}`, 'anomaly: {latency: {listen: ""}}', 'log: {level: warn}', ''].join('\n'));
    const d = common.start(bin.isoprofd, ['--config', cfg], { stdio: ['ignore', 'ignore', 'pipe'] });
    run.push({ on, d, dir });
  }
  await common.sleep(5000); // start-up, the first scans
  const cpu0 = run.map((x) => common.procCpu(x.d.pid));
  const t0 = Date.now();
  await common.sleep(seconds * 1000);
  const cpu1 = run.map((x) => common.procCpu(x.d.pid));
  const wall = (Date.now() - t0) / 1000;
  const daemonRows = run.map((x, i) => {
    const st = spawnSync(bin.isoprof, ['status', '--json', '--socket', path.join(x.dir, 'store', 'control.sock')], { encoding: 'utf8' });
    const disc = st.status === 0 ? JSON.parse(st.stdout).discovery : {};
    return { discovery: x.on, cpu_s: cpu1[i] - cpu0[i], cpu_pct_core: 100 * (cpu1[i] - cpu0[i]) / wall, scans: disc.scans || 0,
      scan_cpu_ms_total: (disc.scan_cpu_us_total || 0) / 1000, processes: disc.processes || 0 };
  });
  for (const x of run) await common.stop(x.d, 'SIGTERM');
  console.log(`\nisoprofd over ${fx(wall, 1)} s, no targets, discovery.interval 5 s (CPU from /proc/PID/stat, 10 ms ticks)`);
  common.printTable(['discovery.processes', 'CPU s', 'CPU % of a core', 'scans', 'scan CPU ms (its own count)', 'processes matched'],
    daemonRows.map((r) => [r.discovery ? 'on' : 'off', fx(r.cpu_s, 2), fx(r.cpu_pct_core, 3), r.scans, fx(r.scan_cpu_ms_total, 1), r.processes]));
  console.log(`difference: ${fx(daemonRows[0].cpu_pct_core - daemonRows[1].cpu_pct_core, 3)} % of a core`);
  for (const k of kids) await common.stop(k, 'SIGKILL', 1000);
  const jf = arg('json');
  if (jf) fs.writeFileSync(jf, JSON.stringify({ entries, scans: scanRows, daemons: daemonRows, seconds: wall }, null, 2));
  return 0;
}

main().then((c) => process.exit(c), (e) => { process.stderr.write(`${e.stack || e}\n`); process.exit(1); });
