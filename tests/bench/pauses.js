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
//   budget  the cost budget (sampling.budget) against today's fixed
//           schedule. Three app sizes (200, 20000 and 200000 functions)
//           one after another; for each, copies of the app (the cells),
//           one profiled by an isoprofd with pause_share 100% and cold
//           windows (the fixed schedule: nothing stretched, nothing
//           deferred), the others by isoprofds with the default budget,
//           cold windows and the shipped mode (auto), all at the same time.
//           Concurrently rather than interleaved: the plan is state the
//           daemon learns from its first windows, and for a costly app its
//           periods are tens of minutes, so short alternating segments
//           would measure mostly the learning (a fresh daemon each), and
//           segments long enough to hold a stretched period leave too few
//           pairs for a neighbour's noise to average out. Side by side, a
//           busy neighbour (these machines are shared) hits both cells at
//           the same moments. The price: the two copies share the two
//           cores, so a stall that burns CPU in one (a 200k start, a heap
//           window's GC) can lengthen a gap in the other when it falls in
//           one of its calls' spans; that noise falls on both cells alike.
//           Time is scaled by K: the defaults (read from isoprofd --help)
//           with every period and duration (max_duration too) / K and
//           pause_share x K; max_pause is a stall and stays, and so do
//           jitter and memory_poll (the poll is not a window). A start's
//           or heap window's stall does not depend on the scale, so the
//           plan's factor for those costs is the one of real time. A
//           stop's stall is that of a window K times shorter: as far as it
//           is a fixed cost the plan is again real time's, as far as it
//           grows with the window the scaled plan weighs it up to K times
//           less. Shares and windows per hour are converted back to real
//           time (/ K), periods and window lengths too (x K).
//           The measure: the daemon's /metrics every 50 ms; when a call's
//           count in isoprof_pause_seconds moves, that call was answered
//           since the previous poll and its round trip is the sum's step,
//           so its stall lies in [previous poll - round trip, this poll].
//           The app's longest tick gap in that span, less its mean gap
//           with no call (measured before the daemon starts), is the
//           call's in-target stall. Spans that overlap are charged their k
//           longest gaps and say nothing per call. Per cell: the share of
//           wall time so stalled and the longest stall; the daemon's own
//           /status budget (spent_share, planned_share, pauses p50 and max
//           per call, factor, deferred); CPU and heap windows per hour, in
//           the run and in the plan; per call type, round trip / in-target
//           stall (the ratio of their medians over the calls alone in
//           their span). The run's figures include each cell's first
//           windows, made before anything was measured, which weigh more
//           the shorter the run: the "plan" rows are the steady state.
//   warm    cold windows beside warm ones (sampling.cpu.mode, agent/daemon/
//           warm.h) on one app per size (200, 20000, 200000 functions): the
//           bench drives CDP as the agent does, a few cold windows
//           (setSamplingInterval, start, the window, stop), then the
//           keep-alive's start (Runtime.evaluate of console.profile: one
//           cold start), as many warm windows (start, the window, stop:
//           the keep-alive's profiler samples them), a rotation (console.
//           profile(next); console.profileEnd(current)) and the end. Per
//           call, the in-target stall as in direct; and what auto picks
//           under the default schedule (cold start + stop against the
//           sampler's 6.4 ms/s at 10 ms over the 50 s between windows).
//   snapshot  what a heap snapshot costs: an app holding 32, 64 and 128
//           MiB of live heap (a Map of session records), snapshotted by
//           the bench as the agent does (HeapProfiler.takeHeapSnapshot,
//           chunks as events); the stall, the JSON size and node count,
//           the target's peak RSS during the call above its RSS before;
//           then bench_heapsnap turns the first snapshot of each size into
//           the retained profile (time, peak RSS per million nodes).
//
// Options (bench.js --NAME VALUE):
//   --pauses-parts LIST           the parts to run (direct,daemon,peer,budget,snapshot)
//   --pauses-reps N               CPU windows per app and interval at 10 ms (5; quick 2)
//   --pauses-window MS            length of a direct CPU window (10000 = the default
//                                 sampling.cpu.duration; quick 2000)
//   --pauses-intervals LIST       sampling intervals (10ms,1ms)
//   --pauses-funcs N              functions of the big app (20000)
//   --pauses-budget-scale K       budget: time / K (10; 1 = real time: 10 s windows
//                                 every minute, a heap window every 5 minutes)
//   --pauses-budget-seconds S     budget: how long each pair runs (240; quick 40),
//                                 S x K seconds of real time
//   --pauses-budget-funcs LIST    budget: the app sizes (200,20000,200000)
//   --pauses-budget-cells LIST    budget: the cells run side by side, each on its own
//                                 copy of the app (fixed,budget-cold,budget; quick
//                                 fixed,budget): fixed = pause_share 100 %, cold
//                                 windows; budget-cold = the default budget, cold
//                                 windows; budget = the defaults as shipped
//                                 (sampling.cpu.mode auto); budget-warm = the
//                                 default budget, warm windows
//   --pauses-budget-ready S       budget: how long an app may take to start (600;
//                                 two 200k apps take about a minute here)
//   --pauses-warm-funcs LIST      warm: the app sizes (200,20000,200000; quick 200 and
//                                 --pauses-funcs)
//   --pauses-warm-reps N          warm: windows of each kind per app (4; quick 1)
//   --pauses-warm-window MS       warm: window length (2000; quick 1000)
//   --pauses-snapshot-mib LIST    snapshot: the live heaps, MiB (32,64,128; quick 16)
//   --pauses-snapshot-reps N      snapshot: snapshots per size (3; quick 1)
//
// It needs the global WebSocket (node --experimental-websocket on Node 20):
// run() re-runs this file in a child node with the flag when it is missing.
'use strict';
const { spawnSync } = require('node:child_process');
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
async function startApp(env, inspect = true, limitMs = 120000) {
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
  }, limitMs, `pauses-app (${env.FUNCS} functions) to start`);
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
  const handlers = new Map(); // event method -> fn(params, bytes)
  ws.onmessage = (m) => {
    const t1 = mono();
    const data = typeof m.data === 'string' ? m.data : Buffer.from(m.data).toString();
    const r = JSON.parse(data);
    if (r.id === undefined) {
      const h = handlers.get(r.method);
      if (h) h(r.params, data.length);
      return;
    }
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
    on(method, fn) { handlers.set(method, fn); },
    close() { ws.close(); },
  };
}

