#!/usr/bin/env node
// Deploy regressions (version_regression) end to end: a real isoprofd and
// real Node processes on 127.0.0.1, deployed the way a host deploys them (a
// new process under a new version label, the config reloaded with SIGHUP,
// the old process stopped). Two parts:
//
// flag: minutes and samples from a deploy to the flag. One worker per size
//   (--sizes, % of the CPU): workloads/deploy-app.js at DEPLOY_ADDED=0 (v1)
//   runs until its version's aggregate holds --baseline-samples non-idle
//   samples, then the deploy puts v2 in its place, whose walkNested costs
//   that much more CPU; the time until the daemon logs "anomaly flagged"
//   kind=version_regression for it, or --cap-min (not flagged). From the
//   deploy on, the daemon runs the default schedule and every
//   anomaly.regression default (extra windows included). The old version's
//   baseline is built with the default window (10 s at 10 ms) every 12 s
//   and no pause budget, so that it holds a quarter hour's worth of the
//   default schedule within minutes; the deploy's reload restores every
//   default. The sizes run side by side, one worker each of one daemon:
//   each is its own endpoint, so it has its own slot (max_concurrent 4),
//   its own pause budget and its own extra windows; what they share is the
//   machine's CPU, so --busy keeps their sum under the cores, and each
//   app's CPU share is reported.
// fp: false flags over same-code redeploys. Two workloads, deploy-app.js
//   (a loop) and workloads/service.js (an HTTP service, driven here at
//   --rps), each redeployed --redeploys times in --chains workers side by
//   side: every redeploy a new process (V8 compiles and inlines anew) under
//   a new version label, judged against the one before it --looks times
//   (each judgement after a window), then replaced. Reported: redeploys
//   judged, judgements, and flagged. It runs a fast schedule (2 s windows
//   every 3 s at 1 ms, no pause budget, discovery every 500 ms), said in
//   the output; anomaly.regression stays at its defaults (the 30 s warm-up
//   included), so a judgement sees about a default window's samples.
//
//   node tests/bench/bench_deploy.js [--build DIR] [--only flag,fp]
//        [--sizes 5,10,30,100] [--busy 0.4] [--baseline-samples 6000]
//        [--cap-min 15] [--redeploys 50] [--chains 2] [--looks 5]
//        [--rps 400] [--fp-cap-s 240] [--json FILE] [--smoke]
//
// --smoke: a minutes-long run of both parts on the fast schedule with a
// short warm-up and light load, to check the harness; its figures mean
// nothing. It measures and asserts nothing; everything listens on
// 127.0.0.1, every child is stopped by its PID, temp dirs are removed.
'use strict';
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const C = require('./common');

const APP = path.join(__dirname, 'workloads', 'deploy-app.js');
const SERVICE = path.join(__dirname, 'workloads', 'service.js');
const GUARD = path.join(C.ROOT, 'tests', 'integration', 'parent-guard.js');
// anomaly.regression's default min_samples (config/options.c).
const MIN_SAMPLES = 1000;

const HELP = `usage: node tests/bench/bench_deploy.js [options]

Deploy regressions with a real isoprofd and real Node targets: minutes and
samples from a deploy to the version_regression flag at the defaults, and
false flags over same-code redeploys. A table, and every value as JSON.

  --build DIR             the build tree (default: build)
  --only LIST             flag, fp or both (default: flag,fp)
  --json FILE             the results (default: bench-deploy.json)
  --smoke                 a short run of both parts to check the harness
                          (fast schedule, 3 s warm-up); figures mean nothing
 flag (the default schedule and anomaly.regression defaults from the deploy on):
  --sizes LIST            % of CPU added in walkNested (default: 5,10,30,100)
  --busy F                share of the time the apps work (default: 0.4)
  --baseline-samples N    v1's non-idle samples before the deploy (default: 6000)
  --cap-min M             minutes after the deploy before "not flagged" (default: 15)
 fp (a fast schedule; anomaly.regression defaults):
  --redeploys N           same-code redeploys per workload (default: 50)
  --chains N              workers per workload redeployed side by side (default: 2)
  --looks N               judgements of each version before the next (default: 5)
  --rps N                 requests a second to each HTTP service (default: 400)
  --fp-cap-s S            seconds a version may take to be judged --looks times (default: 240)
  -h, --help              this text
`;

