#!/usr/bin/env node
// Two builds of isoprofd side by side: the "agent" section's measurement
// (CPU and RSS of the daemon with N Node isolates) for build A and build B,
// interleaved round by round so that both see the same machine, then the
// B/A ratios with their bootstrap 95 % intervals. For a change that must
// not cost the daemon anything: build the commit before it as A.
//
//   node tests/bench/bench_agent_ab.js --a DIR --b DIR [--configs node-1,node-10,node-50]
//        [--rounds 3] [--seconds 65] [--json out.json]
//
// DIR is a build tree (DIR/agent/isoprofd). Each round measures every
// config once per build, the order of A and B alternating between rounds.
// It measures; it asserts nothing.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const common = require('./common');
const agent = require('./agent');

const HELP = `usage: node tests/bench/bench_agent_ab.js --a DIR --b DIR [options]

  --a DIR, --b DIR   the two build trees (DIR/agent/isoprofd, DIR/agent/isoprof)
  --configs LIST     node-N or workerd-N, comma-separated (default node-1,node-10,node-50)
  --rounds N         rounds (default 3); each measures every config on both builds
  --seconds S        measurement per run (default 65: one period and the first window)
  --json FILE        write every run and the summary
`;

const arg = common.arg;

async function main() {
  if (process.argv.includes('-h') || process.argv.includes('--help')) {
    process.stdout.write(HELP);
    return 0;
  }
  const dirs = { A: arg('a'), B: arg('b') };
  if (!dirs.A || !dirs.B) {
    process.stderr.write(HELP);
    return 2;
  }
  const bins = {};
  for (const k of ['A', 'B']) {
    bins[k] = common.binaries(path.resolve(dirs[k]));
    if (!fs.existsSync(bins[k].isoprofd)) throw new Error(`${bins[k].isoprofd} not found: build ${dirs[k]} first`);
  }
  const configs = arg('configs', 'node-1,node-10,node-50').split(',').map((s) => s.trim()).filter(Boolean);
  const rounds = parseInt(arg('rounds', '3'), 10);
  const seconds = parseInt(arg('seconds', '65'), 10);
  const log = (m) => process.stderr.write(`${m}\n`);
  const runs = [];
  for (let r = 0; r < rounds; r++) {
    for (const spec of configs) {
      const order = r % 2 === 0 ? ['A', 'B'] : ['B', 'A'];
      for (const k of order) {
        log(`round ${r + 1}/${rounds}, ${spec}, build ${k}`);
        const res = await agent.measureConfig({ bin: bins[k], log }, spec, { seconds, schedule: null, slice: 60 });
        runs.push({ round: r, build: k, ...res });
      }
    }
  }
  const fx = common.fx;
  const rows = [];
  const summary = {};
  for (const spec of configs) {
    const pick = (k, f) => runs.filter((x) => x.build === k && x.config === spec).map(f);
    const ratio = (f) => {
      const out = [];
      for (let r = 0; r < rounds; r++) {
        const a = runs.find((x) => x.round === r && x.build === 'A' && x.config === spec);
        const b = runs.find((x) => x.round === r && x.build === 'B' && x.config === spec);
        if (a && b && f(a) > 0) out.push(f(b) / f(a));
      }
      return common.summary(out);
    };
    const cpu = ratio((x) => x.cpu_pct_core), rss = ratio((x) => x.rss_median_mib), hwm = ratio((x) => x.vmhwm_mib);
    summary[spec] = { cpu_ratio: cpu, rss_ratio: rss, vmhwm_ratio: hwm };
    const med = (xs) => common.median(xs);
    rows.push([spec,
      `${fx(med(pick('A', (x) => x.cpu_pct_core)), 3)} / ${fx(med(pick('B', (x) => x.cpu_pct_core)), 3)}`,
      `${fx(cpu.median, 3)} [${fx(cpu.ci95[0], 3)}, ${fx(cpu.ci95[1], 3)}]`,
      `${fx(med(pick('A', (x) => x.rss_median_mib)), 1)} / ${fx(med(pick('B', (x) => x.rss_median_mib)), 1)}`,
      `${fx(rss.median, 3)} [${fx(rss.ci95[0], 3)}, ${fx(rss.ci95[1], 3)}]`,
      `${fx(med(pick('A', (x) => x.vmhwm_mib)), 1)} / ${fx(med(pick('B', (x) => x.vmhwm_mib)), 1)}`,
      `${med(pick('A', (x) => x.windows_stored))} / ${med(pick('B', (x) => x.windows_stored))}`]);
  }
  common.printTable(['config', 'CPU % core A / B', 'CPU B/A [95 %]', 'RSS med MiB A / B', 'RSS B/A [95 %]', 'VmHWM MiB A / B', 'cpu windows A / B'], rows);
  const json = arg('json', null);
  if (json) fs.writeFileSync(json, JSON.stringify({ a: dirs.A, b: dirs.B, rounds, seconds, summary, runs }, null, 2));
  return 0;
}

main().then((rc) => process.exit(rc), (e) => { process.stderr.write(`${e.stack || e}\n`); process.exit(1); });
