#!/usr/bin/env node
// The daemon's peak memory under hostile inspector endpoints, against the
// budget its input caps add up to (agent/daemon/budget.h: AGENT_MEMORY_BUDGET,
// 192 MiB; the unit's MemoryMax is 256 MiB). Each scenario runs a fresh
// isoprofd against fake inspectors (tests/integration/fake-inspector.js)
// that send what the caps allow, and more, for a bounded time, and reads
// the daemon's VmHWM (its peak resident set) at the end:
//
//   idle        one well-behaved target: the floor
//   partial     16 sessions each holding a 40 MiB message half sent: only
//               the message budget (64 MiB) is ever held, the rest dropped
//   convert     replies at the caps: 48 MiB of CPU profile with just under
//               the node cap (262,144 nodes, each a distinct function), on
//               4 sessions at once, so the writer's queue and its one
//               conversion are full
//   heap        heap profiles with 1,048,576 samples (the kept-samples cap)
//   everything  all of the above at once, plus a /json/list of 10,000
//               targets and nested bodies
//   snapshot    a heap snapshot near the limit, of 2,100,000 nodes (198 MB:
//               about the most the retained conversion's 96 MiB takes),
//               then one of 3,200,000 (310 MB, refused by its node
//               count); synthetic, from bench_heapsnap --generate; the
//               scenario lasts until both retained conversions ended
//               (not in the default list: it takes minutes)
//
// Prints one row per scenario (VmHWM in MiB, its share of the budget,
// windows stored, sessions dropped) and writes JSON with --json FILE.
// Plain builds only: an ASan build's RSS is the sanitizer's.
//
//   node tests/bench/bench_hostile.js [--build build] [--seconds 40] [--only a,b] [--json FILE]
//
// It measures; it asserts nothing.
'use strict';
const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const F = require('../integration/fake-inspector');

const BUDGET_MIB = 192;
let BUILD = null; // the build directory (--build)
const MiB = 1 << 20;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const arg = (name, def) => {
  const i = process.argv.indexOf('--' + name);
  return i > 0 ? process.argv[i + 1] : def;
};
if (process.argv.includes('--help')) {
  console.log(fs.readFileSync(__filename, 'utf8').split('\n').slice(1, 33).map((l) => l.replace(/^\/\/ ?/, '')).join('\n'));
  process.exit(0);
}

function status(pid, key) {
  const m = new RegExp(`${key}:\\s+(\\d+)`).exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : 0;
}

const monoUs = () => Math.floor(Number(process.hrtime.bigint() / 1000n));

// A star CPU profile: a root and n-1 leaves, each a distinct function
// whose name is padded so that the whole text is about `bytes`.
function starProfileText(n, bytes) {
  const build = (pad) => {
    const parts = [`{"nodes":[{"id":1,"callFrame":{"functionName":"(root)","url":"","lineNumber":-1,"columnNumber":-1},"hitCount":0,"children":[`];
    for (let i = 2; i <= n; i++) parts.push(i > 2 ? `,${i}` : `${i}`);
    parts.push(']}');
    const x = 'x'.repeat(pad);
    for (let i = 2; i <= n; i++) parts.push(`,{"id":${i},"callFrame":{"functionName":"f${i}_${x}","url":"file:///srv/a${i % 64}.js","lineNumber":${i},"columnNumber":1},"hitCount":1,"children":[]}`);
    parts.push(`],"startTime":${monoUs() - 1000000},"endTime":${monoUs()},"samples":[],"timeDeltas":[]}`);
    return parts.join('');
  };
  const base = build(0).length;
  return build(Math.max(0, Math.floor((bytes - base) / (n - 1))));
}

function heapText(samples) {
  const parts = ['{"head":{"callFrame":{"functionName":"(root)","url":"","lineNumber":-1,"columnNumber":-1},"selfSize":0,"id":1,"children":[',
    '{"callFrame":{"functionName":"alloc","url":"/srv/a.js","lineNumber":1,"columnNumber":1},"selfSize":64,"id":2,"children":[]}]},"samples":['];
  for (let i = 0; i < samples; i++) parts.push(`${i ? ',' : ''}{"size":64,"nodeId":2,"ordinal":${i}}`);
  parts.push(']}');
  return parts.join('');
}

