// Worker threads on a scripted inspector (fake-inspector.js's NodeWorker):
// what a real Node does not do on cue. Hostile NodeWorker traffic (a reply
// for a session nobody attached, garbage inside receivedMessageFromWorker,
// a message from a worker already detached, an attach storm past
// threads.max) drops only the worker concerned; a worker that goes away
// in the middle of a CPU window or of a heap window takes only its own
// window with it. In each, the main thread and the other workers carry on.
'use strict';
const { test, after } = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const L = require('./lib');
const F = require('./fake-inspector');

after(async () => { await F.closeAll(); await L.cleanup(); });

function config(store, port, threads) {
  return L.yamlConfig({
    store, targets: [{ port, worker: 'fake', version: 'v1', threads }],
    duration: '500ms', period: '1s', jitter: '0%', heap: '{period: 1s}', memoryPoll: '300ms',
  });
}

const status = L.status;
const threadWindows = (store, thread) => L.windows(store, ['--thread', thread]);
const attachedLog = (thread) => (l) => l.msg === 'thread attached' && l.thread === thread;

// SIGTERM: exit 0, no error logged, valid WebSocket to the fake, a clean store.
async function stopClean(d, fake, store) {
  const r = await L.stopDaemon(d, { signal: 'SIGTERM' });
  assert.strictEqual(r.code, 0, d.tail());
  assert.strictEqual(d.count((l) => l.level === 'error'), 0, d.tail());
  assert.deepStrictEqual(fake.violations, []);
  L.storeCheck(store);
}

// Waits until the main thread stores `more` windows past what it has now.
async function mainCarriesOn(store, more = 2) {
  const n0 = threadWindows(store, 'main').length;
  await L.waitFor(() => threadWindows(store, 'main').length >= n0 + more, 30000, 'main thread windows');
}

test('hostile NodeWorker traffic: only the worker concerned is dropped', async () => {
  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  const fake = await F.startFakeInspector();
  const d = await L.startDaemon(config(store, fake.port, '{max: 4}'), { dir });
  await L.waitFor(() => fake.methods.includes('NodeWorker.enable'), 30000, 'NodeWorker.enable');

  fake.attachWorker({ sessionId: 'good', name: 'good' });
  await d.waitLog(attachedLog('good'), 20000, 'good attached');
  await L.waitFor(() => fake.workers.get('good').released, 10000, 'good released');
  await L.waitFor(() => threadWindows(store, 'good').length >= 1, 30000, 'windows of good');

  // a reply for a session nobody attached: not a reply to anything
  fake.fromWorker('nobody', '{"id":1,"result":{}}');
  // garbage from an attached worker: that worker is dropped, released, detached
  fake.attachWorker({ sessionId: 'garbage', name: 'garbage' });
  await d.waitLog(attachedLog('garbage'), 20000, 'garbage attached');
  fake.fromWorker('garbage', '{"id": nope');
  const drop = await d.waitLog((l) => l.msg === 'thread dropped' && l.thread === 'garbage', 20000, 'garbage dropped');
  assert.match(drop.why, /./);
  await L.waitFor(() => fake.detached.includes('garbage'), 10000, 'garbage detached');
  // a message from a worker that is gone
  fake.attachWorker({ sessionId: 'gone', name: 'gone' });
  await d.waitLog(attachedLog('gone'), 20000, 'gone attached');
  fake.detachWorker('gone');
  await d.waitLog((l) => l.msg === 'thread detached' && l.thread === 'gone', 20000, 'gone detached');
  fake.fromWorker('gone', '{"id":7,"result":{"profile":{}}}');
  fake.fromWorker('gone', 'not even JSON');

  // an attach storm: good is one of 4 allowed; the rest run unwatched,
  // each released (it may be waiting) and detached
  const storm = Array.from({ length: 100 }, (_, i) => `s${i}`);
  for (const sid of storm) fake.attachWorker({ sessionId: sid, name: sid });
  await L.waitFor(() => status(store).counters.threads_refused >= storm.length - 3, 30000, 'the storm refused');
  const watched = status(store).targets.filter((t) => storm.includes(t.thread)).map((t) => t.thread);
  assert.ok(watched.length <= 3, JSON.stringify(watched));
  const refused = storm.filter((sid) => !watched.includes(sid));
  await L.waitFor(() => refused.every((sid) => fake.detached.includes(sid)), 20000, 'every refused worker detached');
  const c = status(store).counters;
  assert.strictEqual(c.threads_dropped, 1, JSON.stringify(c));
  assert.strictEqual(c.threads_refused, refused.length, JSON.stringify(c));

  // the main thread and good carry on
  await mainCarriesOn(store);
  const g0 = threadWindows(store, 'good').length;
  await L.waitFor(() => threadWindows(store, 'good').length >= g0 + 2, 30000, 'more windows of good');
  const threads = status(store).targets.map((t) => t.thread);
  assert.ok(threads.includes('main') && threads.includes('good') && !threads.includes('garbage') && !threads.includes('gone'), JSON.stringify(threads));
  await stopClean(d, fake, store);
});