if (process.argv.includes('--help') || process.argv.includes('-h')) {
  process.stdout.write(HELP);
  process.exit(0);
}

const SMOKE = process.argv.includes('--smoke');
const KNOWN = new Set(['build', 'only', 'json', 'sizes', 'busy', 'baseline-samples', 'cap-min', 'redeploys', 'chains', 'looks', 'rps', 'fp-cap-s']);
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i];
  if (a === '--smoke') continue;
  if (!a.startsWith('--') || !KNOWN.has(a.slice(2)) || i + 1 >= process.argv.length) {
    process.stderr.write(`bench_deploy: unknown or incomplete option ${a}\n\n${HELP}`);
    process.exit(2);
  }
  i++;
}
const num = (name, def, smokeDef) => Number(C.arg(name, String(SMOKE ? smokeDef : def)));
const OPT = {
  only: C.arg('only', 'flag,fp').split(','),
  json: C.arg('json', 'bench-deploy.json'),
  sizes: C.arg('sizes', SMOKE ? '30,100' : '5,10,30,100').split(',').map(Number),
  busy: num('busy', 0.4, 0.2),
  baselineSamples: num('baseline-samples', 6000, 1500),
  capMin: num('cap-min', 15, 2),
  redeploys: num('redeploys', 50, 3),
  chains: num('chains', 2, 1),
  looks: num('looks', 5, 2),
  rps: num('rps', 400, 150),
  fpCapS: num('fp-cap-s', 240, 60),
  // The smoke run's warm-up; a real run keeps the default (30 s).
  warmup: SMOKE ? '3s' : null,
};
for (const p of OPT.only) if (p !== 'flag' && p !== 'fp') throw new Error(`--only: unknown part ${p}`);
if (!OPT.sizes.length || OPT.sizes.some((x) => !(x > 0))) throw new Error('--sizes: positive percentages');
if (!(OPT.busy > 0 && OPT.busy < 1)) throw new Error('--busy: a share between 0 and 1');
for (const k of ['baselineSamples', 'capMin', 'redeploys', 'chains', 'looks', 'rps', 'fpCapS']) {
  if (!(OPT[k] > 0)) throw new Error(`--${k}: must be > 0`);
}

// --- the daemon ----------------------------------------------------------

// The log lines the parts read; the rest are dropped as they come.
const KEEP = new Set(['config reloaded', 'reload refused, the running config is kept', 'target attached',
  'window stored', 'version aggregate', 'extra window for a new version', 'anomaly flagged', 'anomaly cleared',
  'version regression: a step failed']);

// One logfmt line (agent/daemon/log.c) -> {key: value}.
function parseLogfmt(line) {
  const out = {};
  const re = /([A-Za-z_][\w.]*)=(?:"((?:[^"\\]|\\.)*)"|(\S*))/g;
  let m;
  while ((m = re.exec(line)) !== null) out[m[1]] = m[2] !== undefined ? m[2].replace(/\\(.)/g, '$1') : m[3];
  return out;
}