// --- snapshot: HeapProfiler.takeHeapSnapshot at a given live heap ---------

// The target's VmRSS and VmHWM (bytes), from /proc.
function procMem(pid) {
  const st = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k) => parseInt((new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(st) || [])[1] || 'NaN', 10) * 1024;
  return { rss: kb('VmRSS'), hwm: kb('VmHWM') };
}

// For each live heap size: an app holding that much (LIVE_MIB), then reps
// snapshots as the agent takes them (HeapProfiler.takeHeapSnapshot, the
// chunks as events, the reply after the last one). Per snapshot: the
// target's stall (the longest tick gap from send to reply: V8 builds and
// serializes the snapshot on the JS thread), the CDP round trip, the JSON
// bytes and node count, and the target's extra memory: its peak RSS
// during the call (VmHWM, reset before it through /proc/PID/clear_refs)
// above its RSS before, and what it still holds after. The first
// snapshot of each size is written to a file and bench_heapsnap --file
// measures the agent's side on it: parse, dominators and retained pprof,
// time and peak RSS, on a real heap.
async function snapshotPart(ctx, o) {
  const out = [];
  for (const mib of o.sizes) {
    ctx.log(`snapshot: starting an app with ${mib} MiB of live heap`);
    const app = await startApp({ FUNCS: '200', LIVE_MIB: String(mib) }, true, o.readyMs);
    const s = await cdp(app.wsUrl);
    await s.call('HeapProfiler.enable');
    const res = { live_mib: mib, records: app.info.live, snapshots: [] };
    const mem0 = await app.ask('mem');
    res.heap_used_mib = +(mem0.heapUsed / 1048576).toFixed(1);
    for (let r = 0; r < o.reps; r++) {
      await sleep(500);
      let bytes = 0, chunks = 0, nodes = NaN, file = null;
      if (r === 0 && o.convert) {
        file = path.join(o.dir, `live-${mib}.heapsnapshot`);
        fs.writeFileSync(file, '');
      }
      const fd = file ? fs.openSync(file, 'a') : null;
      s.on('HeapProfiler.addHeapSnapshotChunk', (p) => {
        if (chunks++ === 0) nodes = parseInt((/"node_count":(\d+)/.exec(p.chunk) || [])[1] || 'NaN', 10);
        bytes += Buffer.byteLength(p.chunk);
        if (fd !== null) fs.writeSync(fd, p.chunk);
      });
      try { fs.writeFileSync(`/proc/${app.pid}/clear_refs`, '5'); } catch (_) { /* peak not resettable: VmHWM is then the process's lifetime peak */ }
      const before = procMem(app.pid);
      const c = await s.call('HeapProfiler.takeHeapSnapshot', { reportProgress: false });
      const during = procMem(app.pid);
      if (fd !== null) fs.closeSync(fd);
      await sleep(15); // the tick that ends the gap must have run
      const q = await stallIn(app, c.t0, c.t1);
      await sleep(1000);
      const after = procMem(app.pid);
      const snap = {
        stall_ms: +q.max.toFixed(1), rtt_ms: +(c.t1 - c.t0).toFixed(1), json_mib: +(bytes / 1048576).toFixed(1), chunks, nodes,
        rss_before_mib: +(before.rss / 1048576).toFixed(1),
        extra_peak_mib: +((during.hwm - before.rss) / 1048576).toFixed(1),
        extra_after_mib: +((after.rss - before.rss) / 1048576).toFixed(1),
      };
      res.snapshots.push(snap);
      ctx.log(`snapshot: ${mib} MiB live, ${r + 1}/${o.reps}: stall ${snap.stall_ms} ms, ${snap.json_mib} MiB of JSON, ${nodes} nodes, +${snap.extra_peak_mib} MiB peak`);
      if (file) {
        const b = spawnSync(path.join(ctx.bin.build, 'tests', 'bench', 'bench_heapsnap'), ['--child', file, '65536', 'spill', '0'], { encoding: 'utf8', timeout: 600000 });
        if (b.status !== 0) throw new Error(`bench_heapsnap on ${file}: ${b.error ? b.error.message : b.stderr}`);
        const v = b.stdout.trim().split(/\s+/).map(Number);
        // the --child line: nodes edges strings parse_s dom_s pprof_s snap dom_need dom hwm0 hwm_parse hwm_dom hwm_pprof ...
        res.convert = {
          nodes: v[0], edges: v[1], parse_s: v[3], dom_s: v[4], pprof_s: v[5], total_s: +(v[3] + v[4] + v[5]).toFixed(3),
          peak_mib: +((v[12] - v[9]) / 1048576).toFixed(1),
          peak_mib_per_m_nodes: +(((v[12] - v[9]) / 1048576) / (v[0] / 1e6)).toFixed(1),
        };
        fs.rmSync(file, { force: true });
      }
    }
    s.close();
    await common.stop(app);
    out.push(res);
  }
  return out;
}

