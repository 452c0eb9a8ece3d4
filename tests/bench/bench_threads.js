#!/usr/bin/env node
// What a worker thread costs the daemon against a process: isoprofd's CPU
// and RSS with one Node process of N worker threads ("threads-N": N + 1
// isolates behind one inspector session, workers reached through NodeWorker)
// and with N Node processes of one thread each ("node-N": N sessions), each
// isolate running the same light load (workloads/agent-node.js). The two
// alternate within each round so that both see the same machine; the
// threads/processes ratios come with bootstrap 95 % intervals.
//
//   node tests/bench/bench_threads.js [--build DIR] [--threads 16] [--rounds 3]
//        [--seconds 65] [--json out.json]
//
// It measures; it asserts nothing.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const common = require('./common');
const agent = require('./agent');

const HELP = `usage: node tests/bench/bench_threads.js [options]

  --build DIR     the build tree (DIR/agent/isoprofd; default build)
  --threads N     worker threads in the one process, and processes (default 16)
  --rounds N      rounds (default 3); each measures both setups
  --seconds S     measurement per run (default 65: one period and the first window)
  --json FILE     write every run and the summary
`;

const arg = common.arg;

async function main() {
  if (process.argv.includes('-h') || process.argv.includes('--help')) {
    process.stdout.write(HELP);
    return 0;
  }
  const bin = common.binaries(arg('build', null));
  const n = parseInt(arg('threads', '16'), 10);
  const rounds = parseInt(arg('rounds', '3'), 10);
  const seconds = parseInt(arg('seconds', '65'), 10);
  if (!(n >= 1 && n <= 256) || !(rounds >= 1) || !(seconds >= 5)) {
    process.stderr.write(HELP);
    return 2;
  }
  const log = (m) => process.stderr.write(`${m}\n`);
  const setups = [`threads-${n}`, `node-${n}`];
  const runs = [];
  for (let r = 0; r < rounds; r++) {
    for (const spec of r % 2 === 0 ? setups : [...setups].reverse()) {
      log(`round ${r + 1}/${rounds}, ${spec}`);
      runs.push({ round: r, ...await agent.measureConfig({ bin, log }, spec, { seconds, schedule: null, slice: 60 }) });
    }
  }
  const fx = common.fx;
  const med = (spec, f) => common.median(runs.filter((x) => x.config === spec).map(f));
  const range = (spec, f) => { const xs = runs.filter((x) => x.config === spec).map(f); return `[${fx(Math.min(...xs), 3)}, ${fx(Math.max(...xs), 3)}]`; };
  common.printTable(['setup', 'isolates attached', 'CPU % core med [min, max]', 'RSS med MiB', 'VmHWM MiB', 'cpu windows'],
    setups.map((s) => [s, `${med(s, (x) => x.attached)} of ${med(s, (x) => x.isolates)}`,
      `${fx(med(s, (x) => x.cpu_pct_core), 3)} ${range(s, (x) => x.cpu_pct_core)}`,
      fx(med(s, (x) => x.rss_median_mib), 1), fx(med(s, (x) => x.vmhwm_mib), 1), med(s, (x) => x.windows_stored)]));
  const ratio = (f) => {
    const out = [];
    for (let r = 0; r < rounds; r++) {
      const t = runs.find((x) => x.round === r && x.config === setups[0]);
      const p = runs.find((x) => x.round === r && x.config === setups[1]);
      if (t && p && f(p) > 0) out.push(f(t) / f(p));
    }
    return common.summary(out);
  };
  const summary = { cpu: ratio((x) => x.cpu_pct_core), rss: ratio((x) => x.rss_median_mib), vmhwm: ratio((x) => x.vmhwm_mib) };
  process.stdout.write('\n');
  common.printTable(['threads / processes', 'median [95 %]'], [
    ['CPU', common.fmtRatio(summary.cpu)], ['RSS', common.fmtRatio(summary.rss)], ['VmHWM', common.fmtRatio(summary.vmhwm)]]);
  const json = arg('json', null);
  if (json) fs.writeFileSync(json, JSON.stringify({ threads: n, rounds, seconds, summary, runs }, null, 2));
  return 0;
}

main().then((rc) => process.exit(rc), (e) => { process.stderr.write(`${e.stack || e}\n`); process.exit(1); });
