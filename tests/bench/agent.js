// Section "agent": what isoprofd itself costs: its CPU and RSS by isolate count.
//
// isoprofd with the default schedule (a config of only the store, the
// targets and the log level: CPU windows of 10 s every 60 s at 10 ms, a
// heap window every 5 min, memory polls every second) against:
//   node-N     N Node processes (workloads/agent-node.js: ~1.5 ms of JS
//              every 150 ms), one target entry per inspector port;
//   workerd-N  one workerd process serving N worker services
//              (workloads/agent-worker.js, ~1 ms of JS per request, each
//              requested every 200 ms by this process), one inspector
//              port listing N targets.
// For each: the daemon's CPU (utime + stime of /proc/<pid>/stat) over the
// measurement, which starts once every target is attached and lasts at
// least two schedule periods; VmRSS sampled every second (median) and
// VmHWM at the end; windows stored and the daemon's counters (from
// `isoprof status --json` at the end). The measurement is cut into
// slices of one period, whose CPU shows the spread.
//
// The latency listener (anomaly.latency.listen, UDP 127.0.0.1:8125 by
// default) is turned off so that the daemon cannot collide with another
// one on the same machine; with no DogStatsD traffic it costs nothing.
//
// Options (bench.js --NAME VALUE):
//   --agent-configs LIST  e.g. node-1,node-10,node-50,workerd-10,workerd-50 (the default)
//   --agent-seconds S     measurement per config (125: two periods and the first
//                         window's jitter; quick 15)
//   --agent-schedule D/P/I  CPU window duration/period/interval (the default:
//                         the embedded one; quick 2s/5s/10ms)
'use strict';
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const common = require('./common');

const NODE_APP = path.join(__dirname, 'workloads', 'agent-node.js');
const WORKER = path.join(__dirname, 'workloads', 'agent-worker.js');
const THREADS_APP = path.join(__dirname, 'workloads', 'agent-threads.js');
const WORKERD_COMPAT_DATE = '2024-09-23'; // workerd rejects dates after its own release
const MIB = 1024;

function workerdBinary() {
  const r = spawnSync(path.join(common.ROOT, 'packaging', 'setup.sh'), ['--print-runtimes'], { encoding: 'utf8' });
  const m = /^workerd=(.+)$/m.exec(r.stdout || '');
  if (!m || !fs.existsSync(m[1])) throw new Error('workerd not found: run packaging/setup.sh --runtimes');
  return m[1];
}

function getJson(port, p) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: p, timeout: 3000 }, (res) => {
      let b = '';
      res.on('data', (d) => { b += d; });
      res.on('end', () => { try { resolve(JSON.parse(b)); } catch (e) { reject(e); } });
    });
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error('timeout')));
  });
}

async function freePort() {
  const srv = http.createServer();
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const p = srv.address().port;
  await new Promise((r) => srv.close(r));
  return p;
}

// --- targets ------------------------------------------------------------

async function startNodes(n) {
  const kids = [];
  for (let i = 0; i < n; i += 10) {
    const batch = [];
    for (let j = i; j < Math.min(n, i + 10); j++) batch.push(common.startNode(NODE_APP));
    kids.push(...await Promise.all(batch));
  }
  return {
    kids,
    targets: kids.map((k, i) => ({ inspector: `127.0.0.1:${k.port}`, worker: `node-${i}` })),
    isolates: n,
    stop: async () => { await Promise.all(kids.map((k) => common.stop(k, 'SIGKILL'))); },
  };
}

async function startWorkerd(n) {
  const bin = workerdBinary();
  const dir = common.tmpdir('agent-workerd');
  fs.copyFileSync(WORKER, path.join(dir, 'worker.js'));
  const ports = [];
  for (let i = 0; i < n; i++) ports.push(await freePort());
  const names = ports.map((_, i) => `w${i}`);
  const capnp = [
    'using Workerd = import "/workerd/workerd.capnp";',
    'const config :Workerd.Config = (',
    `  services = [ ${names.map((s) => `(name = "${s}", worker = .w)`).join(', ')} ],`,
    `  sockets = [ ${names.map((s, i) => `(name = "${s}-http", address = "127.0.0.1:${ports[i]}", http = (), service = "${s}")`).join(', ')} ]`,
    ');',
    `const w :Workerd.Worker = ( modules = [ (name = "worker.js", esModule = embed "worker.js") ], compatibilityDate = "${WORKERD_COMPAT_DATE}" );`,
  ].join('\n');
  fs.writeFileSync(path.join(dir, 'config.capnp'), capnp);
  const iport = await freePort();
  const c = common.start(bin, ['serve', path.join(dir, 'config.capnp'), `--inspector-addr=127.0.0.1:${iport}`], { cwd: dir });
  await common.waitFor(async () => {
    if (c.exitCode !== null) throw new Error(`workerd exited: ${c.err.slice(-1500)}`);
    try { return (await getJson(iport, '/json/list')).length >= n; } catch (_) { return false; }
  }, 30000, `workerd to list ${n} targets`);
  // Light traffic: each worker is asked every 200 ms, staggered.
  const agent = new http.Agent({ keepAlive: true, maxSockets: n });
  let running = true;
  const loops = ports.map((p, i) => (async () => {
    await common.sleep((200 * i) / n);
    while (running) {
      const t = Date.now();
      await new Promise((resolve) => {
        const req = http.get({ host: '127.0.0.1', port: p, path: '/', agent, timeout: 2000 }, (res) => { res.resume(); res.on('end', resolve); });
        req.on('error', resolve);
        req.on('timeout', () => req.destroy());
      });
      await common.sleep(Math.max(0, 200 - (Date.now() - t)));
    }
  })());
  return {
    kids: [c],
    targets: [{ inspector: `127.0.0.1:${iport}` }],
    isolates: n,
    version: spawnSync(bin, ['--version'], { encoding: 'utf8' }).stdout.trim(),
    stop: async () => { running = false; agent.destroy(); await Promise.all(loops); await common.stop(c); },
  };
}