function snapshotTable(list) {
  const fmt = (x) => common.fx(x, 1);
  const table = [];
  const rows = [];
  for (const r of list) {
    const st = dist(r.snapshots.map((x) => x.stall_ms));
    // The first snapshot of a process costs it most (V8's snapshot
    // structures and the inspector's message queue are new; later ones
    // reuse what the allocator kept), and the agent takes one an episode:
    // the first's peak is the one to plan for, the later ones' median is
    // shown beside it.
    const first = r.snapshots[0].extra_peak_mib;
    const peak = common.median(r.snapshots.slice(1).map((x) => x.extra_peak_mib));
    const json = common.median(r.snapshots.map((x) => x.json_mib));
    const nodes = common.median(r.snapshots.map((x) => x.nodes));
    const c = r.convert;
    table.push([`${r.live_mib} MiB`, r.heap_used_mib, st.n, fmt(st.p50), fmt(st.max), fmt(json), Math.round(nodes / 1000),
      fmt(first), r.snapshots.length > 1 ? fmt(peak) : '', fmt(common.median(r.snapshots.map((x) => x.extra_after_mib))),
      c ? common.fx(c.total_s, 2) : '', c ? fmt(c.peak_mib) : '']);
    rows.push([`snapshot pause, ${r.live_mib} MiB live`, `p50 ${fmt(st.p50)} ms, max ${fmt(st.max)} (n=${st.n}); ` +
      `${fmt(json)} MiB JSON, ${Math.round(nodes / 1000)}k nodes; target +${fmt(first)} MiB peak RSS at the first` +
      (r.snapshots.length > 1 ? `, +${fmt(peak)} at the later ones` : ''), '', '']);
    if (c) {
      rows.push([`snapshot -> retained profile, ${r.live_mib} MiB live (${Math.round(c.nodes / 1000)}k nodes)`,
        `${common.fx(c.total_s, 2)} s (parse ${common.fx(c.parse_s, 2)}, dominators ${common.fx(c.dom_s, 2)}, pprof ${common.fx(c.pprof_s, 2)}), ` +
        `peak ${fmt(c.peak_mib)} MiB (${fmt(c.peak_mib_per_m_nodes)} MiB per M nodes)`, '', '']);
    }
  }
  return { table, rows };
}

const SNAPSHOT_HEADER = ['live heap', 'heapUsed MiB', 'n', 'stall p50 ms', 'max', 'JSON MiB', 'k nodes', 'target +peak MiB first',
  'later', '+after MiB', 'retained profile s', 'its peak MiB'];

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

// --- warm: cold windows beside warm ones ---------------------------------

// The sampler's CPU per second at 10 ms (warm.h, WARM_SAMPLER_NS_PER_S) and
// the default schedule's gap between windows: auto's comparison.
const WARM_SAMPLER_MS_PER_S = 6.4;
const DEFAULT_GAP_S = 50;

async function warmApp(app, { reps, windowMs, log }) {
  const s = await cdp(app.wsUrl);
  const calls = [];
  const step = async (kind, method, params = {}) => {
    const r = await s.call(method, params);
    await sleep(15); // the tick that ends the gap must have run
    const q = await stallIn(app, r.t0, r.t1);
    calls.push({ kind, stall_ms: +q.max.toFixed(3), rtt_ms: +(r.t1 - r.t0).toFixed(3) });
    return r;
  };
  const started = [];
  s.on('Profiler.consoleProfileStarted', (p) => started.push(p.title));
  await step('Profiler.enable', 'Profiler.enable');
  for (let i = 0; i < reps; i++) {
    log(`warm: ${app.info.funcs} functions, cold window ${i + 1}/${reps}`);
    await step('cold setSamplingInterval', 'Profiler.setSamplingInterval', { interval: 10000 });
    await step('cold start', 'Profiler.start');
    await sleep(windowMs);
    await step('cold stop', 'Profiler.stop');
    await sleep(500);
  }
  await s.call('Profiler.setSamplingInterval', { interval: 10000 });
  await step('keep-alive start', 'Runtime.evaluate', { expression: 'console.profile("isoprof-bench-1")', silent: true });
  if (!started.includes('isoprof-bench-1')) throw new Error('the keep-alive did not start');
  for (let i = 0; i < reps; i++) {
    log(`warm: ${app.info.funcs} functions, warm window ${i + 1}/${reps}`);
    await sleep(500);
    await step('warm start', 'Profiler.start');
    await sleep(windowMs);
    await step('warm stop', 'Profiler.stop');
  }
  await step('keep-alive rotation', 'Runtime.evaluate',
    { expression: 'console.profile("isoprof-bench-2");console.profileEnd("isoprof-bench-1")', silent: true });
  await sleep(500);
  await step('keep-alive end', 'Runtime.evaluate', { expression: 'console.profileEnd("isoprof-bench-2")', silent: true });
  s.close();
  const med = (k) => common.median(calls.filter((c) => c.kind === k).map((c) => c.stall_ms));
  const cold = med('cold start') + med('cold stop');
  const sampler = WARM_SAMPLER_MS_PER_S * DEFAULT_GAP_S;
  return { funcs: app.info.funcs, calls, cold_ms: cold, warm_ms: med('warm start') + med('warm stop'), sampler_ms: sampler, auto: cold > sampler ? 'warm' : 'cold' };
}

async function warmPart(ctx, o) {
  const out = [];
  for (const funcs of o.funcs) {
    const app = await startApp({ FUNCS: String(funcs) }, true, 600000);
    try {
      out.push(await warmApp(app, { reps: o.reps, windowMs: o.windowMs, log: ctx.log }));
    } finally {
      await common.stop(app);
    }
  }
  return out;
}

const WARM_HEADER = ['functions', 'call', 'n', 'stall p50 ms', 'max', 'CDP rtt p50 ms'];

