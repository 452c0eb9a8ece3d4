#!/usr/bin/env node
// The soak: isoprofd for a long time under every fault at once, then an
// account of every window it said it stored.
//
//   node --experimental-websocket tests/soak/soak.js [--build DIR]
//        [--seconds 3600] [--targets 10] [--kills 50] [--seed N] [--json FILE]
//
// For --seconds (an hour for the README's figures):
//   - --targets Node isolates (workloads/node-light.js), one killed (SIGKILL)
//     and restarted on its port every 3.6 s: 1,000 deaths an hour;
//   - workerd (if `packaging/setup.sh --runtimes` installed it) restarted
//     every 60 s with one to three services of three, so workers come and go;
//   - the ingest server flapping, 20 s a phase: 200, connections refused,
//     503, 429 with Retry-After, answers slower than a second, TCP resets;
//   - store.max_size 1 MiB (the least): the store reaches its budget and
//     evicts (after about half an hour of these windows);
//   - a DogStatsD flood for 3 s every 30 s (20,000 lines, 1,100 tag sets);
//   - control-socket clients: `isoprof status` every 2 s, `isoprof windows`
//     every 10 s, and every 5 s a raw connection that sends junk, half a
//     request or nothing;
//   - SIGHUP every 5 s, alternating the CPU period between 5 s and 6 s;
//   - --kills `kill -9` of the daemon in the first half, each followed by a
//     restart, as systemd's Restart= would.
// The second half runs one daemon, its RSS and fd count sampled every 10 s.
//
// At the end (daemon stopped with SIGTERM): `isoprof store check` clean;
// every window a daemon logged as stored is in the store, at the ingest
// server, or one of the store's evicted total; the daemon flat over the
// second half (after 2 min of warm-up, or a third of the half in a shorter
// run): the median RSS of its last third within 5 % of its first third's,
// and the median fd count within 5 % or one fd (the count moves with the
// sessions open at the instant, which the restarts keep changing). Min
// and max are reported beside. It prints the figures and exits 1 if a
// check failed.
'use strict';
const fs = require('node:fs');
const net = require('node:net');
const dgram = require('node:dgram');
const path = require('node:path');
const { spawn, spawnSync } = require('node:child_process');
const L = require('../integration/lib');
const { startIngestServer } = require('../integration/ingest-server');
const common = require('../bench/common');

const HELP = `usage: node --experimental-websocket tests/soak/soak.js [options]

  --build DIR    the build tree (DIR/agent/isoprofd; default build)
  --seconds S    how long (default 3600)
  --targets N    Node isolates (default 10)
  --kills N      kill -9 of the daemon in the first half (default 50)
  --seed N       the fault schedule's random seed (default 1)
  --json FILE    write the figures
`;
if (process.argv.includes('--help')) {
  process.stdout.write(HELP);
  process.exit(0);
}
const arg = common.arg;
const bins = common.binaries(arg('build'));
const SECONDS = Number(arg('seconds', 3600));
const NTARGETS = Number(arg('targets', 10));
const KILLS = Number(arg('kills', 50));
const rng = common.prng(Number(arg('seed', 1)));
const pick = (xs) => xs[Math.floor(rng() * xs.length)];

const say = (msg) => process.stderr.write(`[soak ${new Date().toISOString()}] ${msg}\n`);
const t0 = Date.now();
const elapsed = () => (Date.now() - t0) / 1000;

// --- the daemon, one life after another --------------------------------

const stored = new Set(); // ids every life logged as stored
const lives = [];
let daemon = null;

function config(dir, ctx, period) {
  const q = JSON.stringify;
  const lines = [
    `store: {path: ${q(ctx.store)}, max_size: 1MiB}`,
    'targets:',
    ...ctx.nodePorts.map((p, i) => `  - {inspector: "127.0.0.1:${p}", worker: "soak-${i + 1}", version: "v1"}`),
  ];
  if (ctx.workerdPort) lines.push(`  - {inspector: "127.0.0.1:${ctx.workerdPort}", version: "w1"}`);
  lines.push(
    'discovery: {interval: 1s}',
    `sampling: {cpu: {duration: 1s, period: ${period}}, heap: {period: 20s}}`,
    `anomaly: {cooldown: 30s, latency: {listen: "127.0.0.1:${ctx.udpPort}", window: 5s}}`,
    'upload:',
    `  url: ${q(ctx.srv.url)}`,
    '  api: push',
    '  timeout: 1s',
    '  host: "soak"',
    '  batch: {max_profiles: 32, max_delay: 1s}',
    '  backoff: {min: 500ms, max: 10s}',
    'log: {level: info}',
  );
  fs.writeFileSync(path.join(dir, 'isoprof.yaml'), lines.join('\n') + '\n');
}