// --- one configuration --------------------------------------------------

// One Node process of n worker threads (each agent-node.js's load): n + 1
// isolates behind one inspector.
async function startThreads(n) {
  const k = await common.startNode(THREADS_APP, { env: { THREADS: String(n) } });
  return {
    kids: [k],
    targets: [{ inspector: `127.0.0.1:${k.port}`, worker: 'threads' }],
    isolates: n + 1,
    stop: async () => { await common.stop(k, 'SIGKILL'); },
  };
}

function status(bin, sock) {
  const r = spawnSync(bin.isoprof, ['status', '--socket', sock, '--json'], { encoding: 'utf8', timeout: 10000 });
  if (r.status !== 0) return null;
  try { return JSON.parse(r.stdout); } catch (_) { return null; }
}
function attachedCount(st) {
  if (!st || !Array.isArray(st.targets)) return 0;
  return st.targets.filter((t) => t.state === 'ready').length;
}

async function measureConfig(ctx, spec, { seconds, schedule, slice }) {
  const [kind, nStr] = spec.split('-');
  const n = parseInt(nStr, 10);
  const what = { node: `${n} Node processes`, threads: `one Node process of ${n} worker threads`, workerd: `workerd with ${n} workers` };
  ctx.log(`${spec}: starting ${what[kind]}`);
  const t = kind === 'node' ? await startNodes(n) : kind === 'threads' ? await startThreads(n) : await startWorkerd(n);
  const dir = common.tmpdir('agent');
  const sock = path.join(dir, 'control.sock');
  const lines = [
    `store: {path: ${JSON.stringify(path.join(dir, 'store'))}}`,
    'targets:',
    ...t.targets.map((x) => `  - {${Object.entries(x).map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join(', ')}}`),
  ];
  // A schedule as written: no pause budget stretching it.
  if (schedule) lines.push(`sampling: {cpu: {duration: ${schedule.duration}, period: ${schedule.period}, interval: ${schedule.interval}}, budget: {pause_share: 100%}}`);
  lines.push(`control: {socket: ${JSON.stringify(sock)}}`, 'anomaly: {latency: {listen: ""}}', 'log: {level: warn}', '');
  const cfg = lines.join('\n');
  fs.writeFileSync(path.join(dir, 'isoprof.yaml'), cfg);
  const d = common.start(ctx.bin.isoprofd, ['--config', path.join(dir, 'isoprof.yaml')]);
  const tStart = Date.now();
  // Attached: every target READY per the control socket (one status call a
  // second until then; none during the measurement).
  let st = null;
  await common.waitFor(() => {
    if (d.exitCode !== null) throw new Error(`isoprofd exited: ${d.err.slice(-1500)}`);
    st = status(ctx.bin, sock);
    return attachedCount(st) >= t.isolates;
  }, 60000, `isoprofd to attach ${t.isolates} isolates`).catch((e) => {
    // What the daemon saw, so a run that could not attach says why.
    const states = st && Array.isArray(st.targets)
      ? st.targets.map((x) => `${x.worker || x.endpoint || '?'}:${x.state}`).join(', ')
      : 'no /status answer';
    ctx.log(`${spec}: ${e.message}; measuring anyway (${attachedCount(st)} attached). Targets: ${states.slice(0, 1500)}`);
    const tail = d.err.split('\n').filter(Boolean).slice(-10).join('\n  ');
    if (tail) ctx.log(`${spec}: isoprofd said:\n  ${tail}`);
  });
  const attachS = (Date.now() - tStart) / 1000;
  const attached = attachedCount(st);
  const cpuAttach = common.procCpu(d.pid);
  ctx.log(`${spec}: ${attachedCount(st)}/${t.isolates} attached after ${attachS.toFixed(1)} s; measuring ${seconds} s`);
  const t0 = Date.now();
  const cpu0 = common.procCpu(d.pid);
  const rss = [], anon = [], cpuMarks = [{ t: 0, cpu: cpu0 }];
  while (Date.now() - t0 < seconds * 1000) {
    await common.sleep(1000);
    const m = common.procMem(d.pid);
    rss.push(m.rss);
    anon.push(m.anon);
    const el = (Date.now() - t0) / 1000;
    if (el - cpuMarks[cpuMarks.length - 1].t >= slice) cpuMarks.push({ t: el, cpu: common.procCpu(d.pid) });
  }
  const cpu1 = common.procCpu(d.pid);
  const wall = (Date.now() - t0) / 1000;
  const mem = common.procMem(d.pid);
  // READY at the end too (a session dropped meanwhile is in its backoff;
  // null: the daemon did not answer)
  st = status(ctx.bin, sock);
  const attachedEnd = st ? attachedCount(st) : null;
  await common.stop(d, 'SIGTERM', 15000);
  await t.stop();
  const w = spawnSync(ctx.bin.isoprof, ['windows', '--store', path.join(dir, 'store'), '--json'], { encoding: 'utf8' });
  const wins = (w.stdout || '').split('\n').filter(Boolean).map((l) => { try { return JSON.parse(l); } catch (_) { return {}; } });
  const cpu = cpu1 - cpu0;
  const slices = [];
  for (let i = 1; i < cpuMarks.length; i++) slices.push(100 * (cpuMarks[i].cpu - cpuMarks[i - 1].cpu) / (cpuMarks[i].t - cpuMarks[i - 1].t));
  return {
    config: spec, runtime: kind, isolates: t.isolates, runtime_version: t.version || process.version, daemon_config: cfg,
    attach_s: +attachS.toFixed(1), attach_cpu_s: +cpuAttach.toFixed(2), attached, attached_end: attachedEnd,
    seconds: +wall.toFixed(1), cpu_s: +cpu.toFixed(2),
    cpu_pct_core: +(100 * cpu / wall).toFixed(3),
    cpu_s_per_isolate_hour: +(cpu / (n * wall / 3600)).toFixed(3),
    cpu_pct_per_slice: slices.map((x) => +x.toFixed(3)), slice_s: slice,
    rss_median_mib: +(common.median(rss) / MIB).toFixed(2), rss_min_mib: +(Math.min(...rss) / MIB).toFixed(2), rss_max_mib: +(Math.max(...rss) / MIB).toFixed(2),
    rss_anon_median_mib: +(common.median(anon) / MIB).toFixed(2),
    vmhwm_mib: +(mem.hwm / MIB).toFixed(2),
    windows_stored: wins.filter((x) => x.type === 'cpu').length,
    windows_delayed: st && st.counters ? st.counters.windows_delayed : null, heap_windows_stored: wins.filter((x) => x.type === 'heap').length,
    status_counters: st ? st.counters : null, schedule_status: st ? st.schedule : null,
    daemon_exit: d.exitCode, daemon_warnings: d.err.split('\n').filter(Boolean).slice(-20),
  };
}