// The config: targets [{port, worker, version}]; schedule 'default' (no
// sampling keys: every default), 'baseline' (the default window every
// 12 s, no budget) or 'fast' (2 s every 3 s at 1 ms, no budget, discovery
// every 500 ms). The latency listener is off (it would take UDP 8125).
function configText(store, targets, schedule) {
  const lines = [`store: {path: "${store}"}`, targets.length ? 'targets:' : 'targets: []',
    ...targets.map((t) => `  - {inspector: "127.0.0.1:${t.port}", worker: "${t.worker}", version: "${t.version}"}`)];
  if (schedule === 'baseline') lines.push('sampling: {cpu: {period: 12s}, budget: {pause_share: 100%}}');
  else if (schedule === 'fast') lines.push('sampling: {cpu: {duration: 2s, period: 3s, interval: 1ms}, budget: {pause_share: 100%}}', 'discovery: {interval: 500ms}');
  else if (schedule !== 'default') throw new Error(`schedule ${schedule}`);
  lines.push(`anomaly: {latency: {listen: ""}${OPT.warmup ? `, regression: {warmup: ${OPT.warmup}}` : ''}}`, 'log: {level: debug}');
  return lines.join('\n') + '\n';
}

async function startDaemon(bin, dir, text) {
  const cfg = path.join(dir, 'isoprof.yaml');
  fs.writeFileSync(cfg, text);
  const d = C.start(bin.isoprofd, ['--config', cfg], { stdio: ['ignore', 'ignore', 'pipe'] });
  d.cfg = cfg;
  d.lines = [];
  d.tailLines = [];
  let partial = '';
  d.stderr.on('data', (chunk) => {
    partial += chunk;
    let i;
    while ((i = partial.indexOf('\n')) >= 0) {
      const raw = partial.slice(0, i);
      partial = partial.slice(i + 1);
      d.tailLines.push(raw);
      if (d.tailLines.length > 40) d.tailLines.shift();
      const rec = parseLogfmt(raw);
      if (!KEEP.has(rec.msg) && rec.level !== 'error') continue;
      rec.t = Date.now();
      rec.seq = d.lines.length;
      d.lines.push(rec);
    }
  });
  d.dead = () => d.exitCode !== null || d.signalCode !== null;
  // The first line matching pred from seq `from` on, or null after ms.
  d.waitLog = async (pred, ms, from = 0) => {
    const end = Date.now() + ms;
    for (let k = from; ; await C.sleep(100)) {
      for (; k < d.lines.length; k++) if (pred(d.lines[k])) return d.lines[k];
      if (d.dead()) throw new Error(`isoprofd exited:\n${d.tailLines.join('\n')}`);
      if (Date.now() > end) return null;
    }
  };
  d.select = (pred) => d.lines.filter(pred);
  // Reloads one at a time: write the config, SIGHUP, its "config reloaded".
  let queue = Promise.resolve();
  d.reload = (text) => {
    const run = async () => {
      const from = d.lines.length;
      fs.writeFileSync(d.cfg, text);
      process.kill(d.pid, 'SIGHUP');
      const r = await d.waitLog((l) => l.msg === 'config reloaded' || l.msg === 'reload refused, the running config is kept', 15000, from);
      if (!r || r.msg !== 'config reloaded') throw new Error(`the reload was not applied:\n${d.tailLines.join('\n')}`);
      return r;
    };
    const p = queue.then(run);
    queue = p.catch(() => {});
    return p;
  };
  return d;
}

// --- the targets -----------------------------------------------------------

// POSTs /orders/render to 127.0.0.1:port at about rps a second (at most
// 32 in flight) until stop().
function startLoad(port, rps) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });
  const body = require(SERVICE).orderBody(1);
  let inflight = 0, owed = 0, sent = 0, errors = 0;
  const tick = setInterval(() => {
    owed += rps / 100;
    while (owed >= 1 && inflight < 32) {
      owed -= 1;
      inflight++;
      sent++;
      const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/orders/render', agent,
        headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) } }, (res) => {
        res.resume();
        res.on('end', () => { inflight--; });
      });
      req.on('error', () => { inflight--; errors++; });
      req.end(body);
    }
    owed = Math.min(owed, rps / 10); // a stalled server is not sent a burst after
  }, 10);
  return { stop() { clearInterval(tick); agent.destroy(); return { sent, errors }; } };
}