async function scenario(name, isoprofd, seconds, fakesOf) {
  const fakes = await fakesOf();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'isoprof-hostile-'));
  // A fake may add to its target (memory_limit) and ask for snapshots, and
  // say when the scenario is over (until: a log pattern and its count).
  const targets = fakes.map((f, i) => `  - {inspector: "127.0.0.1:${f.port}", worker: "w${i}"${f.targetExtra || ''}}`);
  const snapshots = fakes.some((f) => f.snapshot);
  fs.writeFileSync(path.join(dir, 'cfg.yaml'), [
    `store: {path: "${dir}/store"}`, 'targets:', ...targets, 'discovery: {interval: 1s}',
    'sampling: {cpu: {duration: 1s, period: 2s, interval: 1ms, jitter: 10%, max_concurrent: 8}, heap: {period: 2s}, budget: {pause_share: 100%}}',
    snapshots ? 'anomaly: {memory: {snapshot: true, heap_period: 600s}, latency: {listen: ""}}' : 'anomaly: {latency: {listen: ""}}',
    'log: {level: info}',
  ].join('\n') + '\n');
  const until = fakes.find((f) => f.until) ? fakes.find((f) => f.until).until : null;
  const d = spawn(isoprofd, ['--config', path.join(dir, 'cfg.yaml')], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  d.stderr.on('data', (c) => { log += c; if (log.length > 8 << 20) log = log.slice(-(2 << 20)); });
  const exited = new Promise((r) => d.on('exit', (code, sig) => r({ code, sig })));
  try {
    if (/libasan|libclang_rt\.asan/.test(fs.readFileSync(`/proc/${d.pid}/maps`, 'utf8'))) throw new Error('an ASan build: its RSS is the sanitizer\'s; use a plain build');
    const t0 = Date.now();
    const over = () => (until ? (log.match(until.re) || []).length >= until.count || Date.now() - t0 > 1200000
      : Date.now() - t0 >= seconds * 1000);
    while (!over() && d.exitCode === null) await sleep(250);
    if (d.exitCode !== null) throw new Error(`isoprofd exited (${d.exitCode}): ${log.slice(-2000)}`);
    const hwm = status(d.pid, 'VmHWM');
    const count = (re) => (log.match(re) || []).length;
    d.kill('SIGINT');
    const r = await exited;
    return { scenario: name, vmhwm_mib: +(hwm / 1024).toFixed(1), budget_share: +(hwm / 1024 / BUDGET_MIB).toFixed(3),
      windows_stored: count(/msg="window stored"/g), sessions_dropped: count(/msg="session dropped"/g),
      conversions_failed: count(/msg="conversion failed"/g), exit: r.code };
  } finally {
    if (d.exitCode === null) d.kill('SIGKILL');
    await Promise.all(fakes.map((f) => f.close()));
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const SCENARIOS = {
  idle: async () => [await F.startFakeInspector({})],
  partial: async () => {
    const fakes = [];
    for (let i = 0; i < 16; i++) {
      fakes.push(await F.startFakeInspector({ onOpen: (sock) => {
        sock.write(Buffer.concat([F.frameHeader(1, 40 * MiB), Buffer.from('{"method":"x","params":{"a":"'), Buffer.alloc(20 * MiB, 0x61)]));
      } }));
    }
    return fakes;
  },
  convert: async () => {
    const text = starProfileText(262000, 46 * MiB);
    const fakes = [];
    for (let i = 0; i < 4; i++) fakes.push(await F.startFakeInspector({ stopText: (id) => `{"id":${id},"result":{"profile":${text}}}` }));
    return fakes;
  },
  heap: async () => {
    const text = heapText(1048575);
    const fakes = [];
    for (let i = 0; i < 4; i++) fakes.push(await F.startFakeInspector({ heapText: text }));
    return fakes;
  },
  snapshot: async () => {
    // Two targets, each with one snapshot's text (generated once into the
    // temp dir), read in 1 MiB chunks as the daemon takes them; used heap
    // 72 MiB of a 78 MiB limit: each is asked for at once (one at a time),
    // and its text may be 4 x 72 + 64 MiB (352 MiB).
    const fakes = [];
    for (const nodes of [2100000, 3200000]) {
      const file = path.join(os.tmpdir(), `isoprof-hostile-snapshot-${nodes}.heapsnapshot`);
      if (!fs.existsSync(file)) {
        const r = spawnSync(path.join(BUILD, 'tests', 'bench', 'bench_heapsnap'), ['--generate', String(nodes), file]);
        if (r.status !== 0) throw new Error(`bench_heapsnap --generate: ${r.stderr}`);
      }
      let fd = null;
      const buf = Buffer.alloc(MiB);
      const chunks = (i) => {
        if (fd === null) fd = fs.openSync(file, 'r');
        const k = fs.readSync(fd, buf, 0, MiB, i * MiB);
        if (k > 0) return buf.toString('latin1', 0, k);
        fs.closeSync(fd);
        fd = null;
        return null;
      };
      const fake = await F.startFakeInspector({ heapUsed: 72 * MiB, snapshot: { chunks } });
      fake.targetExtra = ', memory_limit: 78MiB';
      fakes.push(fake);
    }
    fakes[0].until = { re: /msg="(window stored|conversion failed)"[^\n]*type=retained/g, count: 2 };
    return fakes;
  },
  everything: async () => [
    ...(await SCENARIOS.partial()).slice(0, 8),
    ...(await SCENARIOS.convert()),
    ...(await SCENARIOS.heap()),
    await F.startFakeInspector({ list: (port, host) => Array.from({ length: 10000 }, (_, i) => ({ id: `t${i}`, webSocketDebuggerUrl: `ws://${host}/t${i}` })) }),
    await F.startFakeInspector({ listBody: '['.repeat(600000) }),
  ],
};

(async () => {
  const root = path.resolve(__dirname, '..', '..');
  const build = path.resolve(arg('build', path.join(root, 'build')));
  BUILD = build;
  const isoprofd = path.join(build, 'agent', 'isoprofd');
  const seconds = Number(arg('seconds', '40'));
  const only = arg('only', 'idle,partial,convert,heap,everything').split(',');
  const rows = [];
  for (const name of only) {
    if (!SCENARIOS[name]) throw new Error(`unknown scenario ${name}`);
    rows.push(await scenario(name, isoprofd, seconds, SCENARIOS[name]));
    console.error(JSON.stringify(rows[rows.length - 1]));
  }
  const cols = ['scenario', 'vmhwm_mib', 'budget_share', 'windows_stored', 'sessions_dropped', 'conversions_failed', 'exit'];
  const table = [cols, ...rows.map((r) => cols.map((c) => String(r[c])))];
  const w = cols.map((_, i) => Math.max(...table.map((r) => r[i].length)));
  for (const r of table) console.log(r.map((c, i) => c.padEnd(w[i])).join('  ').trimEnd());
  console.log(`budget: ${BUDGET_MIB} MiB (agent/daemon/budget.h); unit MemoryMax 256 MiB`);
  const json = arg('json', null);
  if (json) fs.writeFileSync(json, JSON.stringify({ budget_mib: BUDGET_MIB, seconds, rows }, null, 2));
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
