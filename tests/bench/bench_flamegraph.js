#!/usr/bin/env node
// The flame graph page at 10, 100 and 1,000 windows: how long `isoprof
// flamegraph` takes to write it (wall, user + sys CPU, peak RSS), how big
// the file is, and how long headless Chromium takes to render it; with
// `isoprof top` and `isoprof export` over the same store, in the same run,
// for comparison.
//
//   node --experimental-websocket tests/bench/bench_flamegraph.js [--build DIR]
//        [--rounds 3] [--sizes 10,100,1000] [--seed 1] [--json FILE]
//
// Each size gets one store, made once by flame_fill (a synthetic service:
// ~1,000 samples a window from a fixed program of 2,000 functions, a few
// hundred distinct stacks a window, tens of thousands over 1,000 windows).
// A round then runs, for every size in turn (so drift on the machine
// touches all sizes alike): flamegraph -o a fresh file, a fresh tab that
// loads it (the page's own window.isoprof.renderMs, and the wall time from
// navigate() to window.isoprof.ready, which adds the HTML parse and the
// load), then top, then export. Reported: median and [min, max] over the
// rounds. CPU and peak RSS come from /usr/bin/time when it is there.
// One Chromium serves the whole run (a new tab per load, default headless
// viewport). It measures; it asserts nothing. Every child is bounded in
// time and stopped by its PID (its process group); temp dirs are removed
// on exit.
'use strict';
const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const common = require('./common');

const HELP = `usage: node --experimental-websocket tests/bench/bench_flamegraph.js [options]

  --build DIR    the build tree (DIR/agent/isoprof, DIR/tests/bench/flame_fill); default build
  --rounds R     rounds (default 3)
  --sizes LIST   windows per store, comma-separated (default 10,100,1000)
  --seed S       flame_fill's seed (default 1)
  --json FILE    write the machine, every round and the summary
`;

const arg = common.arg;

const CHILD_TIMEOUT_MS = 10 * 60 * 1000; // one CLI run or one flame_fill
const LOAD_TIMEOUT_MS = 120 * 1000;      // one page load
const READY_TIMEOUT_MS = 60 * 1000;      // from load to window.isoprof.ready
const TIME_BIN = '/usr/bin/time';

// Process groups still running: killed on exit (common.js removes its
// temp dirs in its own exit handler).
const groups = new Set();
process.on('exit', () => {
  for (const pid of groups) {
    try { process.kill(-pid, 'SIGKILL'); } catch (_) { /* gone */ }
  }
});

// Runs cmd args in its own process group, stdout to outFile (or nowhere),
// bounded by CHILD_TIMEOUT_MS. Resolves {wall_s, user_s, sys_s, cpu_s,
// maxrss_mib} (the last three null without /usr/bin/time); throws with
// the tail of stderr if it fails.
function run(cmd, args, { outFile, tmp } = {}) {
  const timeFile = fs.existsSync(TIME_BIN) ? path.join(tmp, `time-${process.hrtime.bigint()}`) : null;
  const argv = timeFile ? [TIME_BIN, '-f', '%U %S %M', '-o', timeFile, cmd, ...args] : [cmd, ...args];
  const out = outFile ? fs.openSync(outFile, 'w') : 'ignore';
  return new Promise((resolve, reject) => {
    const t0 = process.hrtime.bigint();
    const c = spawn(argv[0], argv.slice(1), { stdio: ['ignore', out, 'pipe'], detached: true });
    if (outFile) fs.closeSync(out);
    groups.add(c.pid);
    let err = '';
    c.stderr.on('data', (d) => { err = (err + d).slice(-8192); });
    const timer = setTimeout(() => {
      try { process.kill(-c.pid, 'SIGKILL'); } catch (_) { /* gone */ }
    }, CHILD_TIMEOUT_MS);
    c.on('error', (e) => { clearTimeout(timer); groups.delete(c.pid); reject(e); });
    c.on('exit', (code, signal) => {
      const wall = Number(process.hrtime.bigint() - t0) / 1e9;
      clearTimeout(timer);
      groups.delete(c.pid);
      const r = { wall_s: wall, user_s: null, sys_s: null, cpu_s: null, maxrss_mib: null, stderr: err };
      if (timeFile) {
        // /usr/bin/time writes "Command exited with non-zero status N" first
        // when it fails; the numbers are the last line.
        const lines = (fs.existsSync(timeFile) ? fs.readFileSync(timeFile, 'utf8') : '').trim().split('\n');
        fs.rmSync(timeFile, { force: true });
        const m = /^([\d.]+) ([\d.]+) (\d+)$/.exec(lines[lines.length - 1] || '');
        if (m) {
          r.user_s = parseFloat(m[1]);
          r.sys_s = parseFloat(m[2]);
          r.cpu_s = r.user_s + r.sys_s;
          r.maxrss_mib = parseInt(m[3], 10) / 1024;
        }
      }
      if (code !== 0) {
        reject(new Error(`${cmd} ${args.join(' ')}: ${signal ? `killed by ${signal}` : `exit ${code}`}${
          wall * 1000 >= CHILD_TIMEOUT_MS ? ' (timed out)' : ''}\n${err.trim()}`));
      } else {
        resolve(r);
      }
    });
  });
}