// kind 'app' (deploy-app.js with DEPLOY_ADDED=added) or 'service'.
async function startApp(kind, added = 0) {
  const t0 = Date.now();
  let c;
  if (kind === 'app') {
    c = await C.startNode(APP, { args: ['--require', GUARD], env: { DEPLOY_ADDED: String(added), DEPLOY_BUSY: String(OPT.busy) } });
  } else {
    const portFile = path.join(C.tmpdir('deploy-svc'), 'port');
    c = await C.startNode(SERVICE, { args: ['--require', GUARD], env: { SERVICE_PORT_FILE: portFile } });
    const httpPort = await C.waitFor(() => (fs.existsSync(portFile) ? Number(fs.readFileSync(portFile, 'utf8')) : null), 15000, 'the service port');
    c.load = startLoad(httpPort, OPT.rps);
  }
  c.t0 = t0;
  c.cpu0 = C.procCpu(c.pid);
  return c;
}

// Stops it; .cpuShare is the CPU it took over its life (of one core).
async function stopApp(c) {
  if (c.load) c.loadStats = c.load.stop();
  try { c.cpuShare = (C.procCpu(c.pid) - c.cpu0) / ((Date.now() - c.t0) / 1000); } catch (_) { c.cpuShare = NaN; }
  await C.stop(c);
}

function cliJson(bin, args) {
  const r = spawnSync(bin.isoprof, args, { encoding: 'utf8', timeout: 60000, maxBuffer: 64 << 20 });
  if (r.status !== 0) return { error: (r.stderr || r.error || '').toString().trim() };
  try { return JSON.parse(r.stdout); } catch (e) { return { error: e.message }; }
}

// `isoprof anomalies --json` lines ([] when there are none: status 1).
function cliLines(bin, args) {
  const r = spawnSync(bin.isoprof, args, { encoding: 'utf8', timeout: 60000, maxBuffer: 64 << 20 });
  if (r.status !== 0) return [];
  return r.stdout.split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

const loadavg = () => fs.readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).map(Number);
const minutes = (ms) => ms / 60000;

// --- part 1: from a deploy to the flag --------------------------------------

