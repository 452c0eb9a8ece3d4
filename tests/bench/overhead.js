// Section "overhead" of the benchmark harness (tests/bench/bench.js): what
// profiling costs a Node HTTP service, end to end and in its stable parts.
//
// Variants, each one long-lived, warmed-up service process
// (workloads/service.js) for the whole section:
//   none                no profiler (and no --inspect: whatever an open
//                       inspector costs is charged to isoprofd)
//   isoprofd-default    isoprofd at its embedded schedule (10 s windows every
//                       60 s at 10 ms, jitter 10 %; heap sampling at 512 KiB
//                       from attach, a heap window every 5 min)
//   isoprofd-always-on  back-to-back windows: duration 10s, period 10s,
//                       jitter 0% (with the default 10 % jitter the windows
//                       leave gaps of up to a second between them)
//   pyroscope           @pyroscope/nodejs at its defaults, preloaded into the
//                       service (workloads/pyroscope-preload.js), flushing to
//                       the loopback ingest server every 60 s
//   isoprofd-D/P/I      extra schedules given with --overhead-schedules, to try other
//                       trade-offs against the defaults in the same run
// Both isoprofd variants upload their windows to the same loopback ingest
// server as pyroscope (push API), so both sides profile and ship. Their
// DogStatsD latency listener is turned off: two daemons cannot share its UDP
// port, and it does not touch the target.
//
// Loads, from a generator on CPU 1 against the service on CPU 0:
//   (b) max throughput: wrk -t1 -c<connections> for --overhead-seconds
//       (workloads/wrk-report.lua reports its latency percentiles as JSON)
//   (a) fixed rate: workloads/loadgen.js, open loop at --overhead-rate-fraction of the
//       no-profiler throughput measured after the warm-up, latency from each
//       request's scheduled send time (no coordinated omission)
//
// Rounds: each round runs (b) then (a) on every variant in turn, the order
// rotated from round to round so no variant always follows the same one. A
// round lasts about 4 x (2 x seconds + 1.5) s, not a multiple of 60 s, and
// the default schedule's jitter moves its windows anyway, so each run of
// the default schedule lands at a different phase of it: some runs overlap
// a window, most do not. The MEAN over rounds of the per-round ratio
// (variant / none of the same round) is then the expected cost, and the
// verdicts use it, with a bootstrap 95 % interval of the mean; the median is
// reported too.
//
// Idle samplers: the always-on and pyroscope variants keep sampling while
// their service waits for its turn, and the default variant does during its
// windows. Sharing CPU 0 with the measured service, they would tax every
// other variant, the baseline most (it has all three beside it), and so make
// the profilers look cheaper than they are by about their idle cost, which
// is the size of the goals. So the services not under load are parked on
// CPU 1 (taskset -a -p, all their threads) and only the measured one runs on
// CPU 0. CPU 1 carries the load generator, the daemons, the ingest server
// and this process, with room to spare, so a parked sampler there does not
// slow the measured service. The idle samplers' CPU is still measured
// (sampler CPU per second while parked) and reported.
//
// Stable parts (BENCHMARKING.md method 1), per run and per variant: the
// sampler threads' CPU (V8's v8:ProfEvntProc, which is also what
// @datadog/pprof's wall profiler runs under pyroscope) per second of wall
// time, polled every 100 ms from /proc since a window's thread ends with the
// window; the service's process CPU per request (µs); the daemon's CPU.
//
// Options (bench.js --NAME VALUE):
//   --overhead-pairs N  rounds (default 20; quick 2)
//   --overhead-seconds S  length of each load run, whole seconds (default 5; quick 2)
//   --overhead-warmup S  warm-up load per service before the rounds (default 8; quick 2)
//   --overhead-connections C  wrk connections (default 16)
//   --overhead-rate-fraction F  the fixed rate as a share of no-profiler throughput (default 0.5)
//   --overhead-schedules LIST    extra isoprofd variants, "duration/period/interval[/jitter[/mode]]"
//                       comma-separated, e.g. "5s/60s/10ms,10s/60s/20ms,10s/60s/10ms/10%/warm"
//                       (mode: sampling.cpu.mode, warm windows)
//   --overhead-heap LIST  extra isoprofd variants at the default CPU schedule
//                       with another sampling.heap.interval, e.g. "4MiB,64MiB"
//   --overhead-variants LIST  run only these of the standard variants
//                       (isoprofd-default, isoprofd-always-on, pyroscope); the
//                       baseline and the extra variants always run
// Full mode with the defaults takes about 16 minutes.
'use strict';
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const common = require('./common');