// flame_fill's key=value line as an object (numbers where they parse).
function parseKv(text) {
  const o = {};
  for (const kv of text.trim().split(/\s+/)) {
    const i = kv.indexOf('=');
    if (i > 0) o[kv.slice(0, i)] = Number.isFinite(Number(kv.slice(i + 1))) ? Number(kv.slice(i + 1)) : kv.slice(i + 1);
  }
  return o;
}

// One load of file in a fresh tab of browser.
async function renderOnce(browser, file) {
  const page = await browser.open('about:blank');
  try {
    const t0 = performance.now();
    await page.navigate('file://' + file, LOAD_TIMEOUT_MS);
    const tLoad = performance.now();
    await page.waitFor('window.isoprof && window.isoprof.ready', READY_TIMEOUT_MS);
    const tReady = performance.now();
    const info = await page.evaluate(`(() => {
      const e = document.getElementById('isoprof-data');
      const d = e ? JSON.parse(e.textContent) : null;
      return {
        render_ms: window.isoprof.renderMs,
        page_error: window.isoprof.error || null,
        frames: document.querySelectorAll('.frame').length,
        folded_nodes: d && d.folded ? d.folded.nodes : null,
        page_nodes: d && Array.isArray(d.nodes) ? d.nodes.length / (d.kind === 'diff' ? 6 : 4) : null,
        dom_elements: document.getElementsByTagName('*').length,
        js_heap_mib: performance.memory ? performance.memory.usedJSHeapSize / 1048576 : null,
        viewport: innerWidth + 'x' + innerHeight,
      };
    })()`, READY_TIMEOUT_MS);
    const url = 'file://' + file;
    return {
      ...info,
      load_ms: tLoad - t0,
      ready_ms: tReady - t0,
      errors: page.errors.slice(),
      other_requests: page.requests.filter((u) => u !== url && u !== 'about:blank'),
    };
  } finally {
    await page.close();
  }
}

// "median [min, max]" of the values f picks from rows (nulls left out).
function cell(rows, f, d) {
  const xs = rows.map(f).filter((x) => typeof x === 'number' && Number.isFinite(x));
  if (!xs.length) return '-';
  const fx = (x) => x.toFixed(d);
  const lo = Math.min(...xs), hi = Math.max(...xs);
  return lo === hi ? fx(lo) : `${fx(common.median(xs))} [${fx(lo)}, ${fx(hi)}]`;
}
function stats(rows, f) {
  const xs = rows.map(f).filter((x) => typeof x === 'number' && Number.isFinite(x));
  return xs.length ? { n: xs.length, median: common.median(xs), min: Math.min(...xs), max: Math.max(...xs) } : null;
}