// --- the section --------------------------------------------------------

function seconds_of(d) {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(String(d).trim());
  if (!m) throw new Error(`bad duration '${d}' in --agent-schedule (e.g. 10s/60s/10ms)`);
  return parseFloat(m[1]) * { ms: 0.001, s: 1, m: 60, h: 3600 }[m[2]];
}

async function run(ctx) {
  const quick = ctx.quick;
  const configs = String(ctx.opt('agent-configs', quick ? 'node-1,node-10,node-50,workerd-10' : 'node-1,node-10,node-50,workerd-10,workerd-50'))
    .split(',').map((s) => s.trim()).filter(Boolean);
  for (const c of configs) if (!/^(node|workerd)-\d+$/.test(c)) throw new Error(`bad --agent-configs entry '${c}' (node-N or workerd-N)`);
  const seconds = parseInt(ctx.opt('agent-seconds', quick ? '15' : '125'), 10);
  const schedOpt = ctx.opt('agent-schedule', quick ? '2s/5s/10ms' : '');
  const schedule = schedOpt ? (([duration, period, interval]) => ({ duration, period, interval }))(schedOpt.split('/')) : null;
  const periodS = schedule ? seconds_of(schedule.period) : 60; // slices of one period
  const data = { seconds_per_config: seconds, schedule: schedule || 'embedded defaults (10s / 60s / 10ms, heap 5m)', results: [] };
  const t0 = Date.now();
  for (const spec of configs) {
    try {
      data.results.push(await measureConfig(ctx, spec, { seconds, schedule, slice: periodS }));
    } catch (e) {
      ctx.log(`${spec}: failed: ${e.message}`);
      data.results.push({ config: spec, error: String(e.message || e) });
    }
  }
  data.seconds = +((Date.now() - t0) / 1000).toFixed(1);
  // What the schedule asks for over the measurement (plus the first
  // window, which lands within the jitter after attach): with more isolates
  // than max_concurrent x period / duration, windows wait for a slot.
  for (const r of data.results) if (!r.error) r.windows_expected = r.isolates * (Math.floor(r.seconds / periodS) + 1);

  const fx = common.fx;
  const ok = data.results.filter((r) => !r.error);
  common.printTable(
    ['config', 'isolates', 's', 'CPU % core', 'per-period CPU % (min..max)', 'CPU s/isolate-h', 'RSS med MiB', 'VmHWM MiB', 'RssAnon MiB', 'cpu windows (of schedule)', 'delayed', 'attach s'],
    data.results.map((r) => (r.error ? [r.config, '', '', `failed: ${r.error}`] : [
      r.config, r.isolates, fx(r.seconds, 0), fx(r.cpu_pct_core, 3),
      r.cpu_pct_per_slice.length ? `${fx(Math.min(...r.cpu_pct_per_slice), 3)}..${fx(Math.max(...r.cpu_pct_per_slice), 3)}` : '-',
      fx(r.cpu_s_per_isolate_hour, 3), fx(r.rss_median_mib, 1), fx(r.vmhwm_mib, 1), fx(r.rss_anon_median_mib, 1),
      `${r.windows_stored} (${fx(r.windows_stored / r.windows_expected, 2)})`, r.windows_delayed ?? '-', fx(r.attach_s, 1)])));

  const rows = [];
  for (const r of data.results) if (r.error) rows.push([`agent, ${r.config}`, 'failed', '', `not resolved: ${r.error.split('\n')[0]}`]);
  const by = (c) => ok.find((r) => r.config === c);
  for (const r of ok) {
    const spread = r.cpu_pct_per_slice.length > 1 ? `, per period ${fx(Math.min(...r.cpu_pct_per_slice), 3)}..${fx(Math.max(...r.cpu_pct_per_slice), 3)}` : '';
    const isGoal = r.config === 'node-10';
    const cpuGoal = 0.5, rssGoal = 16;
    rows.push([`agent CPU, ${r.config}`, `${fx(r.cpu_pct_core, 3)} % of one core${spread}; ${fx(r.cpu_s_per_isolate_hour, 2)} CPU s/isolate-h; ${r.windows_stored} windows (${r.windows_delayed ?? '?'} delayed)`,
      isGoal ? '<= 0.5 % of one core' : '',
      isGoal ? (r.cpu_pct_core <= cpuGoal ? 'met' : `not met: ${fx(r.cpu_pct_core / cpuGoal, 2)}x the goal`) : '']);
    rows.push([`agent RSS, ${r.config}`, `median ${fx(r.rss_median_mib, 1)} MiB, VmHWM ${fx(r.vmhwm_mib, 1)} MiB`,
      isGoal ? '<= 16 MiB (VmHWM)' : '',
      isGoal ? (r.vmhwm_mib <= rssGoal ? 'met' : `not met: ${fx(r.vmhwm_mib - rssGoal, 1)} MiB over`) : '']);
  }
  for (const kind of ['node', 'workerd']) {
    const a = by(`${kind}-10`), b = by(`${kind}-50`);
    if (!a || !b) continue;
    const ratio = b.rss_median_mib / a.rss_median_mib;
    const perIso = (b.rss_median_mib - a.rss_median_mib) * 1024 / 40;
    const row = [`agent RSS growth ${kind} 10 -> 50 isolates`,
      `x${fx(ratio, 2)} for x5 isolates (${fx(a.rss_median_mib, 1)} -> ${fx(b.rss_median_mib, 1)} MiB, +${fx(perIso, 0)} KiB per isolate)`,
      kind === 'node' ? 'sublinear (< x5)' : '', ''];
    if (kind === 'node') row[3] = ratio < 5 ? 'met' : `not met: x${fx(ratio, 2)}`;
    rows.push(row);
    data[`rss_growth_${kind}_10_50`] = { ratio, kib_per_isolate: perIso };
  }
  if (quick) for (const r of rows) if (r[3] === 'met' || r[3].startsWith('not met')) r[3] = `not resolved: quick run (${r[3]})`;
  return { rows, data };
}

module.exports = { name: 'agent', title: 'isoprofd CPU and RSS with 1/10/50 Node isolates and workerd workers', run, measureConfig };
