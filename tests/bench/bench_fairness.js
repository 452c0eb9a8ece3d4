#!/usr/bin/env node
// What one endpoint can take from another: a healthy target's windows and
// the daemon's CPU when another endpoint announces many worker threads or
// keeps the daemon's loop busy. Each scenario runs a fresh isoprofd:
//
//   workers   a fake Node (tests/integration/fake-inspector.js) whose main
//             session announces 64 worker threads (threads.max 64), beside
//             a healthy fake in a process of its own; 2 s windows every 3 s,
//             max_concurrent 4, no budget. Windows stored per endpoint.
//   announce  a fake that announces 20,000 worker threads at once on one
//             session, each waiting for the debugger, and goes on whatever
//             the daemon asks (NodeWorker.disable included): the daemon's CPU
//             seconds from the first announcement until it has dealt with
//             all of them (its CPU time flat for 3 s), and how it counted
//             them (attached, refused, capped).
//   budget    a real Node app (workloads/node-light.js) with the pause budget
//             on (pause_share 1 %, 2 s windows every 3 s), beside 6 fakes
//             that keep the daemon's loop busy (each sends 200 KiB events as
//             fast as the daemon reads them). The app's CPU windows stored,
//             and the start and stop stalls the daemon measured for it.
//
// Prints one JSON line per scenario and a table.
//
//   node tests/bench/bench_fairness.js [--build DIR | --isoprofd FILE]
//        [--seconds 60] [--only workers,announce,budget] [--busy 6] [--json FILE]
//
// It measures; it asserts nothing.
'use strict';
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const common = require('./common');
const F = require('../integration/fake-inspector');

const arg = common.arg;
const sleep = common.sleep;
const WORKLOADS = path.join(common.ROOT, 'tests', 'integration', 'workloads');

if (process.argv.includes('--help') || process.argv.includes('-h')) {
  console.log(fs.readFileSync(__filename, 'utf8').split('\n').slice(1, 25).map((l) => l.replace(/^\/\/ ?/, '')).join('\n'));
  process.exit(0);
}

// A fake inspector in a process of its own (so that what the bench's own
// fakes do cannot slow its answers); resolves {child, port}.
async function outOfProcessFake() {
  const c = common.start(process.execPath, [path.join(common.ROOT, 'tests', 'integration', 'fake-inspector.js')]);
  const port = await common.waitFor(() => {
    const m = /port=(\d+)/.exec(c.out);
    if (m) return Number(m[1]);
    if (c.exitCode !== null) throw new Error(`fake-inspector exited: ${c.err}`);
    return null;
  }, 15000, 'the fake inspector\'s port');
  return { child: c, port };
}

