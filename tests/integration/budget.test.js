// The pause budget (sampling.budget) with real Node isolates: an app with
// 40,000 compiled functions, whose Profiler.start stalls it ~100 ms, gets
// its periods stretched and is held to its share of wall time; a small app
// beside it keeps the configured schedule. /status, /metrics and the log
// say which is which.
'use strict';
const test = require('node:test');
const { after } = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const L = require('./lib');

after(L.cleanup);

const MANY = path.join(L.WORKLOADS, 'node-many.js');
const SHARE = 0.03;
// The schedule and budget of the test's config, in ms.
const CFG = { period: 2000, duration: 1000, heap: 6000, share: SHARE, maxPause: 60, maxDuration: 4000 };

// sched_plan (agent/daemon/schedule.h) of the costs /status reports.
function expectedPlan(est, c = CFG) {
  const S = est.start_ms, r = est.stop_ms_per_s / 1000, H = est.heap_ms;
  const T = est.stop_fit ? est.stop_ms : 0;
  const a = (S + T) / c.period + H / c.heap, b = r * c.duration / c.period;
  let gMax = c.maxDuration / c.duration;
  if (r > 0) {
    let room = (c.maxPause - T) / (r * c.duration);
    if (!est.stop_fit && T + r * c.duration > c.maxPause) room = Math.max(1, 2 * est.stop_len_ms / c.duration);
    gMax = Math.min(gMax, room);
  }
  if (gMax < 1) gMax = 1;
  let f, g;
  if (a + b <= c.share) f = g = 1;
  else if (b < c.share && a / (c.share - b) <= gMax) f = g = a / (c.share - b);
  else { f = (a + b * gMax) / c.share; g = gMax; }
  return { f, g, stop: T + r * c.duration * g };
}

// A target's budget object agrees with the plan its own estimates make.
function checkPlan(name, t) {
  const msg = `${name}: ${JSON.stringify(t)}`;
  const { f, g, stop } = expectedPlan(t.estimate);
  const near = (x, y) => Math.abs(x - y) <= Math.max(2, 0.01 * y);
  assert.ok(near(t.factor, f), `factor ${t.factor}, expected ${f}: ${msg}`);
  assert.ok(near(t.period_ms, CFG.period * f), `period: ${msg}`);
  assert.ok(near(t.heap_period_ms, CFG.heap * f), `heap period: ${msg}`);
  assert.ok(near(t.duration_ms, CFG.duration * g), `duration, expected x${g}: ${msg}`);
  assert.strictEqual(t.limited, f > 1.000001, msg);
  assert.strictEqual(t.over_max_pause.includes('start'), t.estimate.start_ms > CFG.maxPause, msg);
  assert.strictEqual(t.over_max_pause.includes('heap'), t.estimate.heap_ms > CFG.maxPause, msg);
  if (Math.abs(stop - CFG.maxPause) > 0.01) assert.strictEqual(t.over_max_pause.includes('stop'), stop > CFG.maxPause, msg);
}

