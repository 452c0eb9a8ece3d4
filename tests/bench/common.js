// Shared by the benchmark sections (tests/bench/bench.js runs them): child
// processes stopped by PID, /proc readers, CPU pinning, statistics for
// interleaved A/B runs, the npm reference packages, and table printing.
// Everything started here listens on 127.0.0.1 only.
'use strict';
const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const ROOT = path.resolve(__dirname, '..', '..');
const TICKS = 100; // sysconf(_SC_CLK_TCK) on Linux
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// --- children and temp dirs ---------------------------------------------

const children = new Set();
const tmpdirs = [];

function killAllSync() {
  for (const c of children) {
    try { process.kill(c.pid, 'SIGKILL'); } catch (_) { /* already gone */ }
  }
  children.clear();
  while (tmpdirs.length) fs.rmSync(tmpdirs.pop(), { recursive: true, force: true });
}
process.on('exit', killAllSync);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => { killAllSync(); process.exit(128 + os.constants.signals[sig]); });
}

function tmpdir(tag = 'bench') {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), `isoprof-${tag}-`));
  tmpdirs.push(d);
  return d;
}

// spawn() and remember the child; .exited resolves {code, signal}, .out and
// .err hold what it printed when stdio is 'pipe'. opts.cpu pins it (taskset).
function start(cmd, args, opts = {}) {
  let argv = [cmd, ...args];
  if (opts.cpu !== undefined) argv = ['taskset', '-c', String(opts.cpu), ...argv];
  const c = spawn(argv[0], argv.slice(1), {
    stdio: opts.stdio || ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...(opts.env || {}) },
    cwd: opts.cwd,
  });
  c.out = '';
  c.err = '';
  if (c.stdout) c.stdout.on('data', (d) => { c.out += d; });
  if (c.stderr) c.stderr.on('data', (d) => { c.err += d; if (c.err.length > 1 << 20) c.err = c.err.slice(-(1 << 19)); });
  children.add(c);
  c.exited = new Promise((resolve) => {
    c.on('exit', (code, signal) => { children.delete(c); resolve({ code, signal }); });
    c.on('error', (e) => { children.delete(c); c.spawnError = e; resolve({ code: -1, signal: null, error: e }); });
  });
  return c;
}

// SIGTERM (or signal), SIGKILL after timeoutMs; resolves {code, signal}.
async function stop(c, signal = 'SIGTERM', timeoutMs = 5000) {
  if (!children.has(c)) return c.exited;
  try { process.kill(c.pid, signal); } catch (_) { return c.exited; }
  const t = setTimeout(() => { try { process.kill(c.pid, 'SIGKILL'); } catch (_) { /* gone */ } }, timeoutMs);
  const r = await c.exited;
  clearTimeout(t);
  return r;
}

async function waitFor(pred, timeoutMs, what) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await pred();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(50);
  }
}

// node --inspect=127.0.0.1:0 script; resolves the child with .port (the
// inspector port read from "Debugger listening on ws://...").
async function startNode(script, { args = [], env = {}, cpu, inspect = true } = {}) {
  const a = inspect ? ['--inspect=127.0.0.1:0', ...args, script] : [...args, script];
  const c = start(process.execPath, a, { env, cpu });
  if (!inspect) return c;
  c.port = await waitFor(() => {
    const m = /Debugger listening on ws:\/\/127\.0\.0\.1:(\d+)\//.exec(c.err);
    if (m) return parseInt(m[1], 10);
    if (c.exitCode !== null) throw new Error(`node ${script} exited: ${c.err.slice(-2000)}`);
    return null;
  }, 15000, `node ${script} to print its inspector port`);
  return c;
}

// --- /proc --------------------------------------------------------------

function statFields(file) {
  const s = fs.readFileSync(file, 'utf8');
  return s.slice(s.lastIndexOf(')') + 2).split(' ');
}
// utime + stime of a process (all threads), in seconds.
function procCpu(pid) {
  const f = statFields(`/proc/${pid}/stat`);
  return (parseInt(f[11], 10) + parseInt(f[12], 10)) / TICKS;
}
// {tid: {name, cpu}} for each thread of pid; cpu in seconds.
function threads(pid) {
  const out = {};
  for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
    try {
      const name = fs.readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
      const f = statFields(`/proc/${pid}/task/${tid}/stat`);
      out[tid] = { name, cpu: (parseInt(f[11], 10) + parseInt(f[12], 10)) / TICKS };
    } catch (_) { /* thread ended between readdir and read */ }
  }
  return out;
}
// CPU seconds of the threads of pid whose name matches re (a thread that
// ended took its time with it: sample before it can end).
function threadCpu(pid, re) {
  let s = 0;
  for (const t of Object.values(threads(pid))) if (re.test(t.name)) s += t.cpu;
  return s;
}
// {rss, hwm, anon} in KiB from /proc/pid/status.
function procMem(pid) {
  const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k) => { const m = new RegExp(k + ':\\s+(\\d+)').exec(s); return m ? parseInt(m[1], 10) : 0; };
  return { rss: kb('VmRSS'), hwm: kb('VmHWM'), anon: kb('RssAnon') };
}