async function partFlag(bin, results) {
  const dir = C.tmpdir('deploy-flag');
  const store = path.join(dir, 'store');
  const schedule = SMOKE ? 'fast' : 'default';
  const ws = OPT.sizes.map((x) => ({ worker: `grow${x}`, added_pct: x }));
  const out = { schedule, baseline_schedule: SMOKE ? 'fast' : 'baseline', busy: OPT.busy, baseline_samples: OPT.baselineSamples,
    cap_min: OPT.capMin, loadavg_start: loadavg(), workers: [] };
  results.flag = out;
  await Promise.all(ws.map(async (w) => { w.v1 = await startApp('app', 0); }));
  const targets = (v) => ws.map((w) => ({ port: w[v].port, worker: w.worker, version: v }));
  const d = await startDaemon(bin, dir, configText(store, targets('v1'), SMOKE ? 'fast' : 'baseline'));
  console.error(`flag: isoprofd ${d.pid}; v1 of ${ws.map((w) => `${w.worker} (pid ${w.v1.pid})`).join(', ')} building ${OPT.baselineSamples} baseline samples`);

  const baseCap = 30 * 60000;
  await Promise.all(ws.map(async (w) => {
    const l = await d.waitLog((x) => x.msg === 'version aggregate' && x.worker === w.worker && x.version === 'v1' && Number(x.busy) >= OPT.baselineSamples, baseCap);
    if (!l) throw new Error(`${w.worker} v1 did not reach ${OPT.baselineSamples} samples in ${baseCap / 60000} min`);
    w.baseline_busy = Number(l.busy);
  }));
  const base = d.select((x) => x.msg === 'version aggregate' && x.version === 'v1');
  for (const w of ws) w.baseline_busy = Math.max(...base.filter((x) => x.worker === w.worker).map((x) => Number(x.busy)));

  // The deploy: the new processes, the config reloaded, the old ones stopped.
  const deployAt = Date.now();
  await Promise.all(ws.map(async (w) => { w.v2 = await startApp('app', w.added_pct / 100); }));
  const rel = await d.reload(configText(store, targets('v2'), schedule));
  await Promise.all(ws.map((w) => stopApp(w.v1)));
  console.error(`flag: deployed v2 at ${new Date(deployAt).toISOString()} (reload ${rel.t - deployAt} ms after the first start); waiting up to ${OPT.capMin} min for each flag`);

  const capMs = OPT.capMin * 60000;
  await Promise.all(ws.map(async (w) => {
    const f = await d.waitLog((x) => x.msg === 'anomaly flagged' && x.kind === 'version_regression' && x.worker === w.worker && x.version === 'v2',
      capMs - (Date.now() - w.v2.t0), rel.seq);
    w.flag = f;
    console.error(`flag: ${w.worker}: ${f ? `flagged after ${minutes(f.t - w.v2.t0).toFixed(2)} min, busy=${f.busy}, function=${f.function}` : 'not flagged within the cap'}`);
  }));
  out.loadavg_end = loadavg();
  // Each new version's plan as the pause budget left it (/status): a
  // window whose Profiler.start or stop stalled the app past max_pause
  // stretches the isolate's period.
  const status = cliJson(bin, ['status', '--store', store, '--json']);
  for (const w of ws) {
    // Up to the flag: the window that flags is logged stored before the
    // flag, and its "version aggregate" after it.
    const until = w.flag ? w.flag.seq : Infinity;
    const mine = (x) => x.worker === w.worker && x.version === 'v2' && x.seq > rel.seq && x.seq < until;
    const wins = d.select((x) => mine(x) && x.msg === 'window stored' && x.type === 'cpu');
    const judged = d.select((x) => mine(x) && x.msg === 'version aggregate' && x.judged === '1');
    const first = judged.length ? judged[0] : w.flag;
    const attached = d.select((x) => mine(x) && x.msg === 'target attached')[0];
    const cmp = cliJson(bin, ['compare', '--store', store, '--worker', w.worker, '--from', 'v1', '--to', 'v2', '--json']);
    const walk = cmp.grown ? cmp.grown.concat(cmp.shrunk || []).find((g) => g.name === 'walkNested') : null;
    const s0 = walk ? walk.share_before : NaN, s1 = walk ? walk.share_after : NaN;
    const rec = cliLines(bin, ['anomalies', '--store', store, '--json', '--kind', 'version_regression', '--worker', w.worker])
      .find((a) => a.version === 'v2');
    const st = (status.targets || []).find((t) => t.worker === w.worker && t.version === 'v2');
    const b = st && st.budget;
    out.workers.push({
      worker: w.worker, added_pct: w.added_pct, baseline_busy: w.baseline_busy,
      budget: b ? { period_s: b.period_ms / 1000, duration_s: b.duration_ms / 1000, factor: b.factor, limited: b.limited,
        over_max_pause: b.over_max_pause, start_ms: b.pauses.start, stop_ms: b.pauses.stop } : null,
      flagged: !!w.flag,
      minutes_to_flag: w.flag ? minutes(w.flag.t - w.v2.t0) : null,
      attached_after_s: attached ? (attached.t - w.v2.t0) / 1000 : null,
      first_judged_after_min: first ? minutes(first.t - w.v2.t0) : null,
      judgements_before_flag: judged.length,
      busy_at_flag: w.flag ? Number(w.flag.busy) : null,
      samples_taken: wins.reduce((s, x) => s + Number(x.samples), 0),
      cpu_windows: wins.length,
      extra_windows: d.select((x) => mine(x) && x.msg === 'extra window for a new version').length,
      flag_line: w.flag ? { function: w.flag.function, share_before: Number(w.flag.share_before), share_after: Number(w.flag.share_after),
        regressions: Number(w.flag.regressions), baseline_busy: Number(w.flag.baseline_busy) } : null,
      // The record as the end left it (re-judged with each window).
      record_functions: rec ? (rec.functions || []).map((g) => g.name) : [],
      // What v2 really added, read from the two aggregates at the end: its
      // share s0 -> s1 of the non-idle samples, X = (s1 - s0) / (1 - s1).
      walk_share_v1: s0, walk_share_v2: s1, added_measured_pct: 100 * (s1 - s0) / (1 - s1),
      compare_verdict: cmp.verdict || cmp.error, v1_busy: cmp.from ? cmp.from.busy : null, v2_busy: cmp.to ? cmp.to.busy : null,
      cpu_share_v1: w.v1.cpuShare,
      // The new version's story, seconds from the deploy.
      windows: wins.map((x) => ({ stored_s: (x.t - w.v2.t0) / 1000, samples: Number(x.samples) })),
      extra_asked_s: d.select((x) => mine(x) && x.msg === 'extra window for a new version').map((x) => (x.t - w.v2.t0) / 1000),
      judgements: judged.map((x) => ({ at_s: (x.t - w.v2.t0) / 1000, busy: Number(x.busy), baseline_busy: Number(x.baseline_busy),
        regressions: Number(x.regressions), flagged: x.flagged === '1' })),
    });
  }
  await Promise.all(ws.map(async (w) => { await stopApp(w.v2); out.workers.find((x) => x.worker === w.worker).cpu_share_v2 = w.v2.cpuShare; }));
  await C.stop(d, 'SIGINT', 20000);
}