function get(socketPath, p) {
  return new Promise((resolve, reject) => {
    const req = http.request({ socketPath, path: p, method: 'GET', timeout: 10000 }, (res) => {
      const chunks = [];
      res.on('data', (d) => chunks.push(d));
      res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${p}: timeout`)));
    req.on('error', reject);
    req.end();
  });
}

async function daemon(isoprofd, targets, { sampling, extra = [] }) {
  const dir = common.tmpdir('fair');
  const sock = path.join(dir, 'ctl.sock');
  fs.writeFileSync(path.join(dir, 'cfg.yaml'), [
    `store: {path: "${dir}/store"}`, 'targets:',
    ...targets.map((t) => `  - {inspector: "127.0.0.1:${t.port}", worker: "${t.worker}"${t.threads ? `, threads: ${t.threads}` : ''}}`),
    'discovery: {interval: 1s}', `sampling: ${sampling}`, 'anomaly: {latency: {listen: ""}}', 'log: {level: info}',
    `control: {socket: "${sock}"}`, ...extra,
  ].join('\n') + '\n');
  const d = common.start(isoprofd, ['--config', path.join(dir, 'cfg.yaml')], { stdio: ['ignore', 'ignore', 'pipe'] });
  d.sock = sock;
  d.log = () => d.err;
  d.count = (re) => (d.err.match(re) || []).length;
  await common.waitFor(() => fs.existsSync(sock) || d.exitCode !== null, 15000, 'the control socket');
  if (d.exitCode !== null) throw new Error(`isoprofd exited: ${d.err.slice(-2000)}`);
  return d;
}

const storedCpu = (d, worker) => d.count(new RegExp(`msg="window stored" worker=${worker} .*type=cpu`, 'g'));

async function workers(isoprofd, seconds) {
  const healthy = await outOfProcessFake();
  const many = await F.startFakeInspector({});
  const d = await daemon(isoprofd, [{ port: healthy.port, worker: 'healthy' }, { port: many.port, worker: 'many', threads: '{max: 64}' }],
    { sampling: '{cpu: {duration: 2s, period: 3s, interval: 1ms, jitter: 10%, max_concurrent: 4}, heap: {period: 60s}, budget: {pause_share: 100%}}' });
  try {
    await common.waitFor(() => many.methods.includes('NodeWorker.enable'), 30000, 'NodeWorker.enable');
    for (let i = 0; i < 64; i++) many.attachWorker({ sessionId: `w${i}`, name: `w${i}` });
    const t0 = Date.now();
    const h0 = storedCpu(d, 'healthy'); const m0 = storedCpu(d, 'many');
    await sleep(seconds * 1000);
    const elapsed = (Date.now() - t0) / 1000;
    return { scenario: 'workers', seconds: +elapsed.toFixed(1), healthy_due: Math.floor(elapsed / 3),
      healthy_windows: storedCpu(d, 'healthy') - h0, many_windows: storedCpu(d, 'many') - m0 };
  } finally {
    await common.stop(d, 'SIGTERM', 10000);
    await common.stop(healthy.child);
    await many.close();
  }
}

async function announce(isoprofd, seconds, n = 20000) {
  const fake = await F.startFakeInspector({});
  const d = await daemon(isoprofd, [{ port: fake.port, worker: 'storm' }],
    { sampling: '{cpu: {duration: 1s, period: 60s, interval: 1ms, jitter: 10%, max_concurrent: 4}, heap: {period: 60s}, budget: {pause_share: 100%}}' });
  try {
    await common.waitFor(() => fake.methods.includes('NodeWorker.enable'), 30000, 'NodeWorker.enable');
    await sleep(1000);
    const cpu0 = common.procCpu(d.pid);
    const t0 = Date.now();
    // Written to the session whatever the daemon asked (a real Node stops
    // announcing after NodeWorker.disable; a hostile peer does not).
    const sock = [...fake.sockets][0];
    for (let i = 0; i < n; i++) {
      fake.workers.set(`s${i}`, { name: `s${i}`, released: false, st: { profiling: false, enabled: false } });
      sock.write(F.frame(1, JSON.stringify({ method: 'NodeWorker.attachedToWorker', params: { sessionId: `s${i}`,
        workerInfo: { workerId: `s${i}`, type: 'worker', title: `[worker s${i}] s${i}`, url: '' }, waitingForDebugger: true } })));
      if (i % 500 === 499) await sleep(0); // let the socket drain
    }
    // Done when its CPU time stays flat for 3 s.
    let last = common.procCpu(d.pid); let flatSince = Date.now();
    while (Date.now() - t0 < Math.max(seconds, 30) * 4000) {
      await sleep(500);
      const c = common.procCpu(d.pid);
      if (c > last + 0.02) { last = c; flatSince = Date.now(); } else if (Date.now() - flatSince >= 3000) break;
    }
    const cpu = common.procCpu(d.pid) - cpu0;
    const st = JSON.parse(await get(d.sock, '/status'));
    const c = st.counters || {};
    return { scenario: 'announce', announced: n, cpu_s: +cpu.toFixed(2), wall_s: +((Date.now() - t0) / 1000).toFixed(1),
      threads_attached: c.threads_attached, threads_refused: c.threads_refused, threads_capped: c.threads_capped,
      nodeworker_calls: fake.nodeWorkerCalls.length };
  } finally {
    await common.stop(d, 'SIGTERM', 10000);
    await fake.close();
  }
}

async function budget(isoprofd, seconds) {
  const app = await common.startNode(path.join(WORKLOADS, 'node-light.js'));
  const event = F.frame(1, JSON.stringify({ method: 'Runtime.consoleAPICalled', params: { type: 'log', args: Array.from({ length: 2000 }, (_, i) => ({ type: 'string', value: `v${i}`.padEnd(90, 'x') })) } }));
  const busy = [];
  const nbusy = Number(arg('busy', '6'));
  for (let i = 0; i < nbusy; i++) {
    busy.push(await F.startFakeInspector({ onOpen: (sock) => {
      const pump = () => { while (!sock.destroyed && sock.write(event)); };
      sock.on('drain', pump);
      setTimeout(pump, 3000); // once attached
    } }));
  }
  const d = await daemon(isoprofd, [{ port: app.port, worker: 'healthy' }, ...busy.map((f, i) => ({ port: f.port, worker: `busy${i}` }))],
    { sampling: '{cpu: {duration: 2s, period: 3s, interval: 10ms, jitter: 10%, max_concurrent: 8}, heap: {period: 60s}, budget: {pause_share: 1%}}' });
  try {
    const t0 = Date.now();
    await sleep(seconds * 1000);
    const elapsed = (Date.now() - t0) / 1000;
    const st = JSON.parse(await get(d.sock, '/status'));
    const t = st.targets.find((x) => x.worker === 'healthy');
    const b = t && t.budget;
    if (process.env.BENCH_DEBUG) console.error(JSON.stringify(t), d.err.split('\n').filter((l) => /healthy/.test(l) && !/window stored/.test(l)).slice(-30).join('\n'));
    return { scenario: 'budget', seconds: +elapsed.toFixed(1), healthy_due: Math.floor(elapsed / 3), healthy_windows: storedCpu(d, 'healthy'),
      factor: b && b.factor, start_p50_ms: b && b.pauses.start.p50_ms, start_max_ms: b && b.pauses.start.max_ms,
      stop_p50_ms: b && b.pauses.stop.p50_ms, stop_max_ms: b && b.pauses.stop.max_ms, deferred: b && b.deferred,
      daemon_cpu_s: +common.procCpu(d.pid).toFixed(1) };
  } finally {
    await common.stop(d, 'SIGTERM', 10000);
    await common.stop(app);
    await Promise.all(busy.map((f) => f.close()));
  }
}

const SCENARIOS = { workers, announce, budget };

(async () => {
  const isoprofd = arg('isoprofd', null) || common.binaries(arg('build', null)).isoprofd;
  const seconds = Number(arg('seconds', '60'));
  const only = arg('only', 'workers,announce,budget').split(',');
  const rows = [];
  for (const name of only) {
    if (!SCENARIOS[name]) throw new Error(`unknown scenario ${name}`);
    rows.push(await SCENARIOS[name](isoprofd, seconds));
    console.error(JSON.stringify(rows[rows.length - 1]));
  }
  for (const r of rows) console.log(Object.entries(r).map(([k, v]) => `${k}=${v}`).join(' '));
  const json = arg('json', null);
  if (json) fs.writeFileSync(json, JSON.stringify({ isoprofd, seconds, rows }, null, 2));
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