// --- statistics ---------------------------------------------------------

function quantile(xs, q) {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const pos = (s.length - 1) * q;
  const lo = Math.floor(pos), hi = Math.ceil(pos);
  return s[lo] + (s[hi] - s[lo]) * (pos - lo);
}
const median = (xs) => quantile(xs, 0.5);
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;

// A seeded PRNG so a bootstrap interval is the same for the same data.
function prng(seed) {
  let x = seed >>> 0 || 1;
  return () => { x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0; return x / 4294967296; };
}
// Percentile bootstrap interval of stat(xs): [lo, hi] at level (0.95).
function bootstrap(xs, stat = median, { iters = 2000, level = 0.95, seed = 12345 } = {}) {
  if (xs.length < 2) return [NaN, NaN];
  const rnd = prng(seed);
  const vals = new Array(iters);
  const buf = new Array(xs.length);
  for (let i = 0; i < iters; i++) {
    for (let j = 0; j < xs.length; j++) buf[j] = xs[Math.floor(rnd() * xs.length)];
    vals[i] = stat(buf);
  }
  return [quantile(vals, (1 - level) / 2), quantile(vals, 1 - (1 - level) / 2)];
}
// The summary every section reports for a list of per-pair ratios (or any
// sample): n, median, min, max and the bootstrap 95 % interval of the median.
function summary(xs) {
  const [lo, hi] = bootstrap(xs);
  return { n: xs.length, median: median(xs), min: Math.min(...xs), max: Math.max(...xs), ci95: [lo, hi] };
}

// --- the npm reference packages ----------------------------------------

// @pyroscope/nodejs and pprof-format, installed by `packaging/setup.sh
// --bench` into the same cache as the test runtimes. Returns the
// node_modules directory, or throws saying how to install them.
function npmModules() {
  const cache = path.join(process.env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache'), 'isoprof', 'npm', 'node_modules');
  for (const m of ['@pyroscope/nodejs', 'pprof-format']) {
    if (!fs.existsSync(path.join(cache, m, 'package.json'))) {
      throw new Error(`${m} is not installed in ${cache}: run packaging/setup.sh --bench`);
    }
  }
  return cache;
}
function npmVersion(name) {
  return JSON.parse(fs.readFileSync(path.join(npmModules(), name, 'package.json'), 'utf8')).version;
}

// --- command line -------------------------------------------------------

// The value after --name on the command line, else def.
function arg(name, def) {
  const i = process.argv.indexOf('--' + name);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : def;
}

// --- binaries -----------------------------------------------------------

function binaries(build) {
  const b = path.resolve(build || path.join(ROOT, 'build'));
  const out = {
    build: b,
    isoprofd: path.join(b, 'agent', 'isoprofd'),
    isoprof: path.join(b, 'agent', 'isoprof'),
    bench: (name) => path.join(b, 'tests', 'bench', name),
  };
  if (!fs.existsSync(out.isoprofd)) throw new Error(`${out.isoprofd} not found: build first (cmake -S . -B build && cmake --build build)`);
  return out;
}

// --- output -------------------------------------------------------------

// Prints rows (arrays of cells) under a header, columns padded.
function printTable(header, rows, out = process.stdout) {
  const all = [header, ...rows].map((r) => r.map((c) => (c === undefined || c === null ? '' : String(c))));
  const w = header.map((_, i) => Math.max(...all.map((r) => (r[i] || '').length)));
  for (const [k, r] of all.entries()) {
    out.write(r.map((c, i) => c.padEnd(w[i])).join('  ').trimEnd() + '\n');
    if (k === 0) out.write(w.map((n) => '-'.repeat(n)).join('  ') + '\n');
  }
}
const fx = (x, d = 3) => (Number.isFinite(x) ? x.toFixed(d) : '-');
// "1.004 [0.998, 1.011]" for a summary() of ratios.
const fmtRatio = (s, d = 3) => `${fx(s.median, d)} [${fx(s.ci95[0], d)}, ${fx(s.ci95[1], d)}]`;

module.exports = {
  ROOT, TICKS, arg, sleep, tmpdir, start, stop, waitFor, startNode, procCpu, threads, threadCpu, procMem,
  quantile, median, mean, prng, bootstrap, summary, npmModules, npmVersion, binaries, printTable, fx, fmtRatio,
};