const WL = path.join(__dirname, 'workloads');
const SERVICE = path.join(WL, 'service.js');
const PRELOAD = path.join(WL, 'pyroscope-preload.js');
const LOADGEN = path.join(WL, 'loadgen.js');
const WRK_LUA = path.join(WL, 'wrk-report.lua');
const INGEST = path.join(common.ROOT, 'tests', 'integration', 'ingest-server.js');
const SAMPLER = /ProfEvntProc/;
const MEASURED_CPU = 0;
const OTHER_CPU = 1;
const BASE = 'none';
// Fewer rounds than this give no verdict: a bootstrap interval of a handful
// of values is too narrow to trust (BENCHMARKING.md asks for 20 or more).
const MIN_ROUNDS = 10;

// --- small helpers ------------------------------------------------------

const sleep = common.sleep;
const pct = (x, d = 2) => (Number.isFinite(x) ? `${(x * 100).toFixed(d)} %` : '-');

// taskset -a -p: moves every thread of pid to cpu (new threads inherit it).
function pin(pid, cpu) {
  const r = spawnSync('taskset', ['-a', '-p', '-c', String(cpu), String(pid)], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`taskset -a -p -c ${cpu} ${pid}: ${r.stderr || r.error}`);
}
function affinityMask(pid) {
  const r = spawnSync('taskset', ['-p', String(pid)], { encoding: 'utf8' });
  const m = /affinity mask:\s*([0-9a-f]+)/.exec(r.stdout || '');
  return m ? m[1] : null;
}

function lines(s) { return s.split('\n').filter(Boolean); }

// Every ProfEvntProc thread of a process and its CPU (s), from
// /proc/PID/task/TID/schedstat (nanoseconds on the CPU; stat's utime and
// stime count 10 ms ticks, too coarse for a few ms a second over a run of
// a few seconds), or from stat where schedstat is missing.
function samplerThreads(pid) {
  const out = new Map();
  let tids;
  try { tids = fs.readdirSync(`/proc/${pid}/task`); } catch (_) { return out; }
  for (const tid of tids) {
    try {
      if (!SAMPLER.test(fs.readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8'))) continue;
      let cpu;
      try {
        cpu = parseInt(fs.readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0], 10) / 1e9;
      } catch (_) {
        const st = fs.readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
        const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
        cpu = (parseInt(f[11], 10) + parseInt(f[12], 10)) / common.TICKS;
      }
      out.set(tid, cpu);
    } catch (_) { /* the thread ended meanwhile */ }
  }
  return out;
}

// CPU seconds of every live thread of pid from schedstat (ns): finer than
// procCpu's 10 ms ticks, for the daemon's few ms a second. A thread that
// ended is not counted; the daemon's threads live as long as it does.
function schedCpu(pid) {
  let s = 0;
  let tids;
  try { tids = fs.readdirSync(`/proc/${pid}/task`); } catch (_) { return NaN; }
  for (const tid of tids) {
    try { s += parseInt(fs.readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0], 10) / 1e9; } catch (_) { /* ended */ }
  }
  return s;
}

// The mean with its bootstrap 95 % interval, and the median with min/max.
function stats(xs) {
  const v = xs.filter(Number.isFinite);
  if (!v.length) return { n: 0, mean: NaN, ci95_mean: [NaN, NaN], median: NaN, min: NaN, max: NaN };
  const s = common.summary(v);
  return { n: v.length, mean: common.mean(v), ci95_mean: common.bootstrap(v, common.mean), median: s.median, ci95_median: s.ci95, min: s.min, max: s.max };
}
const fmtMean = (s, d = 3) => `${common.fx(s.mean, d)} [${common.fx(s.ci95_mean[0], d)}, ${common.fx(s.ci95_mean[1], d)}]`;

// Verdict for "cost within goal" where cost is a per-round share (e.g. 1 -
// throughput ratio, or P99 ratio - 1): met only when the whole interval of
// the mean is within the goal and the interval is narrower than the goal.
function withinVerdict(cost, goal) {
  if (cost.n < MIN_ROUNDS) return `not resolved: ${cost.n} rounds, fewer than the ${MIN_ROUNDS} an interval needs`;
  const [lo, hi] = cost.ci95_mean;
  const half = (hi - lo) / 2;
  if (hi - lo > goal) return `not resolved: the 95 % interval is ±${(half * 100).toFixed(2)} %, wider than the ${(goal * 100).toFixed(0)} % goal`;
  if (hi <= goal) return 'met';
  if (lo > goal) return `not met: by ${((cost.mean - goal) * 100).toFixed(2)} % (cost ${pct(cost.mean)}, 95 % interval ${pct(lo)} to ${pct(hi)})`;
  return `not resolved: the 95 % interval ${pct(lo)} to ${pct(hi)} straddles the ${(goal * 100).toFixed(0)} % goal`;
}
// Verdict for "A cheaper than B": d = cost_A - cost_B per round.
function betterVerdict(d) {
  if (d.n < MIN_ROUNDS) return `not resolved: ${d.n} rounds, fewer than the ${MIN_ROUNDS} an interval needs`;
  const [lo, hi] = d.ci95_mean;
  if (hi < 0) return 'met';
  if (lo > 0) return `not met: costlier by ${pct(d.mean)} (95 % interval ${pct(lo)} to ${pct(hi)})`;
  return `not resolved: the difference's 95 % interval ${pct(lo)} to ${pct(hi)} includes 0`;
}