function startDaemon(dir) {
  const d = spawn(bins.isoprofd, ['--config', path.join(dir, 'isoprof.yaml')], { stdio: ['ignore', 'ignore', 'pipe'] });
  const life = { pid: d.pid, started: elapsed(), stored: 0, errors: [], exit: null };
  lives.push(life);
  let partial = '';
  d.stderr.on('data', (chunk) => {
    partial += chunk;
    let i;
    while ((i = partial.indexOf('\n')) >= 0) {
      const line = partial.slice(0, i);
      partial = partial.slice(i + 1);
      const l = L.parseLogfmt(line);
      if (l.msg === 'window stored') { stored.add(l.id); life.stored++; }
      if (l.level === 'error' && life.errors.length < 20) life.errors.push(line);
      if (/ERROR: (Address|Leak)Sanitizer|runtime error: /.test(line)) life.sanitizer = true;
    }
  });
  d.exited = new Promise((resolve) => d.on('exit', (code, signal) => { life.exit = code ?? signal; resolve(life.exit); }));
  daemon = d;
  return d;
}

// --- the faults ----------------------------------------------------------

function every(ms, fn) {
  const t = setInterval(() => { Promise.resolve().then(fn).catch((e) => say(`fault loop: ${e.message}`)); }, ms);
  return () => clearInterval(t);
}

async function restartNode(ctx, i) {
  const old = ctx.nodes[i];
  if (old) { try { process.kill(old.pid, 'SIGKILL'); } catch (_) { /* gone */ } await old.exited; }
  for (let tries = 0; ; tries++) {
    try {
      ctx.nodes[i] = await L.startNode(path.join(L.WORKLOADS, 'node-light.js'), { port: ctx.nodePorts[i] });
      return;
    } catch (e) {
      if (tries >= 20) throw e;
      await L.sleep(250); // the port still held by the dead one
    }
  }
}

async function restartWorkerd(ctx) {
  if (ctx.workerd) { try { process.kill(ctx.workerd.pid, 'SIGKILL'); } catch (_) { /* gone */ } await ctx.workerd.exited; }
  const names = ['edge-a', 'edge-b', 'edge-c'].filter(() => rng() < 0.6);
  if (!names.length) names.push('edge-a');
  const services = await Promise.all(names.map(async (name) => ({ name, port: await L.freePort() })));
  ctx.workerd = await L.startWorkerd(path.join(L.WORKLOADS, 'worker-hot.js'), services, { port: ctx.workerdPort });
  ctx.counts.workerdRestarts++;
}

// The ingest server's phases, 20 s each.
const PHASES = ['ok', 'refused', '503', '429', 'slow', 'reset'];
async function ingestPhase(ctx, phase) {
  const srv = ctx.srv;
  if (ctx.phase === 'refused') await srv.resume();
  ctx.phase = phase;
  if (phase === 'refused') { await srv.pause(); return; }
  srv.script(() => {
    switch (phase) {
      case '503': return { status: 503 };
      case '429': return { status: 429, retryAfter: 1 };
      case 'slow': return { status: 200, delayMs: 1500 };
      case 'reset': return rng() < 0.5 ? 'reset' : { status: 200 };
      default: return { status: 200 };
    }
  });
}

function statsdFlood(ctx) {
  const sock = dgram.createSocket('udp4');
  const end = Date.now() + 3000;
  let sent = 0;
  return new Promise((resolve) => {
    const burst = () => {
      if (Date.now() > end || sent >= 20000) { sock.close(); ctx.counts.statsdLines += sent; resolve(); return; }
      for (let k = 0; k < 200; k++, sent++) {
        const tag = sent % 10 === 0 ? `soak-${1 + (sent % NTARGETS)}` : `junk-${sent % 1100}`;
        sock.send(`http.request.duration:${(rng() * 50).toFixed(2)}|ms|#worker:${tag}`, ctx.udpPort, '127.0.0.1');
      }
      setImmediate(burst);
    };
    burst();
  });
}