function warmTables(list) {
  const table = [];
  const rows = [];
  for (const a of list) {
    const kinds = [...new Set(a.calls.map((c) => c.kind))].filter((k) => k !== 'Profiler.enable');
    for (const k of kinds) {
      const cs = a.calls.filter((c) => c.kind === k);
      const d = dist(cs.map((c) => c.stall_ms));
      table.push([a.funcs, k, d.n, common.fx(d.p50, 1), common.fx(d.max, 1), common.fx(common.median(cs.map((c) => c.rtt_ms)), 1)]);
    }
    rows.push([`window stall start+stop p50, ${a.funcs} functions, cold / warm`,
      `${common.fx(a.cold_ms, 1)} / ${common.fx(a.warm_ms, 1)} ms; auto picks ${a.auto} (sampler ${a.sampler_ms} ms a default period)`, '', '']);
  }
  return { table, rows };
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
    // would stretch it for the 20k app; the budget part measures that).
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

// --- budget: the pause budget against today's fixed schedule ---------------

const CALLS = ['start', 'stop', 'heap'];

// ns from a config duration ("10s", "5m", "100ms", "250us").
function durNs(s) {
  const m = /^(\d+(?:\.\d+)?)(ns|us|ms|s|m|h)$/.exec(String(s).trim());
  if (!m) throw new Error(`bad duration '${s}'`);
  return parseFloat(m[1]) * { ns: 1, us: 1e3, ms: 1e6, s: 1e9, m: 60e9, h: 3600e9 }[m[2]];
}

// The defaults of the options this part scales, from the binary's own
// option table (isoprofd --help), so "the default budget" is the one the
// daemon under test ships with.
function daemonDefaults(bin) {
  const r = spawnSync(bin.isoprofd, ['--help'], { encoding: 'utf8' });
  const text = `${r.stdout || ''}${r.stderr || ''}`;
  const get = (name) => {
    const m = new RegExp(`^\\s*${name.replace(/\./g, '\\.')}\\s+\\S+\\s+(\\S+)`, 'm').exec(text);
    if (!m) throw new Error(`isoprofd --help does not list ${name} (is ${bin.isoprofd} a build with sampling.budget?)`);
    return m[1];
  };
  const share = get('sampling.budget.pause_share');
  return {
    duration_ns: durNs(get('sampling.cpu.duration')),
    period_ns: durNs(get('sampling.cpu.period')),
    heap_period_ns: durNs(get('sampling.heap.period')),
    pause_share: parseFloat(share) / (share.endsWith('%') ? 100 : 1),
    max_pause_ns: durNs(get('sampling.budget.max_pause')),
    max_duration_ns: durNs(get('sampling.budget.max_duration')),
  };
}

// A cell's config at scale k: every period and duration / k, pause_share
// x k (100 % for the fixed schedule), max_pause as it is (a stall).
// The cells of the budget part: the share (fixed: 100 %) and the window
// mode each runs (null: the daemon's default).
const BUDGET_CELLS = {
  fixed: { fixed: true, mode: 'cold' },
  'budget-cold': { fixed: false, mode: 'cold' },
  budget: { fixed: false, mode: null },
  'budget-warm': { fixed: false, mode: 'warm' },
};

function budgetConfig(def, k, cell, store, port) {
  const d = (ns) => `${Math.max(1, Math.round(ns / k / 1000))}us`;
  const share = cell.fixed ? 1 : Math.min(1, def.pause_share * k);
  const mode = cell.mode ? `, mode: ${cell.mode}` : '';
  return [
    `store: {path: ${JSON.stringify(store)}}`,
    // memory_limit far above the app's heap: no memory episode, whose heap
    // windows the budget does not defer.
    `targets: [{inspector: "127.0.0.1:${port}", worker: "budget", memory_limit: 64GiB}]`,
    'sampling:',
    `  cpu: {duration: ${d(def.duration_ns)}, period: ${d(def.period_ns)}${mode}}`,
    `  heap: {period: ${d(def.heap_period_ns)}}`,
    `  budget: {pause_share: ${+(share * 100).toFixed(4)}%, max_pause: ${Math.round(def.max_pause_ns / 1000)}us, max_duration: ${d(def.max_duration_ns)}}`,
    'anomaly: {latency: {listen: ""}}',
    'log: {level: debug}', '',
  ].join('\n');
}

// One request to a daemon's control socket; resolves the body.
function control(sock, p, timeoutMs = 5000) {
  return new Promise((resolve, reject) => {
    const req = http.get({ socketPath: sock, path: p, host: 'isoprof', timeout: timeoutMs }, (res) => {
      let b = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { b += d; });
      res.on('end', () => (res.statusCode === 200 ? resolve(b) : reject(new Error(`${p}: HTTP ${res.statusCode}`))));
    });
    req.on('timeout', () => req.destroy(new Error(`${p}: no answer in ${timeoutMs} ms`)));
    req.on('error', reject);
  });
}

// isoprof_pause_seconds' sum (as ms) and count per call.
function pauseMetrics(text) {
  const out = {};
  for (const c of CALLS) {
    const sum = new RegExp(`^isoprof_pause_seconds_sum\\{call="${c}"\\} (\\S+)`, 'm').exec(text);
    const n = new RegExp(`^isoprof_pause_seconds_count\\{call="${c}"\\} (\\d+)`, 'm').exec(text);
    if (!sum || !n) throw new Error(`/metrics has no isoprof_pause_seconds for call="${c}"`);
    out[c] = { sum_ms: parseFloat(sum[1]) * 1000, count: parseInt(n[1], 10) };
  }
  return out;
}

// The app's loop with no call: the mean gap between ticks (what a gap is
// anyway, subtracted from every stall) and the longest gap in each 100 ms.
async function quietLoop(app) {
  await sleep(3000); // past the start's own settling
  const b0 = mono();
  await sleep(2200);
  const whole = await stallIn(app, b0, b0 + 2000);
  const longest = [];
  for (let i = 0; i < 20; i++) longest.push((await stallIn(app, b0 + i * 100, b0 + (i + 1) * 100)).max);
  return { mean_gap_ms: whole.n ? 2000 / whole.n : 1, longest_100ms: dist(longest) };
}