// --- variants -----------------------------------------------------------

function variantList(ctx) {
  const v = [
    { name: BASE, kind: 'none' },
    { name: 'isoprofd-default', kind: 'isoprofd', sampling: null },
    { name: 'isoprofd-always-on', kind: 'isoprofd', sampling: { duration: '10s', period: '10s', jitter: '0%' } },
    { name: 'pyroscope', kind: 'pyroscope' },
  ];
  const extra = String(ctx.opt('overhead-schedules', '')).split(',').map((s) => s.trim()).filter(Boolean);
  for (const s of extra) {
    const [duration, period, interval, jitter, mode] = s.split('/');
    if (!duration || !period) throw new Error(`--schedules: '${s}' is not duration/period[/interval[/jitter[/mode]]]`);
    if (mode && !['cold', 'warm', 'auto'].includes(mode)) throw new Error(`--schedules: '${s}': mode is cold, warm or auto`);
    const sampling = { duration, period };
    if (interval) sampling.interval = interval;
    if (jitter) sampling.jitter = jitter;
    if (mode) sampling.mode = mode;
    v.push({ name: `isoprofd-${s}`, kind: 'isoprofd', sampling });
  }
  // The default CPU schedule with another heap sampling interval: the heap
  // sampler runs from attach, so its cost is paid all the time.
  for (const h of String(ctx.opt('overhead-heap', '')).split(',').map((x) => x.trim()).filter(Boolean)) {
    if (!/^\d+(KiB|MiB)$/.test(h)) throw new Error(`--overhead-heap: '${h}' is not a size like 512KiB or 4MiB`);
    v.push({ name: `isoprofd-heap-${h}`, kind: 'isoprofd', sampling: null, heapInterval: h });
  }
  const keep = ctx.opt('overhead-variants', '');
  if (!keep) return v;
  const names = keep.split(',').map((x) => x.trim());
  for (const n of names) {
    if (!v.some((x) => x.name === n)) throw new Error(`--overhead-variants: no variant '${n}' (${v.map((x) => x.name).join(', ')})`);
  }
  // The standard variants named, the baseline, and every extra one.
  return v.filter((x) => x.name === BASE || names.includes(x.name) || !['isoprofd-default', 'isoprofd-always-on', 'pyroscope'].includes(x.name));
}

function daemonConfig(dir, inspectorPort, sampling, ingestUrl, heapInterval) {
  const parts = [];
  if (sampling) parts.push(`cpu: {${Object.entries(sampling).map(([k, x]) => `${k}: ${x}`).join(', ')}}`);
  // A schedule as written (always-on and the like): no pause budget stretching it.
  if (sampling) parts.push('budget: {pause_share: 100%}');
  if (heapInterval) parts.push(`heap: {interval: ${heapInterval}}`);
  const cpu = parts.length ? `sampling: {${parts.join(', ')}}` : '# sampling: the embedded defaults';
  return [
    `store: {path: "${dir}/store"}`,
    'targets:',
    `  - {inspector: "127.0.0.1:${inspectorPort}", worker: "svc"}`,
    cpu,
    'anomaly: {latency: {listen: ""}}',
    `upload: {url: "${ingestUrl}"}`,
    'log: {level: info}',
    '',
  ].join('\n');
}

async function startService(v, dir, env) {
  const portFile = path.join(dir, 'port');
  const args = [];
  if (v.kind === 'pyroscope') args.push('--require', PRELOAD);
  // Parked on CPU 1 from the start; moved to CPU 0 for its runs.
  const c = await common.startNode(SERVICE, { args, env: { ...env, SERVICE_PORT_FILE: portFile }, cpu: OTHER_CPU, inspect: v.kind === 'isoprofd' });
  c.httpPort = await common.waitFor(() => {
    if (c.exitCode !== null) throw new Error(`service ${v.name} exited: ${c.err.slice(-2000)}`);
    try { return parseInt(fs.readFileSync(portFile, 'utf8'), 10) || null; } catch (_) { return null; }
  }, 15000, `service ${v.name} to listen`);
  return c;
}

