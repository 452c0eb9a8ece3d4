#!/usr/bin/env node
// isoprof's benchmark harness: one command measures the profiler's cost on
// this machine, prints one table and writes every figure as JSON.
//
//   node tests/bench/bench.js [--only SECTION,...] [--quick] [--json FILE]
//                             [--build DIR] [--no-setup] [--no-build]
//                             [--SECTION-OPTION VALUE ...]
//
// It measures; it asserts nothing, and it is not part of the test suite.
// Run it on a machine doing nothing else: the sections compare variants
// interleaved in the same run, but a busy neighbour still widens every
// interval. See ../shared/BENCHMARKING.md for the method.
'use strict';
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const common = require('./common');

// In the order they run; each is tests/bench/<name>.js.
const SECTIONS = [
  ['overhead', 'target throughput and latency: none / isoprofd default / always on / @pyroscope/nodejs'],
  ['pauses', 'event-loop stalls of Profiler.start/stop and heap windows, small app and ~20k functions; the pause budget against the fixed schedule'],
  ['agent', 'isoprofd CPU and RSS with 1/10/50 Node isolates and workerd workers'],
  ['convert', 'CDP JSON -> stored window MB/s and peak RSS, against pprof-format (npm)'],
  ['storage', 'inserts/s, range and anomaly queries at 1M windows, stored bytes against gzip'],
];

const HELP = `usage: node tests/bench/bench.js [options]

Runs isoprof's benchmarks (all sections, or those named) and prints a
summary table: each figure, the goal it is held to and whether it is met.
Every measured value goes to the JSON file.

  --only LIST     comma-separated sections to run (default: all)
  --quick         a smoke run (minutes, not tens of minutes): proves the
                  harness works; its figures are not meaningful
  --json FILE     where to write the results (default: bench-results.json)
  --build DIR     the build tree to measure (default: build)
  --no-setup      do not run packaging/setup.sh --bench first (it installs
                  wrk, valgrind, the runtimes and the npm reference packages
                  when missing, and does nothing otherwise)
  --no-build      do not (re)build DIR first
  --list          list the sections and exit
  -h, --help      this text

Sections take options of their own (e.g. --overhead-pairs 20 --overhead-seconds 5 for
overhead); each section's file in tests/bench/ lists them at its top.

Sections:
${SECTIONS.map(([n, d]) => `  ${n.padEnd(10)} ${d}`).join('\n')}
`;

const argv = process.argv.slice(2);
const flags = new Set(['--quick', '--no-setup', '--no-build', '--list', '-h', '--help']);
const opts = {};
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  if (flags.has(a)) { opts[a.replace(/^-+/, '')] = true; continue; }
  if (!a.startsWith('--') || i + 1 >= argv.length || argv[i + 1].startsWith('--')) {
    process.stderr.write(`bench.js: bad argument '${a}' (options take a value; try --help)\n`);
    process.exit(2);
  }
  opts[a.slice(2)] = argv[++i];
}
if (opts.h || opts.help) { process.stdout.write(HELP); process.exit(0); }
if (opts.list) { for (const [n, d] of SECTIONS) process.stdout.write(`${n.padEnd(10)} ${d}\n`); process.exit(0); }

const names = SECTIONS.map(([n]) => n);
const only = opts.only ? opts.only.split(',').map((s) => s.trim()).filter(Boolean) : names;
for (const n of only) {
  if (!names.includes(n)) {
    process.stderr.write(`bench.js: unknown section '${n}' (sections: ${names.join(', ')})\n`);
    process.exit(2);
  }
}
const quick = !!opts.quick;
const buildDir = path.resolve(opts.build || path.join(common.ROOT, 'build'));
const jsonOut = path.resolve(opts.json || 'bench-results.json');