// Start isoprofd on app under one schedule and watch it: /metrics every
// pollMs; each call it answered between two polls (its count moved) is an
// event whose span on the app's clock is [previous poll sent - round trip,
// this poll answered], and whose round trip is the sum's step.
function startCell(name, app, bin, o, root) {
  const dir = path.join(root, name);
  fs.mkdirSync(dir);
  const store = path.join(dir, 'store');
  const cfgText = budgetConfig(o.def, o.scale, BUDGET_CELLS[name], store, app.port);
  fs.writeFileSync(path.join(dir, 'c.yaml'), cfgText);
  const cell = {
    name, app, config: cfgText, mode: BUDGET_CELLS[name].mode, sock: path.join(store, 'control.sock'), quiet: app.quiet,
    pending: [], events: [], clusters: [], log: [], logDropped: 0, prev: null, first: null,
    polls: 0, pollErrors: 0, done: false,
  };
  cell.d = common.start(bin.isoprofd, ['--config', path.join(dir, 'c.yaml')]);
  cell.t0 = mono();
  let buf = '';
  cell.d.stderr.on('data', (x) => {
    buf += x;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const l = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (!/msg="window plan changed"|msg="window deferred|level=(warn|error)|msg="anomaly|msg="target (attached|detached)"/.test(l)) continue;
      if (cell.log.length < 400) cell.log.push(l);
      else cell.logDropped++;
    }
  });
  cell.polling = (async () => {
    while (!cell.done) {
      const a = mono();
      let m = null;
      try {
        m = pauseMetrics(await control(cell.sock, '/metrics'));
        cell.polls++;
      } catch (e) {
        if (cell.d.exitCode !== null) throw new Error(`isoprofd (${name}) exited: ${cell.d.err.slice(-1500)}`);
        cell.pollErrors++;
        cell.lastPollError = String(e.message || e);
      }
      const b = mono();
      if (m && cell.prev) {
        for (const c of CALLS) {
          const n = m[c].count - cell.prev.m[c].count;
          if (n <= 0) continue;
          const rtt = m[c].sum_ms - cell.prev.m[c].sum_ms;
          cell.pending.push({ call: c, n, rtt_ms: +rtt.toFixed(3), from: cell.prev.a - rtt - 1, to: b + 1 });
        }
      }
      if (m) {
        if (!cell.first) cell.first = m; // calls before it (none, normally) are not attributed
        cell.prev = { a, b, m };
      }
      await sleep(Math.max(5, o.pollMs - (mono() - a)));
    }
  })();
  cell.attributing = (async () => {
    while (!cell.done) {
      await attribute(cell, o.settleMs);
      await sleep(1000);
    }
  })();
  return cell;
}

// Put the events whose spans are settled on the app's clock. Events whose
// spans overlap form a cluster; a cluster of k calls is charged its k
// longest gaps (less the mean gap), and only a cluster of one call says
// which call stalled how long.
async function attribute(cell, settleMs) {
  const now = mono();
  while (cell.pending.length) {
    cell.pending.sort((x, y) => x.from - y.from); // the poll may add events while a query is out
    let j = 1, to = cell.pending[0].to;
    while (j < cell.pending.length && cell.pending[j].from < to) { to = Math.max(to, cell.pending[j].to); j++; }
    if (now < to + settleMs) break;
    const evs = cell.pending.splice(0, j);
    const k = evs.reduce((s, e) => s + e.n, 0);
    const cl = { from: +evs[0].from.toFixed(3), to: +to.toFixed(3), calls: evs.map((e) => e.call), stalls: [] };
    try {
      const q = await stallIn(cell.app, evs[0].from, to);
      const gaps = q.big.map(([, g]) => g);
      if (!q.big.some(([at]) => Math.abs(at - q.at) < 1e-3)) gaps.push(q.max);
      gaps.sort((x, y) => y - x);
      for (let i = 0; i < k; i++) cl.stalls.push(+Math.max(0, (gaps[i] || 0) - cell.quiet.mean_gap_ms).toFixed(3));
      if (evs.length === 1 && k === 1) {
        evs[0].gap_ms = +q.max.toFixed(3);
        evs[0].stall_ms = cl.stalls[0];
      } else {
        for (const e of evs) e.ambiguous = true;
      }
    } catch (e) {
      cl.lost = String(e.message || e);
      for (const ev of evs) ev.lost = true;
    }
    cell.clusters.push(cl);
    cell.events.push(...evs);
  }
}

async function finishCells(cells) {
  for (const c of cells) c.done = true;
  await Promise.all(cells.map((c) => c.polling));
  await Promise.all(cells.map((c) => c.attributing));
  for (const c of cells) {
    c.t1 = c.prev ? c.prev.b : mono();
    try {
      const st = JSON.parse(await control(c.sock, '/status'));
      const t = (st.targets || []).find((x) => x.worker === 'budget' && x.thread === 'main') || (st.targets || [])[0];
      c.status = { budget: t ? t.budget : null, cpu_mode: t ? t.cpu_mode : null, counters: st.counters, uptime_s: st.uptime_s, anomaly: t ? t.anomaly : null };
    } catch (e) {
      c.status = { error: String(e.message || e) };
    }
    await attribute(c, 0);
    // Every gap of the run, whatever caused it: what the attribution to
    // counted calls cannot see (a warm cell's keep-alive start and
    // rotations, GC) shows here.
    try {
      c.whole = await stallIn(c.app, c.t0, c.t1);
    } catch (e) {
      c.whole = { error: String(e.message || e) };
    }
    await common.stop(c.d);
  }
}