// --- load runs ----------------------------------------------------------

async function runWrk(port, seconds, connections, bodyFile) {
  const c = common.start('wrk', ['-t1', `-c${connections}`, `-d${seconds}s`, '--timeout', '5s', '-s', WRK_LUA, `http://127.0.0.1:${port}`],
    { cpu: OTHER_CPU, env: { BODY_FILE: bodyFile } });
  const r = await c.exited;
  const line = lines(c.out).find((l) => l.startsWith('WRK-JSON '));
  if (r.code !== 0 || !line) throw new Error(`wrk failed (${JSON.stringify(r)}): ${c.err.slice(-500)} ${c.out.slice(-500)}`);
  const j = JSON.parse(line.slice(9));
  const errs = Object.values(j.errors).reduce((a, b) => a + b, 0);
  return {
    requests: j.requests, errors: errs, rps: j.requests / (j.duration_us / 1e6),
    p50: j.latency_us.p50, p99: j.latency_us.p99, p999: j.latency_us.p999, max: j.latency_us.max, raw: j,
  };
}

async function runLoadgen(port, rate, seconds, bodyFile) {
  const c = common.start(process.execPath, [LOADGEN, '--url', `http://127.0.0.1:${port}/orders/render`, '--body', bodyFile,
    '--rate', String(rate), '--seconds', String(seconds), '--connections', '64'], { cpu: OTHER_CPU });
  const r = await c.exited;
  const line = lines(c.out).pop();
  if (r.code !== 0 || !line) throw new Error(`loadgen failed (${JSON.stringify(r)}): ${c.err.slice(-500)}`);
  const j = JSON.parse(line);
  return {
    requests: j.completed, errors: j.errors + j.unfinished, rps: j.achieved_rps,
    p50: j.latency_us.p50, p99: j.latency_us.p99, p999: j.latency_us.p999, max: j.latency_us.max, raw: j,
  };
}

// --- the section ----------------------------------------------------------