function cliAsync(args) {
  return new Promise((resolve) => {
    const c = spawn(bins.isoprof, args, { stdio: ['ignore', 'ignore', 'ignore'] });
    const t = setTimeout(() => c.kill('SIGKILL'), 30000);
    c.on('exit', (code) => { clearTimeout(t); resolve(code); });
    c.on('error', () => { clearTimeout(t); resolve(-1); });
  });
}

function hostileControl(sockPath) {
  return new Promise((resolve) => {
    const c = net.connect(sockPath);
    const kind = pick(['junk', 'half', 'silent']);
    c.on('error', () => resolve());
    c.on('close', () => resolve());
    c.on('connect', () => {
      if (kind === 'junk') c.write(Buffer.from(Array.from({ length: 512 }, () => Math.floor(rng() * 256))));
      if (kind === 'half') c.write('GET /status HTTP/1.1\r\nHost: x\r\n');
      setTimeout(() => c.destroy(), kind === 'silent' ? 6000 : 1000);
    });
  });
}

// --- the run -------------------------------------------------------------

async function main() {
  const dir = common.tmpdir('soak');
  const ctx = {
    store: path.join(dir, 'store'),
    nodePorts: [], nodes: [], workerd: null, workerdPort: 0, udpPort: await L.freePort(), phase: 'ok',
    counts: { nodeDeaths: 0, workerdRestarts: 0, daemonKills: 0, reloads: 0, statsdLines: 0, controlCalls: 0, controlHostile: 0, phases: 0 },
  };
  ctx.srv = await startIngestServer({ record: false });
  for (let i = 0; i < NTARGETS; i++) ctx.nodePorts.push(await L.freePort());
  for (let i = 0; i < NTARGETS; i++) await restartNode(ctx, i);
  let haveWorkerd = false;
  try { L.runtimeBinary('workerd'); haveWorkerd = true; } catch (_) { say('workerd is not installed (packaging/setup.sh --runtimes): no workerd churn'); }
  if (haveWorkerd) { ctx.workerdPort = await L.freePort(); await restartWorkerd(ctx); }
  let period = '5s';
  config(dir, ctx, period);
  startDaemon(dir);
  say(`started: ${NTARGETS} Node targets${haveWorkerd ? ', workerd' : ''}, ${SECONDS} s, store ${ctx.store}`);

  const half = SECONDS / 2;
  const stops = [];
  const deathEvery = 3.6; // s: 1,000 an hour
  stops.push(every(deathEvery * 1000, async () => { await restartNode(ctx, Math.floor(rng() * NTARGETS)); ctx.counts.nodeDeaths++; }));
  if (haveWorkerd) stops.push(every(60000, () => restartWorkerd(ctx)));
  let phaseIdx = 0;
  stops.push(every(20000, async () => { phaseIdx = (phaseIdx + 1) % PHASES.length; await ingestPhase(ctx, PHASES[phaseIdx]); ctx.counts.phases++; }));
  stops.push(every(30000, () => statsdFlood(ctx)));
  const sock = path.join(ctx.store, 'control.sock');
  stops.push(every(2000, async () => { if (await cliAsync(['status', '--json', '--socket', sock]) !== null) ctx.counts.controlCalls++; }));
  stops.push(every(10000, async () => { await cliAsync(['windows', '--store', ctx.store, '--json']); ctx.counts.controlCalls++; }));
  stops.push(every(5000, async () => { if (fs.existsSync(sock)) { await hostileControl(sock); ctx.counts.controlHostile++; } }));
  stops.push(every(5000, () => {
    period = period === '5s' ? '6s' : '5s';
    config(dir, ctx, period);
    if (daemon && daemon.exitCode === null) { daemon.kill('SIGHUP'); ctx.counts.reloads++; }
  }));

  // kill -9 and restart, evenly spread over the first half
  const killEvery = KILLS > 0 ? half / (KILLS + 1) : Infinity;
  const samples = [];
  let nextKill = killEvery;
  let nextSample = 0;
  while (elapsed() < SECONDS) {
    await L.sleep(250);
    if (ctx.counts.daemonKills < KILLS && elapsed() >= nextKill) {
      const d = daemon;
      d.kill('SIGKILL');
      await d.exited;
      ctx.counts.daemonKills++;
      nextKill += killEvery;
      startDaemon(dir);
    }
    if (elapsed() >= nextSample) {
      nextSample += 10;
      try {
        const m = common.procMem(daemon.pid);
        samples.push({ t: elapsed(), pid: daemon.pid, rss: m.rss, anon: m.anon, fds: fs.readdirSync(`/proc/${daemon.pid}/fd`).length });
      } catch (_) { /* between lives */ }
    }
    if (daemon.exitCode !== null && daemon.signalCode === null) {
      say(`the daemon exited by itself (${daemon.exitCode}); restarting`);
      startDaemon(dir);
    }
  }

  for (const s of stops) s();
  if (ctx.phase === 'refused') await ctx.srv.resume();
  ctx.srv.script(null);
  daemon.kill('SIGTERM');
  const code = await daemon.exited;
  for (const n of ctx.nodes) { try { process.kill(n.pid, 'SIGKILL'); } catch (_) { /* gone */ } }
  if (ctx.workerd) { try { process.kill(ctx.workerd.pid, 'SIGKILL'); } catch (_) { /* gone */ } }

  // --- the account ---
  const checks = [];
  const check = (ok, what) => { checks.push({ ok, what }); say(`${ok ? 'ok  ' : 'FAIL'} ${what}`); };
  check(code === 0, `the last daemon stopped with exit 0 (got ${code})`);
  const sc = spawnSync(bins.isoprof, ['store', 'check', '--store', ctx.store], { encoding: 'utf8' });
  check(sc.status === 0, `store check: ${(sc.stdout + sc.stderr).trim().split('\n').pop()}`);
  const inStore = new Set(L.windows(ctx.store, []).map((w) => w.id));
  const atServer = new Set(ctx.srv.profiles.map((p) => p.id).filter(Boolean));
  const stat = spawnSync(bins.isoprof, ['store', 'stat', '--store', ctx.store], { encoding: 'utf8' }).stdout;
  const evicted = Number((/^evicted\s+(\d+)/m.exec(stat) || [])[1] || 0);
  const missing = [...stored].filter((id) => !inStore.has(id) && !atServer.has(id));
  check(missing.length <= evicted, `${stored.size} windows logged stored: ${inStore.size} in the store, ${[...stored].filter((id) => atServer.has(id)).length} at the server, ${missing.length} in neither, evicted total ${evicted}`);
  const sanitized = lives.filter((l) => l.sanitizer).length;
  check(sanitized === 0, `sanitizer reports: ${sanitized}`);
  const lastPid = daemon.pid;
  const warmup = Math.min(120, half / 3);
  const late = samples.filter((s) => s.pid === lastPid && s.t >= half + warmup);
  // the medians of the first and last thirds of those samples, and the range
  const flat = (key) => {
    const xs = late.map((s) => s[key]);
    const k = Math.max(1, Math.floor(xs.length / 3));
    const first = common.median(xs.slice(0, k));
    const last = common.median(xs.slice(-k));
    return { first, last, change: last / first - 1, median: common.median(xs), min: Math.min(...xs), max: Math.max(...xs) };
  };
  const rss = flat('rss');
  const anon = flat('anon');
  const fds = flat('fds');
  const pct = (x) => `${x >= 0 ? '+' : ''}${(100 * x).toFixed(1)} %`;
  check(late.length >= 6, `${late.length} samples of the last daemon after ${half + warmup} s`);
  check(Math.abs(rss.change) <= 0.05, `RSS ${rss.first} -> ${rss.last} KiB (${pct(rss.change)}; ${rss.min}..${rss.max}); RssAnon ${anon.first} -> ${anon.last} KiB (${pct(anon.change)})`);
  check(Math.abs(fds.last - fds.first) <= Math.max(1, 0.05 * fds.first), `fds ${fds.first} -> ${fds.last} (${fds.min}..${fds.max})`);
  const figures = {
    seconds: SECONDS, targets: NTARGETS, counts: ctx.counts, lives: lives.length,
    windows: { logged: stored.size, inStore: inStore.size, atServer: atServer.size, missing: missing.length, evicted },
    requests: ctx.srv.requests.length, rss, anon, fds, samples, checks,
    errorsLogged: lives.reduce((n, l) => n + l.errors.length, 0), firstErrors: lives.flatMap((l) => l.errors).slice(0, 10),
  };
  say(`counts ${JSON.stringify(ctx.counts)}; ingest requests ${ctx.srv.requests.length}`);
  if (arg('json')) fs.writeFileSync(arg('json'), JSON.stringify(figures, null, 2));
  await ctx.srv.close();
  await L.cleanup();
  process.exit(checks.every((c) => c.ok) ? 0 : 1);
}

main().catch((e) => { say(`soak failed: ${e.stack}`); process.exit(2); });
