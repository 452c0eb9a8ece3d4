#!/usr/bin/env node
// The daemon's own cost with N Node isolates, on its own: the "agent"
// section of bench.js (agent.js) for one configuration.
//
//   node tests/bench/bench_daemon.js --isolates 10 --seconds 180 [--build build]
//        [--duration 10s --period 60s --interval 10ms] [--json out.json]
//
// `node tests/bench/bench.js --only agent` runs every configuration
// (1/10/50 Node isolates, workerd with 10 and 50 workers).
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const common = require('./common');
const agent = require('./agent');

function arg(name, def) {
  const i = process.argv.indexOf('--' + name);
  return i > 0 ? process.argv[i + 1] : def;
}
const sched = [arg('duration'), arg('period'), arg('interval')];
const opts = {
  'agent-configs': `node-${parseInt(arg('isolates', '10'), 10)}`,
  'agent-seconds': arg('seconds', '180'),
  // Any of the three given: the rest default to the embedded schedule.
  'agent-schedule': sched.some(Boolean) ? `${sched[0] || '10s'}/${sched[1] || '60s'}/${sched[2] || '10ms'}` : '',
};
agent.run({
  bin: common.binaries(arg('build', path.join(common.ROOT, 'build'))),
  quick: false,
  opt: (k, def) => (opts[k] === undefined ? def : opts[k]),
  log: (m) => process.stderr.write(`${m}\n`),
}).then((r) => {
  const json = arg('json', null);
  if (json) fs.writeFileSync(json, JSON.stringify(r.data, null, 2));
  process.exit(0);
}, (e) => { process.stderr.write(`${e.stack || e}\n`); process.exit(1); });
