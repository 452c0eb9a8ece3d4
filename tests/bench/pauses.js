// Section "pauses": how long the target's event loop stalls when the agent
// calls into it.
//
// The target is workloads/pauses-app.js, twice: a small app (200 functions)
// and one with ~20k distinct compiled functions (each called once, a tenth
// warmed). Its 1 ms timer records the gap before every tick on the
// machine-wide monotonic clock; a stall is the longest gap overlapping the
// span from the call's send to its reply, so each stall is tied to the
// call that caused it. Three ways of driving the target:
//
//   direct  the bench speaks CDP to the target itself, in the agent's
//           order (agent/daemon/target.c): at attach Profiler.enable,
//           HeapProfiler.enable, HeapProfiler.startSampling (512 KiB), and
//           Runtime.getHeapUsage every second; a CPU window is
//           Profiler.setSamplingInterval, Profiler.start, the window's
//           length, Profiler.stop (reply = the whole profile, serialized on
//           the target's thread); a heap window is
//           HeapProfiler.getSamplingProfile (a forced full GC). Stalls and
//           the CDP round trip, per call, at 10 ms and 1 ms.
//   daemon  isoprofd itself (log level debug, a short schedule, heap
//           windows every 5 s) against the ~20k-function app; its
//           log lines ("window started", "window stored") are put on the
//           target's clock and the gaps around them attributed. A check
//           that the direct figures are what the real agent causes.
//   peer    @pyroscope/nodejs 0.6.4 inside the same app, flushing every few
//           seconds; a flush stops and restarts its wall (CPU) profiler and
//           takes its heap profile, in the app's own thread.
//
// Options (bench.js --NAME VALUE):
//   --pauses-reps N          CPU windows per app and interval at 10 ms (5; quick 2)
//   --pauses-window MS       length of a direct CPU window (10000 = the default
//                            sampling.cpu.duration; quick 2000)
//   --pauses-intervals LIST  sampling intervals (10ms,1ms)
//   --pauses-funcs N         functions of the big app (20000)
//
// It needs the global WebSocket (node --experimental-websocket on Node 20):
// run() re-runs this file in a child node with the flag when it is missing.
'use strict';
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const common = require('./common');

const APP = path.join(__dirname, 'workloads', 'pauses-app.js');
const mono = () => { const [s, ns] = process.hrtime(); return s * 1e3 + ns / 1e6; };
const sleep = common.sleep;

// --- the target ---------------------------------------------------------