// One cell's figures; shares and rates in real time (the scaled run's / k).
function cellFigures(c, k) {
  const wallS = (c.t1 - c.t0) / 1000;
  const stalls = c.clusters.flatMap((cl) => cl.stalls);
  const share = stalls.reduce((s, x) => s + x, 0) / (wallS * 1000);
  const b = (c.status && c.status.budget) || {};
  const last = c.prev ? c.prev.m : null;
  const first = c.first || null;
  const count = (call) => (last ? last[call].count - (first ? first[call].count : 0) : NaN);
  const perCall = {};
  for (const call of CALLS) {
    const ev = c.events.filter((e) => e.call === call && e.stall_ms !== undefined);
    const st = ev.map((e) => e.stall_ms), rt = ev.map((e) => e.rtt_ms);
    const sp = b.pauses ? b.pauses[call] : null;
    perCall[call] = {
      n: ev.length,
      of: c.events.filter((e) => e.call === call).reduce((s, e) => s + e.n, 0),
      stall: dist(st),
      rtt: dist(rt),
      rtt_over_stall_p50s: st.length ? common.median(rt) / common.median(st) : NaN,
      status: sp,
    };
  }
  const periodS = b.period_ms * k / 1000, durS = b.duration_ms * k / 1000, heapS = b.heap_period_ms * k / 1000;
  // All the run's gaps over 2 ms (the app's ring), less the mean gap: the
  // share of wall time stalled and the stalls over 40 ms, per real hour.
  let all = null;
  if (c.whole && !c.whole.error) {
    const gaps = c.whole.big.map(([, g]) => Math.max(0, g - c.quiet.mean_gap_ms));
    const over = gaps.filter((g) => g > 40);
    all = {
      share: gaps.reduce((s, g) => s + g, 0) / (wallS * 1000),
      over_40ms: over.length, over_40ms_per_hour: over.length / (wallS / 3600) / k,
      longest_ms: gaps.length ? Math.max(...gaps) : 0,
    };
  }
  const cpuMode = c.status && c.status.cpu_mode ? c.status.cpu_mode : null;
  return {
    all_gaps: all ?? { error: c.whole ? c.whole.error : 'not measured' },
    cpu_mode: cpuMode ? { mode: cpuMode.mode, configured: cpuMode.configured, why: cpuMode.why, warm_windows: cpuMode.warm_windows, rotations: cpuMode.rotations } : null,
    mode_configured: c.mode || 'default',
    wall_s: +wallS.toFixed(1),
    scale: k,
    in_target: {
      share, longest_ms: stalls.length ? Math.max(...stalls) : 0, calls: stalls.length,
      ambiguous_clusters: c.clusters.filter((cl) => cl.calls.length > 1 || cl.stalls.length > 1).length,
      lost_clusters: c.clusters.filter((cl) => cl.lost).length,
      mean_gap_ms: c.quiet.mean_gap_ms, quiet_longest_100ms: c.quiet.longest_100ms,
    },
    daemon: {
      spent_share: b.spent_share / k, planned_share: b.planned_share / k, factor: b.factor, limited: b.limited,
      over_max_pause: b.over_max_pause, duration_capped: b.duration_capped, deferred: b.deferred, credit_ms: b.credit_ms,
      period_s: periodS, duration_s: durS, heap_period_s: heapS,
    },
    windows: {
      cpu: count('start'), heap: count('heap'),
      cpu_per_hour: count('start') / (wallS / 3600) / k, heap_per_hour: count('heap') / (wallS / 3600) / k,
      cpu_per_hour_plan: 3600 / periodS, heap_per_hour_plan: 3600 / heapS,
      cpu_seconds_per_hour_plan: 3600 / periodS * durS,
    },
    per_call: perCall,
    polls: c.polls, poll_errors: c.pollErrors,
  };
}

async function budgetPart(ctx, o) {
  const out = { scale: o.scale, seconds: o.seconds, defaults: o.def, poll_ms: o.pollMs, apps: {} };
  for (const funcs of o.funcs) {
    const name = funcs >= 1000 ? `${Math.round(funcs / 1000)}k fns` : `${funcs} fns`;
    const env = { FUNCS: String(funcs) };
    ctx.log(`budget: starting ${o.cells.length} ${funcs}-function apps (up to ${o.readyMs / 1000} s)`);
    const t0 = Date.now();
    const apps = await Promise.all(o.cells.map(() => startApp(env, true, o.readyMs)));
    const res = { funcs, ready_s: +((Date.now() - t0) / 1000).toFixed(1) };
    try {
      const quiet = await Promise.all(apps.map(quietLoop));
      apps.forEach((a, i) => { a.quiet = quiet[i]; });
      const root = common.tmpdir('pauses-budget');
      // Every cell at once, each on its own copy of the app.
      const cells = o.cells.map((cn, i) => startCell(cn, apps[i], ctx.bin, o, root));
      ctx.log(`budget: ${name}: ${o.cells.join(', ')} side by side for ${o.seconds} s (scale ${o.scale}: ${(o.seconds * o.scale / 60).toFixed(0)} min of real time)`);
      const end = Date.now() + o.seconds * 1000;
      while (Date.now() < end) {
        await sleep(Math.min(60000, end - Date.now()));
        const say = [];
        for (const c of cells) {
          try {
            const st = JSON.parse(await control(c.sock, '/status'));
            const t = st.targets && st.targets[0];
            const b = t && t.budget;
            const m = t && t.cpu_mode ? ` ${t.cpu_mode.mode}` : '';
            say.push(b ? `${c.name}${m} factor ${b.factor} cpu ${b.pauses.start.count} heap ${b.pauses.heap.count} deferred ${b.deferred}` : `${c.name} not attached`);
          } catch (e) { say.push(`${c.name} ${e.message}`); }
        }
        ctx.log(`budget: ${name}: ${Math.round((o.seconds * 1000 - (end - Date.now())) / 1000)} s: ${say.join('; ')}`);
      }
      await finishCells(cells);
      for (const c of cells) {
        res[c.name] = {
          figures: cellFigures(c, o.scale), config: c.config, status: c.status, log: c.log, log_dropped: c.logDropped,
          events: c.events, clusters: c.clusters, last_poll_error: c.lastPollError || null,
        };
      }
    } finally {
      await Promise.all(apps.map((a) => common.stop(a)));
    }
    out.apps[name] = res;
  }
  out.cells = o.cells;
  return out;
}