async function run(ctx) {
  const quick = ctx.quick;
  const rounds = parseInt(ctx.opt('overhead-pairs', quick ? '2' : '20'), 10);
  const seconds = parseInt(ctx.opt('overhead-seconds', quick ? '2' : '5'), 10);
  const warmup = parseInt(ctx.opt('overhead-warmup', quick ? '2' : '8'), 10);
  const connections = parseInt(ctx.opt('overhead-connections', '16'), 10);
  const rateFraction = parseFloat(ctx.opt('overhead-rate-fraction', '0.5'));
  if (!(rounds >= 1) || !(seconds >= 1) || !(warmup >= 1) || !(connections >= 1) || !(rateFraction > 0 && rateFraction < 1)) {
    throw new Error('overhead: --pairs, --seconds, --warmup, --connections must be >= 1 and --rate-fraction in (0, 1)');
  }
  if (os.cpus().length < 2) throw new Error('overhead: needs 2 CPUs (service on CPU 0, everything else on CPU 1)');
  const variants = variantList(ctx);
  const estMin = ((variants.length * (2 * seconds + 1.7) * rounds) + variants.length * (warmup + 3) + seconds + 15) / 60;
  ctx.log(`${variants.length} variants, ${rounds} rounds of (b) wrk ${seconds}s + (a) fixed rate ${seconds}s each; about ${estMin.toFixed(1)} min`);

  const dir = common.tmpdir('overhead');
  const bodyFile = path.join(dir, 'body.json');
  fs.writeFileSync(bodyFile, require(SERVICE).orderBody(1));

  // This process polls /proc and starts the load generators: keep it off
  // the measured CPU, and give its affinity back at the end.
  const ownMask = affinityMask(process.pid);
  pin(process.pid, OTHER_CPU);

  const npm = common.npmModules();
  // Nothing from the caller's environment may reconfigure the peer.
  const cleanEnv = {};
  for (const k of Object.keys(process.env)) if (k.startsWith('PYROSCOPE_') || k === 'NODE_OPTIONS') cleanEnv[k] = undefined;

  const procs = [];
  const data = {
    config: { rounds, seconds, warmup, connections, rate_fraction: rateFraction, measured_cpu: MEASURED_CPU, other_cpu: OTHER_CPU },
    versions: {
      node: process.version,
      isoprofd: (spawnSync(ctx.bin.isoprofd, ['--version'], { encoding: 'utf8' }).stdout || '').trim(),
      wrk: ((spawnSync('wrk', ['--version'], { encoding: 'utf8' }).stdout || '').split('\n')[0] || '').trim(),
      pyroscope_nodejs: common.npmVersion('@pyroscope/nodejs'),
      datadog_pprof: (() => { try { return JSON.parse(fs.readFileSync(path.join(npm, '@datadog', 'pprof', 'package.json'), 'utf8')).version; } catch (_) { return null; } })(),
    },
    machine: { cpus: os.cpus().length, cpu_model: os.cpus()[0]?.model, loadavg_start: os.loadavg() },
    variants: {},
    runs: [],
  };

  let poller = null;
  try {
    // The loopback ingest server, one for the section, on CPU 1.
    const ingest = common.start(process.execPath, [INGEST, '--port', '0', '--dir', path.join(dir, 'ingest')], { cpu: OTHER_CPU });
    procs.push(ingest);
    const ingestUrl = await common.waitFor(() => {
      if (ingest.exitCode !== null) throw new Error(`ingest server exited: ${ingest.err}`);
      const m = /listening (http:\/\/127\.0\.0\.1:\d+)/.exec(ingest.out);
      return m && m[1];
    }, 10000, 'the ingest server');

    // Services, then their daemons.
    for (const v of variants) {
      const vdir = path.join(dir, v.name.replace(/[^\w.-]/g, '_'));
      fs.mkdirSync(vdir);
      const env = { ...cleanEnv };
      if (v.kind === 'pyroscope') Object.assign(env, { PYROSCOPE_NODE_MODULES: npm, BENCH_PYROSCOPE_URL: ingestUrl });
      v.dir = vdir;
      v.svc = await startService(v, vdir, env);
      procs.push(v.svc);
      v.cfg = { kind: v.kind, inspect: v.kind === 'isoprofd' };
      if (v.kind === 'isoprofd') {
        const yaml = daemonConfig(vdir, v.svc.port, v.sampling, ingestUrl, v.heapInterval);
        fs.writeFileSync(path.join(vdir, 'isoprofd.yaml'), yaml);
        v.daemon = common.start(ctx.bin.isoprofd, ['--config', path.join(vdir, 'isoprofd.yaml')], { cpu: OTHER_CPU });
        procs.push(v.daemon);
        v.cfg.isoprofd_yaml = yaml;
      }
      if (v.kind === 'pyroscope') v.cfg.pyroscope = { init: { serverAddress: ingestUrl, appName: 'bench' }, defaults: 'wall 100 Hz in 60 s windows, heap every 512 KiB, flush every 60 s' };
      data.variants[v.name] = v.cfg;
    }
    for (const v of variants.filter((x) => x.daemon)) {
      await common.waitFor(() => {
        if (v.daemon.exitCode !== null) throw new Error(`isoprofd (${v.name}) exited: ${v.daemon.err.slice(-2000)}`);
        return /msg="target attached"/.test(v.daemon.err);
      }, 20000, `isoprofd (${v.name}) to attach`);
    }

    // Puts v on CPU 0 and every other service on CPU 1.
    const activate = (v) => {
      for (const o of variants) if (o !== v) pin(o.svc.pid, OTHER_CPU);
      pin(v.svc.pid, MEASURED_CPU);
    };
    const park = (v) => pin(v.svc.pid, OTHER_CPU);

    // One measured load run on v: CPU of the service, its samplers and
    // its daemon around it.
    const measure = async (v, load, fn, round) => {
      poll();
      v.idle.wall += Date.now() - v.idle.since;
      v.bucket = { samplerCpu: 0 };
      v.samplerSeen = false;
      const cpu0 = common.procCpu(v.svc.pid);
      const d0 = v.daemon ? schedCpu(v.daemon.pid) : 0;
      const t0 = Date.now();
      const res = await fn();
      const wall = (Date.now() - t0) / 1000;
      poll();
      const cpu = common.procCpu(v.svc.pid) - cpu0;
      const r = {
        round, variant: v.name, load, start: new Date(t0).toISOString(), wall_s: wall,
        rps: res.rps, requests: res.requests, errors: res.errors,
        p50_us: res.p50, p99_us: res.p99, p999_us: res.p999, max_us: res.max,
        cpu_per_req_us: res.requests ? (cpu * 1e6) / res.requests : NaN,
        service_cpu_s: cpu,
        sampler_cpu_per_s: v.bucket.samplerCpu / wall,
        sampler_seen: v.samplerSeen,
        daemon_cpu_per_s: v.daemon ? (schedCpu(v.daemon.pid) - d0) / wall : null,
        raw: res.raw,
      };
      v.bucket = v.idle;
      v.idle.since = Date.now();
      data.runs.push(r);
      return r;
    };

    // Warm-up: every service under load on CPU 0 for a while (JIT, heap,
    // connections), then the no-profiler throughput that sets the fixed rate.
    for (const v of variants) {
      activate(v);
      ctx.log(`warm-up ${v.name} (${warmup}s)`);
      await runWrk(v.svc.httpPort, warmup, connections, bodyFile);
      park(v);
    }
    const base = variants.find((v) => v.name === BASE);
    activate(base);
    const cal = await runWrk(base.svc.httpPort, seconds, connections, bodyFile);
    park(base);
    const rate = Math.max(10, Math.round(cal.rps * rateFraction));
    data.calibration = { max_rps: cal.rps, rate, raw: cal.raw };
    ctx.log(`no-profiler throughput ${cal.rps.toFixed(0)} req/s: fixed rate ${rate} req/s`);

    // Sampler CPU bookkeeping: every 100 ms, the growth of each service's
    // ProfEvntProc threads goes to its current bucket (a run, or idle).
    for (const v of variants) {
      v.lastSampler = samplerThreads(v.svc.pid);
      v.idle = { samplerCpu: 0, wall: 0, since: Date.now() };
      v.bucket = v.idle;
      v.samplerSeen = false;
    }
    const poll = () => {
      for (const v of variants) {
        const now = samplerThreads(v.svc.pid);
        let d = 0;
        for (const [tid, cpu] of now) d += cpu - (v.lastSampler.get(tid) || 0);
        if (now.size) v.samplerSeen = true;
        v.lastSampler = now;
        v.bucket.samplerCpu += d;
      }
    };
    poller = setInterval(poll, 100);

    for (let r = 0; r < rounds; r++) {
      const order = variants.map((_, i) => variants[(i + r) % variants.length]);
      for (const v of order) {
        activate(v);
        await sleep(300);
        await measure(v, 'b', () => runWrk(v.svc.httpPort, seconds, connections, bodyFile), r);
        await sleep(200);
        await measure(v, 'a', () => runLoadgen(v.svc.httpPort, rate, seconds, bodyFile), r);
        park(v);
      }
      const rr = data.runs.filter((x) => x.round === r && x.load === 'b');
      ctx.log(`round ${r + 1}/${rounds}: ${rr.map((x) => `${x.variant} ${x.rps.toFixed(0)}/s`).join(', ')}`);
    }
    clearInterval(poller);
    poller = null;
    poll();
    for (const v of variants) {
      // Which threads each service runs (names and counts), e.g. how many
      // sampler threads a profiler adds.
      const names = {};
      for (const t of Object.values(common.threads(v.svc.pid))) names[t.name] = (names[t.name] || 0) + 1;
      data.variants[v.name].threads = names;
      v.idle.wall += Date.now() - v.idle.since;
      data.variants[v.name].idle_sampler_cpu_per_s = v.idle.samplerCpu / (v.idle.wall / 1000);
      data.variants[v.name].idle_wall_s = v.idle.wall / 1000;
    }

    // Stop the daemons first (they store their open windows), then check
    // what each profiler actually did over the section.
    for (const v of variants.filter((x) => x.daemon)) {
      data.variants[v.name].daemon = { cpu_s: common.procCpu(v.daemon.pid), mem_kib: common.procMem(v.daemon.pid) };
      await common.stop(v.daemon, 'SIGTERM', 5000);
      const w = spawnSync(ctx.bin.isoprof, ['windows', '--store', path.join(v.dir, 'store'), '--json'], { encoding: 'utf8' });
      const ws = lines(w.stdout || '').map((l) => { try { return JSON.parse(l); } catch (_) { return null; } }).filter(Boolean);
      const cpuW = ws.filter((x) => x.type === 'cpu');
      const spanS = cpuW.reduce((s, x) => s + (Date.parse(x.end) - Date.parse(x.start)) / 1000, 0);
      data.variants[v.name].windows = {
        cpu: cpuW.length, heap: ws.filter((x) => x.type !== 'cpu').length, cpu_seconds: spanS,
        uploads: ws.reduce((m, x) => { m[x.upload] = (m[x.upload] || 0) + 1; return m; }, {}),
        daemon_errors: lines(v.daemon.err).filter((l) => /level=(warn|error)/.test(l)).slice(0, 20),
      };
    }
    try {
      const recs = lines(fs.readFileSync(path.join(dir, 'ingest', 'records.jsonl'), 'utf8')).map((l) => JSON.parse(l));
      data.ingest = { profiles: recs.length, by_app: recs.reduce((m, x) => { const k = x.app || x.labels?.service_name || '?'; m[k] = (m[k] || 0) + 1; return m; }, {}) };
    } catch (e) { data.ingest = { error: e.message }; }
  } finally {
    if (poller) clearInterval(poller);
    for (const p of procs.reverse()) await common.stop(p, 'SIGTERM', 5000);
    if (ownMask) spawnSync('taskset', ['-a', '-p', ownMask, String(process.pid)]);
  }
  data.machine.loadavg_end = os.loadavg();

  return report(variants, data, quick);
}