test('a worker that goes during its CPU window or its heap window takes only that window', async () => {
  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  const hits = { cpu: 0, heap: 0 };
  const fake = await F.startFakeInspector({
    onWorkerCall: (sid, msg) => {
      // cpu: gone 100 ms into its first window (answered; the stop never is)
      if (sid === 'cpu' && msg.method === 'Profiler.start') {
        hits.cpu++;
        setTimeout(() => fake.detachWorker(sid), 100);
      }
      // heap: gone while its heap profile is asked for (never answered)
      if (sid === 'heap' && (msg.method === 'HeapProfiler.getSamplingProfile' || msg.method === 'HeapProfiler.stopSampling')) {
        hits.heap++;
        fake.detachWorker(sid);
        return true;
      }
      return false;
    },
  });
  const d = await L.startDaemon(config(store, fake.port), { dir });
  await L.waitFor(() => fake.methods.includes('NodeWorker.enable'), 30000, 'NodeWorker.enable');
  fake.attachWorker({ sessionId: 'stays', name: 'stays' });
  fake.attachWorker({ sessionId: 'cpu', name: 'cpu' });
  fake.attachWorker({ sessionId: 'heap', name: 'heap' });
  for (const t of ['cpu', 'heap']) await d.waitLog((l) => l.msg === 'thread detached' && l.thread === t, 30000, `${t} detached`);
  assert.ok(hits.cpu >= 1 && hits.heap === 1, JSON.stringify(hits));
  assert.strictEqual(threadWindows(store, 'heap').filter((w) => w.type === 'heap').length, 0);
  // the others carry on, and a worker attached now is watched as usual
  await mainCarriesOn(store);
  fake.attachWorker({ sessionId: 'later', name: 'later' });
  await L.waitFor(() => threadWindows(store, 'later').some((w) => w.type === 'cpu') && threadWindows(store, 'later').some((w) => w.type === 'heap'), 30000, 'windows of later');
  assert.ok(threadWindows(store, 'stays').length >= 2);
  const threads = status(store).targets.map((t) => t.thread).sort();
  assert.deepStrictEqual(threads, ['later', 'main', 'stays']);
  await stopClean(d, fake, store);
});

// Node decides a worker waits when `new Worker` runs, and says so only once
// its thread started: a session that closes in between leaves the worker
// waiting for good. So before the agent closes a session on purpose, it
// fences: no new worker waits, and one that shows up in the fence is
// released.
test('the fence: a worker that shows up while the agent stops, or as a reload turns threads off, is released', async () => {
  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  const fake = await F.startFakeInspector();
  const enables = (wait) => fake.nodeWorkerCalls.filter((m) => m.method === 'NodeWorker.enable' && m.params && m.params.waitForDebuggerOnStart === wait).length;
  const d = await L.startDaemon(config(store, fake.port), { dir });
  await L.waitFor(() => enables(true) === 1, 30000, 'NodeWorker.enable');

  // a reload turns threads off: fence, the late worker released, then disable
  fs.writeFileSync(d.config, config(store, fake.port, '{enabled: false}'));
  process.kill(d.pid, 'SIGHUP');
  await L.waitFor(() => enables(false) === 1, 20000, 'the fence of the reload');
  assert.ok(!fake.methods.includes('NodeWorker.disable'), 'disable waits for the fence');
  fake.attachWorker({ sessionId: 'r1', name: 'r1' });
  await L.waitFor(() => fake.detached.includes('r1'), 10000, 'r1 let go');
  await L.waitFor(() => fake.methods.includes('NodeWorker.disable'), 10000, 'NodeWorker.disable after the fence');
  assert.strictEqual(fake.workers.size, 0);

  // back on, then the agent stops: fence, the late worker released, then close
  fs.writeFileSync(d.config, config(store, fake.port));
  process.kill(d.pid, 'SIGHUP');
  await L.waitFor(() => enables(true) === 2, 20000, 'NodeWorker.enable again');
  const stopping = L.stopDaemon(d, { signal: 'SIGTERM', timeoutMs: 20000 });
  await L.waitFor(() => enables(false) === 2, 20000, 'the fence of the stop');
  fake.attachWorker({ sessionId: 's1', name: 's1' });
  const r = await stopping;
  assert.strictEqual(r.code, 0, d.tail());
  assert.ok(fake.detached.includes('s1'), 's1 was let go before the session closed');
  assert.strictEqual(d.count((l) => l.level === 'error'), 0, d.tail());
  assert.deepStrictEqual(fake.violations, []);
});