function log(msg) { process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}\n`); }

function step(what, cmd, args) {
  log(what);
  const r = spawnSync(cmd, args, { stdio: ['ignore', 'inherit', 'inherit'], cwd: common.ROOT });
  if (r.status !== 0) {
    process.stderr.write(`bench.js: ${what} failed (${r.error ? r.error.message : `exit ${r.status}`})\n`);
    process.exit(1);
  }
}

function readOr(file, def = '') { try { return fs.readFileSync(file, 'utf8'); } catch (_) { return def; } }

// What the figures were measured on, so a table can be read later.
function machine() {
  const cpuinfo = readOr('/proc/cpuinfo');
  const model = (/model name\s*:\s*(.*)/.exec(cpuinfo) || [])[1] || os.cpus()[0]?.model || 'unknown';
  const git = spawnSync('git', ['-C', common.ROOT, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' });
  const dirty = spawnSync('git', ['-C', common.ROOT, 'status', '--porcelain', '--untracked-files=no'], { encoding: 'utf8' });
  const perf = spawnSync('perf', ['stat', '-x,', '-e', 'instructions', 'true'], { encoding: 'utf8' });
  return {
    cpu_model: model.trim(),
    cpus: os.cpus().length,
    memory_gib: +(os.totalmem() / 2 ** 30).toFixed(1),
    kernel: os.release(),
    node: process.version,
    os: (/PRETTY_NAME="([^"]*)"/.exec(readOr('/etc/os-release')) || [])[1] || os.type(),
    hardware_counters: perf.status === 0 && !/not supported|<not/.test(perf.stderr || ''),
    commit: git.status === 0 ? git.stdout.trim() + (dirty.stdout.trim() ? '+changes' : '') : null,
    loadavg_start: os.loadavg().map((x) => +x.toFixed(2)),
  };
}

(async () => {
  if (!opts['no-setup']) step('packaging/setup.sh --bench (installs only what is missing)', path.join(common.ROOT, 'packaging', 'setup.sh'), ['--quiet', '--bench']);
  if (!opts['no-build']) {
    step(`building ${buildDir}`, 'cmake', ['-S', common.ROOT, '-B', buildDir, '-DCMAKE_BUILD_TYPE=RelWithDebInfo']);
    step(`building ${buildDir}`, 'cmake', ['--build', buildDir, '-j', String(os.cpus().length)]);
  }
  const bin = common.binaries(buildDir);
  const m = machine();
  if (m.loadavg_start[0] > 0.5) log(`warning: load average ${m.loadavg_start[0]} before the run: something else is using the CPU, so the intervals will be wider`);
  const result = { started: new Date().toISOString(), quick, args: argv, machine: m, sections: {} };
  const summary = [];
  let failed = 0;
  for (const name of only) {
    const mod = require(path.join(__dirname, `${name}.js`));
    const ctx = {
      bin,
      quick,
      opt: (k, def) => (opts[k] === undefined ? def : opts[k]),
      log: (msg) => log(`${name}: ${msg}`),
    };
    log(`${name}: ${mod.title || ''}${quick ? ' (quick)' : ''}`);
    process.stdout.write(`\n== ${name}: ${mod.title || ''}\n`);
    const t0 = Date.now();
    const sec = { title: mod.title || name };
    try {
      const r = await mod.run(ctx);
      sec.rows = r.rows || [];
      sec.data = r.data || {};
      for (const row of sec.rows) summary.push([name, ...row]);
    } catch (e) {
      failed++;
      sec.error = e && e.stack ? e.stack : String(e);
      summary.push([name, 'section failed', String(e && e.message ? e.message : e).split('\n')[0], '', '']);
      process.stderr.write(`bench.js: section ${name} failed: ${sec.error}\n`);
    }
    sec.seconds = +((Date.now() - t0) / 1000).toFixed(1);
    result.sections[name] = sec;
    fs.writeFileSync(jsonOut, JSON.stringify(result, null, 2) + '\n'); // a later failure keeps what was measured
  }
  result.finished = new Date().toISOString();
  result.machine.loadavg_end = os.loadavg().map((x) => +x.toFixed(2));
  fs.writeFileSync(jsonOut, JSON.stringify(result, null, 2) + '\n');

  process.stdout.write(`\n== summary (${m.cpus} CPUs, ${m.cpu_model}, ${m.memory_gib} GiB, Node ${m.node}, commit ${m.commit || '?'})${quick ? ' -- QUICK RUN, figures not meaningful' : ''}\n`);
  common.printTable(['section', 'what', 'figure', 'goal', 'verdict'], summary);
  process.stdout.write(`\nresults: ${jsonOut}\n`);
  process.exit(failed ? 1 : 0);
})().catch((e) => { process.stderr.write(`bench.js: ${e.stack || e}\n`); process.exit(1); });