// Starts pauses-app.js with an inspector; resolves the child with .port,
// .wsUrl, .ask(cmd) (one stdin command, one JSON answer) and .events (its
// unsolicited lines, e.g. the peer's flushes).
async function startApp(env, inspect = true) {
  const args = inspect ? ['--inspect=127.0.0.1:0', APP] : [APP];
  const c = common.start(process.execPath, args, { stdio: ['pipe', 'pipe', 'pipe'], env });
  const waiters = [];
  c.events = [];
  let buf = '';
  let ready = null;
  c.stdout.on('data', (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      let o;
      try { o = JSON.parse(line); } catch (_) { continue; }
      if (o.ready) ready = o;
      else if (o.peer_flush) c.events.push(o);
      else if (waiters.length) waiters.shift()(o);
    }
  });
  c.ask = (cmd) => new Promise((resolve) => { waiters.push(resolve); c.stdin.write(cmd + '\n'); });
  await common.waitFor(() => {
    if (c.exitCode !== null) throw new Error(`pauses-app exited: ${c.err.slice(-1000)}`);
    return ready && (!inspect || /Debugger listening on ws:\/\//.test(c.err));
  }, 120000, 'pauses-app to start');
  c.info = ready;
  if (inspect) {
    c.wsUrl = /Debugger listening on (ws:\/\/\S+)/.exec(c.err)[1];
    c.port = parseInt(/127\.0\.0\.1:(\d+)\//.exec(c.wsUrl)[1], 10);
  }
  return c;
}

// The longest gap of the app's loop overlapping [from, to] (monotonic ms).
async function stallIn(app, from, to) {
  const r = await app.ask(`q x ${from} ${to}`);
  if (r.oldest > from) throw new Error('the app\'s gap ring no longer covers the span asked for');
  return r;
}

// A CDP session over the global WebSocket. call() resolves {t0, t1, bytes,
// msg} with t0/t1 the monotonic send and receive times.
async function cdp(url) {
  const ws = new WebSocket(url);
  await new Promise((resolve, reject) => { ws.onopen = resolve; ws.onerror = () => reject(new Error(`WebSocket ${url} failed`)); });
  let id = 0;
  const pending = new Map();
  ws.onmessage = (m) => {
    const t1 = mono();
    const data = typeof m.data === 'string' ? m.data : Buffer.from(m.data).toString();
    const r = JSON.parse(data);
    const p = pending.get(r.id);
    if (p) { pending.delete(r.id); p({ t0: p.t0, t1, bytes: data.length, msg: r }); }
  };
  return {
    call(method, params = {}) {
      return new Promise((resolve, reject) => {
        const k = ++id;
        const done = (r) => (r.msg.error ? reject(new Error(`${method}: ${JSON.stringify(r.msg.error)}`)) : resolve(r));
        done.t0 = mono();
        pending.set(k, done);
        ws.send(JSON.stringify({ id: k, method, params }));
      });
    },
    close() { ws.close(); },
  };
}

// --- direct: the agent's CDP sequence from the bench ---------------------

function dist(xs) {
  return {
    n: xs.length,
    p50: common.quantile(xs, 0.5), p90: common.quantile(xs, 0.9), max: xs.length ? Math.max(...xs) : NaN,
    min: xs.length ? Math.min(...xs) : NaN,
  };
}

async function direct(app, { intervals, reps, repsFine, windowMs, log }) {
  const s = await cdp(app.wsUrl);
  const calls = []; // {kind, interval, stall, rtt, bytes, ...}
  // One call at a time (the memory poll included), and the next one only
  // once the previous one's stall has ended and been read, so a stall is
  // never credited to two calls.
  let chain = Promise.resolve();
  const exclusive = (fn) => { const p = chain.then(fn); chain = p.catch(() => {}); return p; };
  const step = (kind, interval, method, params = {}, extra = () => ({})) => exclusive(async () => {
    const r = await s.call(method, params);
    await sleep(15); // the tick that ends the gap must have run
    const q = await stallIn(app, r.t0, r.t1);
    calls.push({ kind, interval, stall_ms: +q.max.toFixed(3), rtt_ms: +(r.t1 - r.t0).toFixed(3), bytes: r.bytes, t0: +r.t0.toFixed(3), ...extra(r) });
    return r;
  });
  // Attach, as the agent does.
  await step('Profiler.enable', '', 'Profiler.enable');
  await step('HeapProfiler.enable', '', 'HeapProfiler.enable');
  await step('HeapProfiler.startSampling', '', 'HeapProfiler.startSampling',
    { samplingInterval: 524288, includeObjectsCollectedByMajorGC: false, includeObjectsCollectedByMinorGC: false });
  // The memory poll, every second, as the agent does; recorded too.
  let polling = true;
  const polls = (async () => {
    while (polling) {
      await sleep(1000);
      if (!polling) break;
      await step('Runtime.getHeapUsage', '', 'Runtime.getHeapUsage');
    }
  })();
  const heap = await app.ask('mem');
  const baseline = [];
  for (const iv of intervals) {
    const us = Math.round(parseDur(iv) * 1000);
    const n = us < 10000 ? repsFine : reps;
    for (let r = 0; r < n; r++) {
      log(`direct: ${app.info.funcs} functions, ${iv}, window ${r + 1}/${n}`);
      await sleep(400);
      // The quiet loop just before the window: what a gap is without a call.
      const b0 = mono();
      await sleep(120);
      baseline.push((await stallIn(app, b0, b0 + 100)).max);
      await step('Profiler.setSamplingInterval', iv, 'Profiler.setSamplingInterval', { interval: us });
      await step('Profiler.start', iv, 'Profiler.start');
      await sleep(windowMs);
      await step('Profiler.stop', iv, 'Profiler.stop', {}, (r) => ({ nodes: r.msg.result.profile.nodes.length, samples: r.msg.result.profile.samples.length }));
      await sleep(700);
      await step('heap window', iv, 'HeapProfiler.getSamplingProfile');
    }
  }
  polling = false;
  await polls;
  s.close();
  return { calls, baseline_100ms_max_gap: baseline, heap_used_mib: +(heap.heapUsed / 1048576).toFixed(1), rss_mib: +(heap.rss / 1048576).toFixed(1) };
}

function parseDur(s) {
  const m = /^(\d+(?:\.\d+)?)(us|ms|s)$/.exec(String(s).trim());
  if (!m) throw new Error(`bad interval '${s}' (e.g. 10ms)`);
  return parseFloat(m[1]) * { us: 0.001, ms: 1, s: 1000 }[m[2]];
}

// --- daemon: isoprofd itself, its log lines put on the app's clock ---------

async function viaDaemon(app, bin, { seconds, windowS, log }) {
  const dir = common.tmpdir('pauses');
  const cfg = [
    `store: {path: ${JSON.stringify(path.join(dir, 'store'))}}`,
    `targets: [{inspector: "127.0.0.1:${app.port}", worker: "pauses"}]`,
    // pause_share 100%: the schedule as configured (the default budget
    // would stretch it for the 20k app).
    `sampling: {cpu: {duration: ${windowS}s, period: ${windowS + 4}s, interval: 10ms}, heap: {period: 5s}, budget: {pause_share: 100%}}`,
    'anomaly: {latency: {listen: ""}}',
    'log: {level: debug}', '',
  ].join('\n');
  fs.writeFileSync(path.join(dir, 'c.yaml'), cfg);
  // The offset from the wall clock (the daemon's ts=) to the monotonic one.
  const offsets = [];
  const clock = async () => { const a = mono(); const c = await app.ask('clock'); offsets.push({ off: c.mono - c.wall, rtt: mono() - a }); };
  await clock();
  const d = common.start(bin.isoprofd, ['--config', path.join(dir, 'c.yaml')]);
  log(`daemon: isoprofd against ${app.info.funcs} functions for ${seconds} s (window ${windowS} s every ${windowS + 4} s, heap every 5 s)`);
  await sleep(seconds * 1000);
  await clock();
  await common.stop(d);
  const off = common.median(offsets.map((o) => o.off));
  const lines = d.err.split('\n').filter((l) => /msg="window (started|stored)"/.test(l));
  const at = (l) => Date.parse(/^ts=(\S+)/.exec(l)[1]) + off;
  const ev = lines.map((l) => ({ t: at(l), kind: /window started/.test(l) ? 'start' : /type=heap/.test(l) ? 'heap' : 'stop' }));
  // Each event's span on the target's clock (the log has 1 ms resolution):
  // a start is logged on Profiler.start's reply; a cpu window's stop is sent
  // duration after that and stored after its reply; a heap window is sent
  // at most its round trip (bounded here at 600 ms) before it is stored.
  const spans = [];
  let lastStart = null;
  for (const e of ev) {
    if (e.kind === 'start') { spans.push({ kind: 'Profiler.start', from: e.t - 150, to: e.t + 1 }); lastStart = e.t; }
    else if (e.kind === 'stop' && lastStart !== null) { spans.push({ kind: 'Profiler.stop', from: lastStart + windowS * 1000 - 20, to: e.t + 1 }); lastStart = null; }
    else if (e.kind === 'heap') spans.push({ kind: 'heap window', from: e.t - 600, to: e.t + 1 });
  }
  const out = [];
  for (const sp of spans) {
    // Spans of two kinds overlapping cannot say which call stalled.
    const clash = spans.some((o) => o !== sp && o.from < sp.to && sp.from < o.to);
    if (clash) { out.push({ kind: sp.kind, ambiguous: true }); continue; }
    const q = await stallIn(app, sp.from, sp.to);
    out.push({ kind: sp.kind, stall_ms: +q.max.toFixed(3), span_ms: +(sp.to - sp.from).toFixed(1) });
  }
  return { config: cfg, clock_offsets: offsets, events: out, log_lines: lines.length };
}

// --- peer: @pyroscope/nodejs's flush inside the app ------------------------

async function peer(env, { flushMs, flushes, log }) {
  // A sink for its uploads, so the exporter finishes normally.
  const srv = http.createServer((req, res) => { req.resume(); req.on('end', () => res.end('{}')); });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const modules = common.npmModules();
  const app = await startApp({ ...env, PEER: modules, PEER_URL: `http://127.0.0.1:${srv.address().port}`, PEER_FLUSH_MS: String(flushMs) }, false);
  log(`peer: @pyroscope/nodejs ${common.npmVersion('@pyroscope/nodejs')} in the ${app.info.funcs}-function app, flush every ${flushMs} ms, ${flushes} flushes`);
  await common.waitFor(() => app.events.filter((e) => e.peer_flush === 'wall').length >= flushes, flushMs * (flushes + 3), 'the peer to flush');
  await sleep(300);
  // Its wall and heap profilers have timers of the same period and flush
  // in the same turn of the loop, so one flush is both profile() calls
  // (whichever comes first to the last), plus what follows them in the next
  // 100 ms (encoding the profiles for export runs on the same thread).
  const out = [];
  const heaps = app.events.filter((e) => e.peer_flush === 'heap');
  for (const w of app.events.filter((e) => e.peer_flush === 'wall')) {
    const h = heaps.find((e) => Math.abs(e.t0 - w.t0) < 500);
    const from = Math.min(w.t0, h ? h.t0 : w.t0), to = Math.max(w.t1, h ? h.t1 : w.t1);
    const q = await stallIn(app, from, to + 100);
    out.push({ kind: 'peer flush', stall_ms: +q.max.toFixed(3), wall_sync_ms: +(w.t1 - w.t0).toFixed(3), heap_sync_ms: h ? +(h.t1 - h.t0).toFixed(3) : null });
  }
  await common.stop(app);
  srv.close();
  return { version: common.npmVersion('@pyroscope/nodejs'), flush_ms: flushMs, flushes: out };
}

// --- the section --------------------------------------------------------

async function measure(ctx) {
  const quick = ctx.quick;
  const bigFuncs = parseInt(ctx.opt('pauses-funcs', '20000'), 10);
  const cfg = {
    apps: [{ name: 'small', funcs: 200 }, { name: `${Math.round(bigFuncs / 1000)}k fns`, funcs: bigFuncs }],
    intervals: String(ctx.opt('pauses-intervals', '10ms,1ms')).split(',').map((x) => x.trim()).filter(Boolean),
    reps: parseInt(ctx.opt('pauses-reps', quick ? '2' : '5'), 10),
    window_ms: parseInt(ctx.opt('pauses-window', quick ? '2000' : '10000'), 10),
    daemon_seconds: quick ? 12 : 30,
    daemon_window_s: quick ? 2 : 10,
    peer_flush_ms: quick ? 2000 : 5000,
    peer_flushes: quick ? 2 : 3,
  };
  cfg.reps_fine = Math.max(1, Math.ceil(cfg.reps * 0.6)); // 1 ms windows: fewer, they cost more
  const data = { config: cfg, node: process.version, apps: {} };
  const t0 = Date.now();
  for (const a of cfg.apps) {
    const env = { FUNCS: String(a.funcs) };
    const app = await startApp(env);
    const res = { funcs: a.funcs, warm: app.info.warm };
    res.direct = await direct(app, { intervals: cfg.intervals, reps: cfg.reps, repsFine: cfg.reps_fine, windowMs: cfg.window_ms, log: ctx.log });
    if (a.funcs === bigFuncs) res.daemon = await viaDaemon(app, ctx.bin, { seconds: cfg.daemon_seconds, windowS: cfg.daemon_window_s, log: ctx.log });
    await common.stop(app);
    try {
      res.peer = await peer(env, { flushMs: cfg.peer_flush_ms, flushes: cfg.peer_flushes, log: ctx.log });
    } catch (e) {
      res.peer = { error: String(e.message || e) };
      ctx.log(`peer not measured: ${res.peer.error}`);
    }
    data.apps[a.name] = res;
  }
  data.seconds = +((Date.now() - t0) / 1000).toFixed(1);

  // Per app, per call kind and interval: the stall distribution.
  const fmt = (x) => common.fx(x, 1);
  const table = [];
  const rows = [];
  const groups = (app) => {
    const g = new Map();
    const add = (key, v) => { if (!g.has(key)) g.set(key, { stalls: [], rtts: [], bytes: [] }); const e = g.get(key); e.stalls.push(v.stall_ms); if (v.rtt_ms !== undefined) e.rtts.push(v.rtt_ms); if (v.bytes) e.bytes.push(v.bytes); };
    for (const c of app.direct.calls) add(`direct|${c.kind}|${c.interval}`, c);
    if (app.daemon) for (const e of app.daemon.events) if (!e.ambiguous) add(`isoprofd|${e.kind}|10ms`, e);
    if (app.peer && app.peer.flushes) for (const e of app.peer.flushes) add(`peer|${e.kind}|10ms`, e);
    return g;
  };
  for (const [name, app] of Object.entries(data.apps)) {
    app.summary = {};
    for (const [key, e] of groups(app)) {
      const [how, kind, iv] = key.split('|');
      const s = dist(e.stalls);
      const rtt = e.rtts.length ? common.median(e.rtts) : NaN;
      app.summary[key] = { stall: s, rtt_p50_ms: rtt, bytes_p50: e.bytes.length ? common.median(e.bytes) : null };
      table.push([name, how, kind, iv, s.n, fmt(s.p50), fmt(s.p90), fmt(s.max), fmt(rtt), e.bytes.length ? Math.round(common.median(e.bytes) / 1024) : '']);
      const shown = ['Profiler.start', 'Profiler.stop', 'heap window', 'peer flush'];
      if (how !== 'isoprofd' && shown.includes(kind) && (iv === '10ms' || (iv === '1ms' && kind.startsWith('Profiler.')))) {
        rows.push([`pause, ${kind}${kind === 'Profiler.stop' ? ' (with serialization)' : ''}, ${name}${iv ? `, ${iv}` : ''}`,
          `p50 ${fmt(s.p50)} ms, p90 ${fmt(s.p90)}, max ${fmt(s.max)} (n=${s.n})`, '', '']);
      }
    }
    const b = dist(app.direct.baseline_100ms_max_gap);
    table.push([name, 'direct', 'no call (100 ms, baseline)', '', b.n, fmt(b.p50), fmt(b.p90), fmt(b.max), '', '']);
    rows.push([`pause baseline (longest gap in 100 ms, no call), ${name}`, `p50 ${fmt(b.p50)} ms, max ${fmt(b.max)} (n=${b.n})`, '', '']);
  }
  return { rows, data, table };
}

const HEADER = ['app', 'driven by', 'call', 'interval', 'n', 'stall p50 ms', 'p90', 'max', 'CDP rtt p50 ms', 'reply KiB'];

function printDetail(table) {
  process.stdout.write('Event-loop stall per call: the longest gap between the target\'s 1 ms ticks from send to reply.\n' +
    'direct = the bench speaks CDP in the agent\'s order; isoprofd = the daemon itself, from its debug log; peer = @pyroscope/nodejs in-process.\n');
  common.printTable(HEADER, table);
}

async function run(ctx) {
  if (typeof WebSocket === 'function') {
    const r = await measure(ctx);
    printDetail(r.table);
    return { rows: r.rows, data: r.data };
  }
  // Node 20 has WebSocket only behind a flag: measure in a child that has it.
  const opts = {};
  for (const k of ['pauses-reps', 'pauses-window', 'pauses-intervals', 'pauses-funcs']) {
    const v = ctx.opt(k, undefined);
    if (v !== undefined) opts[k] = v;
  }
  const c = common.start(process.execPath, ['--experimental-websocket', __filename], {
    env: { PAUSES_CHILD: JSON.stringify({ build: ctx.bin.build, quick: ctx.quick, opts }) },
  });
  let errBuf = '';
  c.stderr.on('data', (d) => {
    errBuf += d;
    let i;
    while ((i = errBuf.indexOf('\n')) >= 0) { ctx.log(errBuf.slice(0, i)); errBuf = errBuf.slice(i + 1); }
  });
  const { code } = await c.exited;
  if (code !== 0) throw new Error(`pauses child exited ${code}: ${c.err.slice(-1500)}`);
  const r = JSON.parse(c.out);
  printDetail(r.table);
  return { rows: r.rows, data: r.data };
}

module.exports = { name: 'pauses', title: 'target pauses: event-loop stalls of Profiler.start/stop and heap windows', run };

if (require.main === module && process.env.PAUSES_CHILD) {
  const a = JSON.parse(process.env.PAUSES_CHILD);
  const ctx = {
    bin: common.binaries(a.build),
    quick: a.quick,
    opt: (k, def) => (a.opts[k] === undefined ? def : a.opts[k]),
    log: (m) => process.stderr.write(m + '\n'),
  };
  measure(ctx).then((r) => { process.stdout.write(JSON.stringify(r)); process.exit(0); },
    (e) => { process.stderr.write(`${e.stack || e}\n`); process.exit(1); });
}