// Slots are shared per endpoint, and announcements are capped per endpoint:
// an endpoint whose 64 worker threads all want a window beside a healthy
// target does not take its windows (on the build before: 115 windows for
// the 64 to the healthy target's 3 in a minute), and one that announces
// thousands of workers has its workers unwatched for a while
// (threads_capped, NodeWorker.disable), while the healthy target carries on.
test('64 workers of one endpoint beside a healthy target: the healthy target keeps its schedule; an announcement storm is capped', async () => {
  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  const healthy = await F.startFakeInspector({});
  const many = await F.startFakeInspector({});
  const d = await L.startDaemon(L.yamlConfig({
    store, targets: [{ port: healthy.port, worker: 'healthy' }, { port: many.port, worker: 'many', threads: '{max: 64}' }],
    duration: '1s', period: '2s', jitter: '10%', maxConcurrent: 4, heap: '{period: 60s}', level: 'info',
  }), { dir });
  await L.waitFor(() => many.methods.includes('NodeWorker.enable'), 30000, 'NodeWorker.enable');
  for (let i = 0; i < 64; i++) many.attachWorker({ sessionId: `w${i}`, name: `w${i}` });
  await L.waitFor(() => d.count((l) => l.msg === 'thread attached') >= 64, 60000, '64 workers attached');
  const cpu = (w) => d.count((l) => l.msg === 'window stored' && l.worker === w && l.type === 'cpu');
  // 30 s of both: the healthy target is due every 2 s (+-10 %).
  const h0 = cpu('healthy'); const m0 = cpu('many'); const t0 = Date.now();
  await L.waitFor(() => Date.now() - t0 >= 30000, 40000, '30 s');
  const secs = (Date.now() - t0) / 1000;
  const hw = cpu('healthy') - h0; const mw = cpu('many') - m0;
  assert.ok(hw >= Math.floor(secs / 2) * 0.8, `healthy: ${hw} windows in ${secs} s (due ${Math.floor(secs / 2)}); the 64 workers: ${mw}`);
  assert.ok(mw >= 2 * hw, `the 64 workers share the other slots: ${mw} windows, healthy ${hw}`);
  assert.strictEqual(status(store).counters.threads_capped, 0);

  // A storm: 2,000 announcements, faster than the cap (100/s past a burst
  // of 4 x threads.max), each written whatever the daemon asks.
  const sock = [...many.sockets][0];
  for (let i = 0; i < 2000; i++) {
    const sid = `s${i}`;
    many.workers.set(sid, { name: sid, released: false, st: { profiling: false, enabled: false } });
    sock.write(F.frame(1, JSON.stringify({ method: 'NodeWorker.attachedToWorker', params: { sessionId: sid,
      workerInfo: { workerId: sid, type: 'worker', title: `[worker ${sid}] ${sid}`, url: '' }, waitingForDebugger: true } })));
  }
  const capped = await d.waitLog((l) => l.msg === 'worker announcements over the cap, worker threads not watched', 30000, 'the cap');
  assert.strictEqual(capped.worker, 'many');
  assert.strictEqual(capped.off_ms, '60000');
  await L.waitFor(() => many.methods.includes('NodeWorker.disable'), 20000, 'NodeWorker.disable after the fence');
  // Each announcement is counted: refused (within the cap: let go) or
  // capped (past it: released in the fence, then nothing sent).
  let c;
  await L.waitFor(() => { c = status(store).counters; return c.threads_capped + c.threads_refused >= 2000; }, 30000, 'the storm counted');
  assert.ok(c.threads_capped >= 1000 && c.threads_refused <= 1000, JSON.stringify(c));
  // Its workers were let go, and nothing is watched there for now.
  await L.waitFor(() => status(store).targets.filter((t) => t.worker === 'many').length === 1, 20000, 'only many/main left');
  const m = L.cli(['metrics', '--socket', path.join(store, 'control.sock')]).stdout;
  assert.match(m, /^isoprof_threads_capped_total \d+$/m);
  // The healthy target carries on.
  const h1 = cpu('healthy');
  await L.waitFor(() => cpu('healthy') >= h1 + 3, 20000, 'three more healthy windows');
  await stopClean(d, many, store);
});