// --- figures, verdicts, tables --------------------------------------------

const METRICS = [
  // [key, label, higher is worse]
  ['rps', 'throughput', false],
  ['p50_us', 'P50', true],
  ['p99_us', 'P99', true],
  ['p999_us', 'P999', true],
  ['cpu_per_req_us', 'CPU/request', true],
];

function report(variants, data, quick) {
  const runs = data.runs;
  const rounds = [...new Set(runs.map((r) => r.round))];
  const get = (round, variant, load) => runs.find((r) => r.round === round && r.variant === variant && r.load === load);
  // A run with more than 0.1 % failed requests leaves its round out of
  // that load's ratios (they are counted in the absolute table).
  const ok = (r) => r.errors <= 0.001 * (r.requests + r.errors);
  // Per-round ratios variant / none for each load and metric.
  const ratios = {};
  for (const v of variants) {
    if (v.name === BASE) continue;
    ratios[v.name] = {};
    for (const load of ['a', 'b']) {
      for (const [k] of METRICS) {
        if (load === 'a' && k === 'rps') continue; // fixed by the generator
        ratios[v.name][`${load}.${k}`] = rounds.map((r) => {
          const x = get(r, v.name, load), b = get(r, BASE, load);
          return x && b && b[k] > 0 && ok(x) && ok(b) ? x[k] / b[k] : NaN;
        });
      }
    }
  }
  const summaries = {};
  for (const [vn, m] of Object.entries(ratios)) {
    summaries[vn] = {};
    for (const [k, xs] of Object.entries(m)) summaries[vn][k] = stats(xs);
  }
  // Absolute figures per variant and load (medians over rounds).
  const absolute = {};
  for (const v of variants) {
    absolute[v.name] = {};
    for (const load of ['a', 'b']) {
      const rs = runs.filter((r) => r.variant === v.name && r.load === load);
      const col = (k) => stats(rs.map((r) => r[k]));
      absolute[v.name][load] = {
        rps: col('rps'), p50_us: col('p50_us'), p99_us: col('p99_us'), p999_us: col('p999_us'),
        cpu_per_req_us: col('cpu_per_req_us'), sampler_cpu_per_s: col('sampler_cpu_per_s'),
        daemon_cpu_per_s: v.daemon ? col('daemon_cpu_per_s') : null,
        runs_overlapping_sampler: rs.filter((r) => r.sampler_seen).length, runs: rs.length,
        errors: rs.reduce((s, r) => s + r.errors, 0),
      };
    }
  }
  // For a duty-cycled schedule: the same ratios split by whether the run
  // overlapped a CPU window (a sampler thread was seen) or not, which shows
  // the cost inside a window apart from the cost between windows.
  const byWindow = {};
  for (const [vn, m] of Object.entries(ratios)) {
    byWindow[vn] = {};
    for (const [k, xs] of Object.entries(m)) {
      const load = k.split('.')[0];
      const seen = rounds.map((r) => { const x = get(r, vn, load); return !!(x && x.sampler_seen); });
      if (seen.every(Boolean) || !seen.some(Boolean)) continue;
      byWindow[vn][k] = { in_window: stats(xs.filter((_, i) => seen[i])), outside: stats(xs.filter((_, i) => !seen[i])) };
    }
  }
  data.ratios = ratios;
  data.by_window = byWindow;
  data.summaries = summaries;
  data.absolute = absolute;

  // The detailed tables.
  process.stdout.write(`\noverhead: per-round ratio to no profiler, mean [95 % interval of the mean], median, min..max, n rounds${quick ? ' (QUICK: not meaningful)' : ''}\n`);
  const trows = [];
  for (const [vn, m] of Object.entries(summaries)) {
    for (const [k, s] of Object.entries(m)) {
      const [load, key] = k.split('.');
      trows.push([vn, load === 'a' ? '(a) fixed rate' : '(b) max', METRICS.find((x) => x[0] === key)[1], fmtMean(s), common.fx(s.median), `${common.fx(s.min)}..${common.fx(s.max)}`, s.n]);
    }
  }
  common.printTable(['variant', 'load', 'metric', 'mean [95 % CI]', 'median', 'min..max', 'n'], trows);
  process.stdout.write('\noverhead: absolute medians over rounds (sampler and daemon CPU in ms per second of wall time)\n');
  const arows = [];
  for (const v of variants) {
    for (const load of ['b', 'a']) {
      const a = absolute[v.name][load];
      arows.push([v.name, load === 'a' ? `(a) ${data.calibration.rate}/s` : '(b) max', common.fx(a.rps.median, 0), common.fx(a.p50_us.median / 1000, 2),
        common.fx(a.p99_us.median / 1000, 2), common.fx(a.p999_us.median / 1000, 2), common.fx(a.cpu_per_req_us.median, 0),
        common.fx(a.sampler_cpu_per_s.mean * 1000, 2), a.daemon_cpu_per_s ? common.fx(a.daemon_cpu_per_s.mean * 1000, 2) : '-',
        `${a.runs_overlapping_sampler}/${a.runs}`, a.errors]);
    }
    arows.push([v.name, 'idle (parked)', '', '', '', '', '', common.fx(data.variants[v.name].idle_sampler_cpu_per_s * 1000, 2), '', '', '']);
  }
  common.printTable(['variant', 'load', 'req/s', 'P50 ms', 'P99 ms', 'P999 ms', 'CPU µs/req', 'sampler ms/s (mean)', 'daemon ms/s (mean)', 'runs sampled', 'errors'], arows);

  // Summary rows with the issue's goals.
  const rows = [];
  const D = 'isoprofd-default', P = 'pyroscope';
  const sd = summaries[D], sp = summaries[P];
  const cost = (vn, k) => { // per-round cost shares: lost throughput, added latency
    const xs = ratios[vn][k];
    return k.endsWith('.rps') ? xs.map((x) => 1 - x) : xs.map((x) => x - 1);
  };
  if (sd) {
    rows.push([`default schedule: throughput (b), ratio to none (mean [95 % CI])`, fmtMean(sd['b.rps']), '>= 0.99 (within 1 %)', withinVerdict(stats(cost(D, 'b.rps')), 0.01)]);
    rows.push([`default schedule: P99 at fixed rate (a), ratio`, fmtMean(sd['a.p99_us']), '<= 1.03 (within 3 %)', withinVerdict(stats(cost(D, 'a.p99_us')), 0.03)]);
    rows.push([`default schedule: P99 at max throughput (b), ratio`, fmtMean(sd['b.p99_us']), '<= 1.03 (within 3 %)', withinVerdict(stats(cost(D, 'b.p99_us')), 0.03)]);
    if (sp) {
      for (const [k, what] of [['b.rps', 'throughput (b)'], ['a.p99_us', 'P99 (a)'], ['b.p99_us', 'P99 (b)']]) {
        const cd = cost(D, k), cp = cost(P, k);
        const diff = stats(cd.map((x, i) => x - cp[i]));
        rows.push([`default schedule vs pyroscope: ${what} cost difference`, `${pct(diff.mean)} [${pct(diff.ci95_mean[0])}, ${pct(diff.ci95_mean[1])}]`, '< 0 (cheaper than pyroscope)', betterVerdict(diff)]);
      }
    }
  }
  if (byWindow[D]) {
    const w = (k) => { const x = byWindow[D][k]; return x ? `${common.fx(x.in_window.mean)} (n ${x.in_window.n}) / ${common.fx(x.outside.mean)} (n ${x.outside.n})` : 'no split'; };
    rows.push(['default schedule, runs inside / outside a window: throughput (b); P99 (a), mean ratio', `${w('b.rps')}; ${w('a.p99_us')}`, '', '']);
  }
  for (const v of variants) {
    if (v.name === BASE || v.name === D) continue;
    const s = summaries[v.name];
    rows.push([`${v.name}: throughput (b) / P99 (a) / P99 (b), ratio to none`, `${fmtMean(s['b.rps'])} / ${fmtMean(s['a.p99_us'])} / ${fmtMean(s['b.p99_us'])}`, '', '']);
  }
  rows.push(['sampler CPU under load (b), ms per s: ' + variants.filter((v) => v.name !== BASE).map((v) => v.name).join(' / '),
    variants.filter((v) => v.name !== BASE).map((v) => common.fx(absolute[v.name].b.sampler_cpu_per_s.mean * 1000, 2)).join(' / '), '', '']);
  rows.push(['sampler CPU while idle (parked on CPU 1), ms per s', variants.filter((v) => v.name !== BASE).map((v) => common.fx(data.variants[v.name].idle_sampler_cpu_per_s * 1000, 2)).join(' / '), '', '']);
  rows.push(['service CPU per request (b), µs, median: ' + variants.map((v) => v.name).join(' / '),
    variants.map((v) => common.fx(absolute[v.name].b.cpu_per_req_us.median, 0)).join(' / '), '', '']);
  return { rows, data };
}

module.exports = { name: 'overhead', title: 'Target overhead (Node HTTP service)', run };