function get(socketPath, p) {
  return new Promise((resolve, reject) => {
    const req = http.request({ socketPath, path: p, method: 'GET', timeout: 5000 }, (res) => {
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

async function budgets(sock) {
  const st = JSON.parse(await get(sock, '/status'));
  const by = {};
  for (const t of st.targets) by[t.worker] = t.budget;
  return by;
}

test('pause budget: a costly app stretched and held to its share, a small one kept on schedule', { timeout: 180000 }, async () => {
  const many = await L.startNode(MANY, { env: { FUNCS: '40000' } });
  const few = await L.startNode(MANY, { env: { FUNCS: '200' } });
  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  const sock = path.join(dir, 'ctl.sock');
  const d = await L.startDaemon(L.yamlConfig({
    store, targets: [{ port: many.port, worker: 'many' }, { port: few.port, worker: 'few' }],
    duration: '1s', period: '2s', interval: '10ms', jitter: '0%', heap: '{period: 6s}',
    // A 5 minute horizon: the costly app's windows (a start of 0.3-1 s on a
    // loaded machine, its stop and heap windows 0.2-0.3 s) fit 3 % of it
    // several times over, so the plan, not the horizon's cap, spaces them
    // here (the unit tests hold the cap itself on a simulated clock).
    budget: `{pause_share: ${SHARE * 100}%, max_pause: ${CFG.maxPause}ms, max_duration: ${CFG.maxDuration}ms, horizon: 5m}`,
    extra: `control: {socket: ${JSON.stringify(sock)}}`,
  }), { dir });
  await L.waitFor(() => fs.existsSync(sock), 15000, 'the control socket');

  // Settled: both measured over several windows (the plan follows the
  // median of the latest five), the costly one limited.
  let b;
  await L.waitFor(async () => {
    b = await budgets(sock);
    return b.many && b.few && b.many.pauses.start.count >= 2 && b.few.pauses.start.count >= 4 &&
      b.few.pauses.heap.count >= 1 && b.many.pauses.heap.count >= 1 && b.many.limited;
  }, 120000, 'both apps measured, the costly one limited');
  const t1 = Date.now();
  const s1 = b;
  const seq1 = d.lines.length;

  // At least 25 s and three more of the costly app's windows.
  await L.waitFor(async () => {
    b = await budgets(sock);
    return Date.now() - t1 >= 25000 && b.many.pauses.start.count >= s1.many.pauses.start.count + 3;
  }, 120000, 'three more windows of the costly app');
  const s2 = b;
  const msg = JSON.stringify(s2);

  // Costs in, plans out: each plan is what its estimates make.
  checkPlan('many', s2.many);
  checkPlan('few', s2.few);
  // The costly app: stretched, its start over max_pause, held to its share.
  // How far depends on the machine (x1.45 with a 68 ms start on a quiet
  // one, x2-3 beside a busy core): checkPlan holds the factor to the plan.
  const m = s2.many;
  assert.ok(m.limited && m.factor > 1, msg);
  assert.ok(m.estimate.start_ms > CFG.maxPause, `Profiler.start of 40,000 functions stalls over ${CFG.maxPause} ms: ${msg}`);
  // What the account allows over the span: the share, plus at most the
  // credit it saved (2 x one window and one heap window) and the one
  // window it may overdraw.
  const paused = m.paused_ms - s1.many.paused_ms;
  const observed = m.observed_ms - s1.many.observed_ms;
  const oneWindow = m.pauses.start.max_ms + m.pauses.stop.max_ms + m.pauses.heap.max_ms;
  assert.ok(paused <= SHARE * observed + 3 * oneWindow, `stalled ${paused} ms in ${observed} ms: over ${SHARE * 100}% + ${3 * oneWindow} ms (${msg})`);
  // The fixed schedule it replaced would have been well over that share.
  assert.ok(m.pauses.start.p50_ms / 2000 > SHARE, msg);

  // The small app: the configured schedule, windows every 2 s.
  const f = s2.few;
  assert.strictEqual(f.limited, false, msg);
  assert.strictEqual(f.factor, 1, msg);
  assert.strictEqual(f.period_ms, 2000, msg);
  assert.strictEqual(f.duration_ms, 1000, msg);
  assert.strictEqual(f.heap_period_ms, 6000, msg);
  const fewStarts = f.pauses.start.count - s1.few.pauses.start.count;
  assert.ok(fewStarts >= Math.floor(observed / 2000 * 0.6), `${fewStarts} windows of the small app in ${observed} ms`);
  const manyStarts = m.pauses.start.count - s1.many.pauses.start.count;
  assert.ok(manyStarts < fewStarts, `costly ${manyStarts} windows, small ${fewStarts}`);

  // The log says when and why a plan changed.
  const changes = d.lines.filter((l) => l.msg === 'window plan changed');
  const lastMany = changes.filter((l) => l.worker === 'many').pop();
  assert.ok(lastMany && lastMany.limited === '1' && /start/.test(lastMany.over_max_pause) && Number(lastMany.start_ms) > CFG.maxPause, d.tail());
  const lastFew = changes.filter((l) => l.worker === 'few').pop();
  assert.ok(!lastFew || lastFew.limited === '0', `the small app's last plan: ${lastFew && lastFew.raw}`);
  // Windows started while the costly app was limited are a plan's period apart at least.
  const starts = d.lines.slice(seq1).filter((l) => l.msg === 'window started' && l.worker === 'many').map((l) => Date.parse(l.ts));
  for (let i = 1; i < starts.length; i++) assert.ok(starts[i] - starts[i - 1] >= 2000 * 1.4, `costly app's windows ${starts[i] - starts[i - 1]} ms apart`);

  // /metrics: the histogram counts every measured call; deferrals add up.
  const text = await get(sock, '/metrics');
  const sample = (re) => { const x = re.exec(text); assert.ok(x, `${re} in /metrics`); return Number(x[1]); };
  const s3 = await budgets(sock);
  const startCount = sample(/^isoprof_pause_seconds_count\{call="start"\} (\d+)$/m);
  assert.ok(startCount >= s2.many.pauses.start.count + s2.few.pauses.start.count, `${startCount}`);
  assert.ok(sample(/^isoprof_pause_seconds_bucket\{call="start",le="0\.05"\} (\d+)$/m) < startCount, 'some starts over 50 ms');
  const deferred = sample(/^isoprof_windows_deferred_total (\d+)$/m);
  assert.ok(deferred >= s2.many.deferred + s2.few.deferred && deferred <= s3.many.deferred + s3.few.deferred, `${deferred}`);

  // isoprof status: a line for the stretched isolate, none for the other.
  const cli = L.cli(['status', '--socket', sock]);
  assert.strictEqual(cli.status, 0, cli.stderr);
  assert.match(cli.stdout, /^budget +many\/main isolate \d+: [\d.]+s windows every [\d.]+s \(x[\d.]+; Profiler\.start \d+ ms, over max_pause\), [\d.]+% of its time stalled, \d+ deferred$/m);
  assert.doesNotMatch(cli.stdout, /few\/main isolate/);

  const stop = await L.stopDaemon(d);
  assert.strictEqual(stop.code, 0, d.tail());
  assert.strictEqual(d.count((l) => l.level === 'error'), 0, d.tail());
});