// The side-by-side table, the per-call table and the summary rows.
function budgetTables(b) {
  const pct = (x) => (Number.isFinite(x) ? `${(x * 100).toPrecision(3)}%` : '-');
  const num = (x, d = 1) => common.fx(x, d);
  const names = b.cells || ['fixed', 'budget'];
  const others = names.filter((n) => n !== 'fixed');
  const side = [];
  const calls = [];
  const rows = [];
  for (const [name, a] of Object.entries(b.apps)) {
    const cells = names.filter((n) => a[n]);
    if (!cells.length) continue;
    const fig = (n) => a[n].figures;
    const line = (what, get, fmt) => {
      const xs = cells.map((n) => get(fig(n)));
      side.push([name, what, ...xs.map(fmt)]);
    };
    line('window mode (auto: what it chose)', (f) => (f.cpu_mode ? `${f.cpu_mode.mode}${f.mode_configured === 'default' ? ` (${f.cpu_mode.configured})` : ''}` : f.mode_configured), String);
    line('stall share, in target (counted calls)', (f) => f.in_target.share / f.scale, pct);
    line('stall share, in target (every gap)', (f) => (f.all_gaps.share === undefined ? NaN : f.all_gaps.share / f.scale), pct);
    line('stalls over 40 ms per hour (every gap)', (f) => f.all_gaps.over_40ms_per_hour, num);
    line('stall share, daemon (spent_share)', (f) => f.daemon.spent_share, pct);
    line('stall share, daemon\'s plan', (f) => f.daemon.planned_share, pct);
    line('longest stall in target, ms (counted calls)', (f) => f.in_target.longest_ms, num);
    line('longest gap in target, ms (every gap)', (f) => f.all_gaps.longest_ms, num);
    line('CPU windows/h, run', (f) => f.windows.cpu_per_hour, num);
    line('CPU windows/h, plan', (f) => f.windows.cpu_per_hour_plan, num);
    line('heap windows/h, run', (f) => f.windows.heap_per_hour, num);
    line('heap windows/h, plan', (f) => f.windows.heap_per_hour_plan, num);
    line('CPU window length s, plan', (f) => f.daemon.duration_s, num);
    line('CPU seconds recorded/h, plan', (f) => f.windows.cpu_seconds_per_hour_plan, (x) => num(x, 0));
    line('plan factor', (f) => f.daemon.factor, (x) => num(x, 2));
    line('windows deferred (run)', (f) => f.daemon.deferred, (x) => num(x, 0));
    line('plan flags', (f) => [f.daemon.limited ? 'limited' : 'not limited', ...(f.daemon.over_max_pause || []).map((c) => `${c} over max_pause`),
      ...(f.daemon.duration_capped ? ['duration capped'] : [])].join(', '), String);
    line('no call: longest gap in 100 ms, p50 / max ms', (f) => `${num(f.in_target.quiet_longest_100ms.p50)} / ${num(f.in_target.quiet_longest_100ms.max)}`, String);
    for (const sched of cells) {
      const f = fig(sched);
      for (const call of CALLS) {
        const p = f.per_call[call];
        calls.push([name, sched, call, `${p.n}/${p.of}`, num(p.stall.p50), num(p.stall.max), num(p.rtt.p50), num(p.rtt.max),
          num(p.rtt_over_stall_p50s, 2), p.status ? num(p.status.p50_ms) : '-', p.status ? num(p.status.max_ms) : '-']);
      }
    }
    if (!a.fixed) continue;
    const F = fig('fixed');
    for (const o of others.filter((n) => a[n])) {
      const B = fig(o);
      const r = (call) => common.fx(B.per_call[call].rtt_over_stall_p50s, 2);
      const mode = B.cpu_mode ? ` ${B.cpu_mode.mode}` : '';
      rows.push([`${o}${mode} vs fixed schedule, ${name} (scale ${b.scale})`,
        `stall share ${pct(F.in_target.share / F.scale)} -> ${pct(B.in_target.share / B.scale)}, CPU windows/h ${num(F.windows.cpu_per_hour)} -> ${num(B.windows.cpu_per_hour)} (plan ${num(B.windows.cpu_per_hour_plan)}), heap/h ${num(F.windows.heap_per_hour)} -> ${num(B.windows.heap_per_hour)}, stalls > 40 ms/h ${num(F.all_gaps.over_40ms_per_hour)} -> ${num(B.all_gaps.over_40ms_per_hour)}`, '', '']);
      rows.push([`round trip / in-target stall, ${name} (${o})`, `start ${r('start')}, stop ${r('stop')}, heap ${r('heap')}`, '', '']);
    }
  }
  return { side, calls, rows, header: ['app', 'figure (real time)', ...names] };
}

const BUDGET_CALLS = ['app', 'schedule', 'call', 'n/calls', 'in-target stall p50 ms', 'max', 'round trip p50 ms', 'max', 'rtt/stall (p50s)', 'status p50', 'status max'];

// --- the section --------------------------------------------------------