function machine() {
  const m = {
    nproc: os.availableParallelism ? os.availableParallelism() : os.cpus().length,
    cpu: (os.cpus()[0] || {}).model || '',
    mem_gib: os.totalmem() / 2 ** 30,
    kernel: os.release(),
    node: process.version,
    loadavg_start: os.loadavg(),
  };
  const cv = spawnSync(process.env.ISOPROF_CHROMIUM || '/usr/bin/chromium', ['--version'], { encoding: 'utf8', timeout: 20000 });
  m.chromium = cv.status === 0 ? cv.stdout.trim() : null;
  const git = spawnSync('git', ['-C', common.ROOT, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8', timeout: 10000 });
  m.commit = git.status === 0 ? git.stdout.trim() : null;
  return m;
}

async function main() {
  if (process.argv.includes('-h') || process.argv.includes('--help')) {
    process.stdout.write(HELP);
    return 0;
  }
  const build = path.resolve(arg('build', path.join(common.ROOT, 'build')));
  const rounds = parseInt(arg('rounds', '3'), 10);
  const sizes = arg('sizes', '10,100,1000').split(',').map((s) => parseInt(s, 10));
  const seed = arg('seed', '1');
  const jsonOut = arg('json', null);
  if (!(rounds >= 1) || sizes.some((n) => !(n >= 1))) {
    process.stderr.write(HELP);
    return 2;
  }
  const ISOPROF = path.join(build, 'agent', 'isoprof');
  const FILL = path.join(build, 'tests', 'bench', 'flame_fill');
  for (const f of [ISOPROF, FILL]) {
    if (!fs.existsSync(f)) throw new Error(`${f} not found: build first (cmake -S . -B ${build} && cmake --build ${build})`);
  }
  const log = (m) => process.stderr.write(`${m}\n`);
  const mach = machine();
  const tmp = common.tmpdir('flamegraph');

  // The stores, once per size.
  const stores = {};
  for (const n of sizes) {
    const dir = path.join(tmp, `store-${n}`);
    const outFile = path.join(tmp, `fill-${n}.txt`);
    log(`flame_fill ${n} windows`);
    const r = await run(FILL, [dir, String(n), seed], { outFile, tmp });
    stores[n] = { dir, fill: { ...parseKv(fs.readFileSync(outFile, 'utf8')), wall_s: r.wall_s, maxrss_mib: r.maxrss_mib } };
  }

  // One browser for the run; without one the CLI figures are still taken.
  let browser = null;
  let browserError = null;
  try {
    const C = require('../integration/chromium');
    browser = await C.launch({ timeoutMs: 60000 });
  } catch (e) {
    browserError = e.message;
    log(`no render times: ${e.message}`);
  }

  const runs = [];
  try {
    for (let r = 0; r < rounds; r++) {
      for (const n of sizes) {
        log(`round ${r + 1}/${rounds}, ${n} windows`);
        const dir = stores[n].dir;
        const html = path.join(tmp, `fg-${n}-${r}.html`);
        const fg = await run(ISOPROF, ['flamegraph', '--store', dir, '-o', html], { tmp });
        const row = { round: r, windows: n, flamegraph: fg, html_bytes: fs.statSync(html).size };
        if (browser) {
          try {
            row.render = await renderOnce(browser, html);
            for (const e of row.render.errors) log(`  page error: ${e}`);
            for (const u of row.render.other_requests) log(`  page requested: ${u}`);
          } catch (e) {
            row.render = { failed: e.message };
            log(`  render failed: ${e.message}`);
          }
        }
        row.top = await run(ISOPROF, ['top', '--store', dir], { outFile: path.join(tmp, 'top.txt'), tmp });
        const pb = path.join(tmp, `export-${n}.pb.gz`);
        row.export = await run(ISOPROF, ['export', '--store', dir, '-o', pb], { tmp });
        row.export_bytes = fs.statSync(pb).size;
        fs.rmSync(html, { force: true });
        fs.rmSync(pb, { force: true });
        for (const k of ['flamegraph', 'top', 'export']) delete row[k].stderr;
        runs.push(row);
      }
    }
  } finally {
    if (browser) await browser.close();
  }
  mach.loadavg_end = os.loadavg();

  // --- report -------------------------------------------------------------
  const la = (a) => a.map((x) => x.toFixed(2)).join(' ');
  process.stdout.write(`\nmachine: ${mach.nproc} CPUs (${mach.cpu}), ${mach.mem_gib.toFixed(1)} GiB, Linux ${mach.kernel}, ` +
    `node ${mach.node}, ${mach.chromium || 'no chromium'}; load average ${la(mach.loadavg_start)} at start, ` +
    `${la(mach.loadavg_end)} at end; commit ${mach.commit || '?'}; ${rounds} rounds, median [min, max]\n`);
  if (browserError) process.stdout.write(`render not measured: ${browserError}\n`);

  process.stdout.write('\nstores (flame_fill, once per size)\n');
  common.printTable(['windows', 'samples', 'distinct stacks', 'stacks/window', 'functions', 'pprof MB', 'store MB', 'fill s'],
    sizes.map((n) => {
      const f = stores[n].fill;
      return [n, f.samples, f.distinct_stacks, f.stacks_per_window, f.functions,
        (f.pprof_bytes / 1e6).toFixed(1), (f.store_bytes / 1e6).toFixed(1), f.wall_s.toFixed(2)];
    }));

  const by = (n) => runs.filter((x) => x.windows === n);
  const rendered = (n) => by(n).filter((x) => x.render && !x.render.failed);
  process.stdout.write('\nisoprof flamegraph (write) and the page in headless Chromium\n');
  common.printTable(['windows', 'write s', 'CPU s', 'RSS MiB', 'HTML MB', 'render ms (page)', 'navigate→ready ms', 'frames drawn', 'page nodes', 'folded nodes', 'errors'],
    sizes.map((n) => [n,
      cell(by(n), (x) => x.flamegraph.wall_s, 2),
      cell(by(n), (x) => x.flamegraph.cpu_s, 2),
      cell(by(n), (x) => x.flamegraph.maxrss_mib, 0),
      cell(by(n), (x) => x.html_bytes / 1e6, 2),
      cell(rendered(n), (x) => x.render.render_ms, 0),
      cell(rendered(n), (x) => x.render.ready_ms, 0),
      cell(rendered(n), (x) => x.render.frames, 0),
      cell(rendered(n), (x) => x.render.page_nodes, 0),
      cell(rendered(n), (x) => x.render.folded_nodes, 0),
      browser ? by(n).reduce((a, x) => a + (x.render ? (x.render.failed ? 1 : x.render.errors.length + x.render.other_requests.length) : 0), 0) : '-']));

  process.stdout.write('\nthe other readers over the same stores\n');
  common.printTable(['windows', 'top s', 'top CPU s', 'top RSS MiB', 'export s', 'export CPU s', 'export RSS MiB', 'export MB'],
    sizes.map((n) => [n,
      cell(by(n), (x) => x.top.wall_s, 2),
      cell(by(n), (x) => x.top.cpu_s, 2),
      cell(by(n), (x) => x.top.maxrss_mib, 0),
      cell(by(n), (x) => x.export.wall_s, 2),
      cell(by(n), (x) => x.export.cpu_s, 2),
      cell(by(n), (x) => x.export.maxrss_mib, 0),
      cell(by(n), (x) => x.export_bytes / 1e6, 2)]));
  const vp = runs.find((x) => x.render && x.render.viewport);
  if (vp) process.stdout.write(`\nviewport ${vp.render.viewport}; frames drawn: .frame elements after the first render\n`);

  if (jsonOut) {
    const summary = {};
    for (const n of sizes) {
      summary[n] = {
        fill: stores[n].fill,
        flamegraph_wall_s: stats(by(n), (x) => x.flamegraph.wall_s),
        flamegraph_cpu_s: stats(by(n), (x) => x.flamegraph.cpu_s),
        flamegraph_maxrss_mib: stats(by(n), (x) => x.flamegraph.maxrss_mib),
        html_bytes: stats(by(n), (x) => x.html_bytes),
        render_ms: stats(rendered(n), (x) => x.render.render_ms),
        ready_ms: stats(rendered(n), (x) => x.render.ready_ms),
        frames: stats(rendered(n), (x) => x.render.frames),
        folded_nodes: stats(rendered(n), (x) => x.render.folded_nodes),
        top_wall_s: stats(by(n), (x) => x.top.wall_s),
        export_wall_s: stats(by(n), (x) => x.export.wall_s),
        export_bytes: stats(by(n), (x) => x.export_bytes),
      };
    }
    fs.writeFileSync(jsonOut, JSON.stringify({ machine: mach, build, rounds, sizes, seed, browser_error: browserError, summary, runs }, null, 2) + '\n');
  }
  return 0;
}

main().then((rc) => process.exit(rc), (e) => { process.stderr.write(`${e.stack || e}\n`); process.exit(1); });