// --- part 2: false flags over same-code redeploys ----------------------------

async function partFp(bin, results) {
  const dir = C.tmpdir('deploy-fp');
  const store = path.join(dir, 'store');
  const out = { schedule: 'fast: 2 s windows every 3 s at 1 ms, no pause budget, discovery every 500 ms',
    warmup: OPT.warmup || '30s (the default)', looks: OPT.looks, chains: OPT.chains, redeploys: OPT.redeploys,
    busy: OPT.busy, rps: OPT.rps, loadavg_start: loadavg(), deploys: [] };
  results.fp = out;
  const live = new Map(); // worker -> {port, version}
  const targets = () => [...live.entries()].map(([worker, t]) => ({ worker, port: t.port, version: t.version }));
  const d = await startDaemon(bin, dir, configText(store, [], 'fast'));
  const reload = () => d.reload(configText(store, targets(), 'fast'));
  const capMs = OPT.fpCapS * 1000;
  const isAgg = (x, worker, version) => x.msg === 'version aggregate' && x.worker === worker && x.version === version;

  const chain = async (kind, idx, count) => {
    const worker = `same-${kind}-${idx}`;
    let cur = await startApp(kind);
    live.set(worker, { port: cur.port, version: 'r0' });
    await reload();
    // The first version runs as long as the others will have: min_samples
    // and --looks windows folded.
    let folded = 0;
    const ok = await d.waitLog((x) => isAgg(x, worker, 'r0') && ++folded >= OPT.looks && Number(x.busy) >= MIN_SAMPLES, capMs);
    if (!ok) throw new Error(`${worker} r0 did not reach ${MIN_SAMPLES} samples in ${OPT.fpCapS} s`);
    for (let k = 1; k <= count; k++) {
      const version = `r${k}`;
      const next = await startApp(kind);
      live.set(worker, { port: next.port, version });
      const rel = await reload();
      await stopApp(cur);
      const rec = { workload: kind, worker, version, baseline: `r${k - 1}`, baseline_cpu_share: cur.cpuShare };
      let looks = 0;
      const done = await d.waitLog((x) => isAgg(x, worker, version) && x.judged === '1' && ++looks >= OPT.looks, capMs, rel.seq);
      const mine = (x) => x.worker === worker && x.version === version && x.seq > rel.seq;
      const judged = d.select((x) => mine(x) && x.msg === 'version aggregate' && x.judged === '1');
      const flags = d.select((x) => mine(x) && x.msg === 'anomaly flagged' && x.kind === 'version_regression');
      rec.judgements = judged.length;
      rec.complete = !!done;
      rec.first_judged_after_s = judged.length ? (judged[0].t - next.t0) / 1000 : null;
      rec.busy_first_judged = judged.length ? Number(judged[0].busy) : null;
      rec.baseline_busy = judged.length ? Number(judged[0].baseline_busy) : null;
      rec.flagged = flags.length > 0;
      rec.flags = flags.map((f) => ({ look: judged.filter((j) => j.seq < f.seq).length + 1, function: f.function,
        share_before: Number(f.share_before), share_after: Number(f.share_after), busy: Number(f.busy), baseline_busy: Number(f.baseline_busy) }));
      rec.cleared = d.select((x) => mine(x) && x.msg === 'anomaly cleared').length;
      out.deploys.push(rec);
      console.error(`fp: ${worker} ${version}: judged ${rec.judgements}x${rec.flagged ? `, FLAGGED (${rec.flags.map((f) => f.function).join(', ')})` : ''}` +
        ` (${out.deploys.length} of ${2 * OPT.redeploys})`);
      cur = next;
    }
    await stopApp(cur);
    live.delete(worker);
    await reload();
  };
  const split = (n, parts) => Array.from({ length: parts }, (_, i) => Math.floor(n / parts) + (i < n % parts ? 1 : 0));
  const jobs = [];
  for (const kind of ['app', 'service']) split(OPT.redeploys, OPT.chains).forEach((n, i) => { if (n > 0) jobs.push(chain(kind, i + 1, n)); });
  await Promise.all(jobs);
  out.loadavg_end = loadavg();
  out.errors = d.select((x) => x.level === 'error' || x.msg === 'version regression: a step failed').map((x) => x.msg);
  await C.stop(d, 'SIGINT', 20000);
}