async function measure(ctx) {
  const quick = ctx.quick;
  const parts = String(ctx.opt('pauses-parts', 'direct,daemon,peer,warm,budget,snapshot')).split(',').map((x) => x.trim()).filter(Boolean);
  const PARTS = ['direct', 'daemon', 'peer', 'warm', 'budget', 'snapshot'];
  for (const p of parts) if (!PARTS.includes(p)) throw new Error(`--pauses-parts: unknown part '${p}' (${PARTS.join(', ')})`);
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
  cfg.parts = parts;
  const data = { config: cfg, node: process.version, apps: {} };
  const t0 = Date.now();
  const has = (p) => parts.includes(p);
  for (const a of has('direct') || has('daemon') || has('peer') ? cfg.apps : []) {
    const env = { FUNCS: String(a.funcs) };
    const res = { funcs: a.funcs };
    if (has('direct') || (has('daemon') && a.funcs === bigFuncs)) {
      const app = await startApp(env);
      res.warm = app.info.warm;
      if (has('direct')) res.direct = await direct(app, { intervals: cfg.intervals, reps: cfg.reps, repsFine: cfg.reps_fine, windowMs: cfg.window_ms, log: ctx.log });
      if (has('daemon') && a.funcs === bigFuncs) res.daemon = await viaDaemon(app, ctx.bin, { seconds: cfg.daemon_seconds, windowS: cfg.daemon_window_s, log: ctx.log });
      await common.stop(app);
    }
    if (has('peer')) {
      try {
        res.peer = await peer(env, { flushMs: cfg.peer_flush_ms, flushes: cfg.peer_flushes, log: ctx.log });
      } catch (e) {
        res.peer = { error: String(e.message || e) };
        ctx.log(`peer not measured: ${res.peer.error}`);
      }
    }
    data.apps[a.name] = res;
  }
  if (has('warm')) {
    data.warm = await warmPart(ctx, {
      funcs: String(ctx.opt('pauses-warm-funcs', quick ? `200,${bigFuncs}` : '200,20000,200000')).split(',').map((x) => parseInt(x, 10)).filter((x) => x > 0),
      reps: parseInt(ctx.opt('pauses-warm-reps', quick ? '1' : '4'), 10),
      windowMs: parseInt(ctx.opt('pauses-warm-window', quick ? '1000' : '2000'), 10),
    });
  }
  if (has('budget')) {
    const scale = parseFloat(ctx.opt('pauses-budget-scale', '10'));
    if (!(scale >= 1 && scale <= 100)) throw new Error(`--pauses-budget-scale ${scale}: 1..100`);
    const o = {
      scale,
      seconds: parseFloat(ctx.opt('pauses-budget-seconds', quick ? '40' : '240')),
      funcs: String(ctx.opt('pauses-budget-funcs', '200,20000,200000')).split(',').map((x) => parseInt(x, 10)).filter((x) => x > 0),
      readyMs: parseFloat(ctx.opt('pauses-budget-ready', '600')) * 1000,
      cells: String(ctx.opt('pauses-budget-cells', quick ? 'fixed,budget' : 'fixed,budget-cold,budget')).split(',').map((x) => x.trim()).filter(Boolean),
      pollMs: 50,
      settleMs: 15000,
      def: daemonDefaults(ctx.bin),
    };
    for (const c of o.cells) if (!BUDGET_CELLS[c]) throw new Error(`--pauses-budget-cells: unknown cell '${c}' (${Object.keys(BUDGET_CELLS).join(', ')})`);
    if (new Set(o.cells).size !== o.cells.length || !o.cells.length) throw new Error('--pauses-budget-cells: each cell once, at least one');
    data.budget = await budgetPart(ctx, o);
  }
  if (has('snapshot')) {
    const sizes = String(ctx.opt('pauses-snapshot-mib', quick ? '16' : '32,64,128')).split(',').map(Number).filter((x) => x > 0);
    const dir = fs.mkdtempSync(path.join(require('node:os').tmpdir(), 'isoprof-bench-snap-'));
    try {
      data.snapshot = await snapshotPart(ctx, {
        sizes, reps: parseInt(ctx.opt('pauses-snapshot-reps', quick ? '1' : '3'), 10), dir, convert: true,
        readyMs: 300000,
      });
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }
  data.seconds = +((Date.now() - t0) / 1000).toFixed(1);

  // Per app, per call kind and interval: the stall distribution.
  const fmt = (x) => common.fx(x, 1);
  const table = [];
  const rows = [];
  const groups = (app) => {
    const g = new Map();
    const add = (key, v) => { if (!g.has(key)) g.set(key, { stalls: [], rtts: [], bytes: [] }); const e = g.get(key); e.stalls.push(v.stall_ms); if (v.rtt_ms !== undefined) e.rtts.push(v.rtt_ms); if (v.bytes) e.bytes.push(v.bytes); };
    if (app.direct) for (const c of app.direct.calls) add(`direct|${c.kind}|${c.interval}`, c);
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
    if (!app.direct) continue;
    const b = dist(app.direct.baseline_100ms_max_gap);
    table.push([name, 'direct', 'no call (100 ms, baseline)', '', b.n, fmt(b.p50), fmt(b.p90), fmt(b.max), '', '']);
    rows.push([`pause baseline (longest gap in 100 ms, no call), ${name}`, `p50 ${fmt(b.p50)} ms, max ${fmt(b.max)} (n=${b.n})`, '', '']);
  }
  let budget = null;
  if (data.budget) {
    budget = budgetTables(data.budget);
    budget.scale = data.budget.scale;
    budget.seconds = data.budget.seconds;
    rows.push(...budget.rows);
  }
  let warm = null;
  if (data.warm) {
    warm = warmTables(data.warm);
    rows.push(...warm.rows);
  }
  let snapshot = null;
  if (data.snapshot) {
    snapshot = snapshotTable(data.snapshot);
    rows.push(...snapshot.rows);
  }
  return { rows, data, table, budget, warm, snapshot };
}

const HEADER = ['app', 'driven by', 'call', 'interval', 'n', 'stall p50 ms', 'p90', 'max', 'CDP rtt p50 ms', 'reply KiB'];

function printDetail(r) {
  if (r.table.length) {
    process.stdout.write('Event-loop stall per call: the longest gap between the target\'s 1 ms ticks from send to reply.\n' +
      'direct = the bench speaks CDP in the agent\'s order; isoprofd = the daemon itself, from its debug log; peer = @pyroscope/nodejs in-process.\n');
    common.printTable(HEADER, r.table);
  }
  if (r.budget) {
    const b = r.budget;
    process.stdout.write(`\nThe pause budget (defaults) against the fixed schedule (pause_share 100%, cold windows), side by side, ${b.seconds} s a run ` +
      `at scale ${b.scale}: periods and durations / ${b.scale}, pause_share x ${b.scale}; shares and rates below are converted back to real time ` +
      `(/ ${b.scale}), stalls are absolute. In-target stall = the longest tick gap of the call's span less the app's mean gap.\n`);
    common.printTable(b.header, b.side);
    process.stdout.write(`\nPer call: in-target stall (the app's clock) against the daemon's round trip for the same calls (n = calls alone in their span / all), ` +
      'and the daemon\'s own /status p50 and max (its latest 64).\n');
    common.printTable(BUDGET_CALLS, b.calls);
  }
  if (r.warm) {
    process.stdout.write('\nCold windows beside warm ones (sampling.cpu.mode): the in-target stall per call (the app\'s 1 ms ticks), ' +
      'the keep-alive\'s own calls (Runtime.evaluate of console.profile) included.\n');
    common.printTable(WARM_HEADER, r.warm.table);
  }
  if (r.snapshot) {
    process.stdout.write('\nHeap snapshots (HeapProfiler.takeHeapSnapshot) of an app holding a Map of session records: the target\'s stall ' +
      '(send to reply), the JSON it streams, its peak RSS during the call above its RSS before, and what it holds a second after; ' +
      'then the agent\'s side on the first snapshot (bench_heapsnap: parse, dominators, retained pprof, in a fresh process).\n');
    common.printTable(SNAPSHOT_HEADER, r.snapshot.table);
  }
}

async function run(ctx) {
  if (typeof WebSocket === 'function') {
    const r = await measure(ctx);
    printDetail(r);
    return { rows: r.rows, data: r.data };
  }
  // Node 20 has WebSocket only behind a flag: measure in a child that has it.
  const opts = {};
  for (const k of ['pauses-reps', 'pauses-window', 'pauses-intervals', 'pauses-funcs', 'pauses-parts',
    'pauses-budget-scale', 'pauses-budget-seconds', 'pauses-budget-funcs', 'pauses-budget-ready', 'pauses-budget-cells',
    'pauses-snapshot-mib', 'pauses-snapshot-reps', 'pauses-warm-funcs', 'pauses-warm-reps', 'pauses-warm-window']) {
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
  printDetail(r);
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