// --- summary -----------------------------------------------------------------

// Clopper-Pearson 95 % interval of k successes in n.
function binomCdf(k, n, p) {
  let s = 0, t = Math.pow(1 - p, n);
  for (let i = 0; i <= k; i++) { s += t; t *= ((n - i) / (i + 1)) * (p / (1 - p)); }
  return s;
}
function clopperPearson(k, n) {
  const solve = (f) => { let lo = 0, hi = 1; for (let i = 0; i < 60; i++) { const m = (lo + hi) / 2; if (f(m)) lo = m; else hi = m; } return (lo + hi) / 2; };
  const lo = k === 0 ? 0 : solve((p) => 1 - binomCdf(k - 1, n, p) < 0.025);
  const hi = k === n ? 1 : solve((p) => binomCdf(k, n, p) > 0.025);
  return [lo, hi];
}

function report(results) {
  const f = C.fx;
  if (results.flag) {
    const r = results.flag;
    console.log(`\nflag: from the deploy (the new process started) to "anomaly flagged", ${r.schedule === 'default' ? 'the default schedule and anomaly.regression defaults' : 'the FAST schedule (smoke)'};` +
      ` the old version's baseline ${r.baseline_samples}+ non-idle samples; apps busy ${Math.round(100 * r.busy)} % of the time; cap ${r.cap_min} min`);
    C.printTable(['added', 'walkNested v1 -> v2', 'added, read', 'flagged: top function', 'walkNested named', 'minutes', 'samples (non-idle)', 'samples taken', 'CPU windows (extra)', 'judged before', 'first judged', 'app CPU v1/v2', 'v2 period (budget)'],
      r.workers.map((w) => [`+${w.added_pct} %`, `${f(100 * w.walk_share_v1, 1)} -> ${f(100 * w.walk_share_v2, 1)} %`, `+${f(w.added_measured_pct, 1)} %`,
        w.flagged ? `yes: ${w.flag_line.function}` : 'no', w.record_functions.includes('walkNested') ? `yes (of ${w.record_functions.length})` : 'no', w.flagged ? f(w.minutes_to_flag, 2) : `> ${r.cap_min}`, w.flagged ? w.busy_at_flag : '-', w.samples_taken,
        `${w.cpu_windows} (${w.extra_windows})`, w.judgements_before_flag, w.first_judged_after_min === null ? '-' : `${f(w.first_judged_after_min, 2)} min`,
        `${f(w.cpu_share_v1, 2)}/${f(w.cpu_share_v2, 2)}`, w.budget ? `${f(w.budget.period_s, 0)} s (x${f(w.budget.factor, 2)})` : '-']));
    console.log(`load average ${r.loadavg_start.join(' ')} at the start, ${r.loadavg_end.join(' ')} at the end`);
  }
  if (results.fp) {
    const r = results.fp;
    console.log(`\nfp: same-code redeploys (a new process and version label each), judged ${r.looks} times each; ${r.schedule};` +
      ` anomaly.regression defaults, warm-up ${r.warmup}; ${r.chains} worker(s) per workload side by side`);
    const rows = [];
    r.summary = {};
    for (const kind of ['app', 'service', 'all']) {
      const ds = r.deploys.filter((x) => kind === 'all' || x.workload === kind);
      const judged = ds.filter((x) => x.judgements > 0);
      const flagged = ds.filter((x) => x.flagged);
      const [lo, hi] = clopperPearson(flagged.length, Math.max(judged.length, 1));
      const first = judged.map((x) => x.first_judged_after_s);
      r.summary[kind] = { redeploys: ds.length, judged: judged.length, judgements: ds.reduce((s, x) => s + x.judgements, 0),
        flagged: flagged.length, rate_ci95: [lo, hi], first_judged_s_median: first.length ? C.median(first) : null };
      const s = r.summary[kind];
      rows.push([kind === 'app' ? 'deploy-app.js (loop)' : kind === 'service' ? `service.js (HTTP, ${r.rps}/s)` : 'both', s.redeploys, s.judged, s.judgements, s.flagged,
        `${f(100 * s.flagged / Math.max(s.judged, 1), 1)} % [${f(100 * lo, 1)}, ${f(100 * hi, 1)}]`, s.first_judged_s_median === null ? '-' : f(s.first_judged_s_median, 1)]);
    }
    C.printTable(['workload', 'redeploys', 'judged', 'judgements', 'flagged', 'flagged of judged [95 %]', 'first judged, s (median)'], rows);
    for (const x of r.deploys.filter((y) => y.flagged)) console.log(`  flagged: ${x.worker} ${x.version} against ${x.baseline}: ${x.flags.map((g) => `${g.function} ${f(100 * g.share_before, 1)} -> ${f(100 * g.share_after, 1)} % at look ${g.look}`).join('; ')}`);
    console.log(`load average ${r.loadavg_start.join(' ')} at the start, ${r.loadavg_end.join(' ')} at the end`);
  }
}

(async () => {
  const bin = C.binaries(C.arg('build', null));
  const git = spawnSync('git', ['-C', C.ROOT, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' });
  const results = { node: process.version, isoprofd: bin.isoprofd, commit: (git.stdout || '').trim(), began: new Date().toISOString(),
    command: `node ${path.relative(process.cwd(), __filename)} ${process.argv.slice(2).join(' ')}`.trim(), smoke: SMOKE, options: OPT };
  const write = () => fs.writeFileSync(OPT.json, JSON.stringify(results, null, 1) + '\n');
  try {
    if (OPT.only.includes('flag')) await partFlag(bin, results);
    if (OPT.only.includes('fp')) await partFp(bin, results);
  } catch (e) {
    results.error = String(e.stack || e);
    write();
    throw e;
  }
  results.ended = new Date().toISOString();
  report(results);
  write();
  console.log(`\n${SMOKE ? 'SMOKE RUN: these figures mean nothing. ' : ''}JSON: ${OPT.json}`);
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
