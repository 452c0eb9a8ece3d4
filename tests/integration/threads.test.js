// Worker threads of a real Node process (workloads/node-threads.js): each
// Worker is profiled as an isolate of its own under the same target, with
// a thread label; a worker created after attach is held until its heap
// sampler runs (its start-up allocations show in its first heap window);
// a pool that churns
// through short-lived workers leaves the daemon's memory and fds flat.
'use strict';
const { test, after } = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const L = require('./lib');

after(L.cleanup);

const WORKLOAD = path.join(__dirname, 'workloads', 'node-threads.js');

function config(store, port, extra = {}) {
  return L.yamlConfig({ store, targets: [{ port, worker: 'pool', version: 'v1' }], duration: '1s', period: '1500ms', jitter: '0%', heap: '{period: 2s}', ...extra });
}

const status = (store) => {
  const r = L.cli(['status', '--json', '--socket', path.join(store, 'control.sock')]);
  assert.strictEqual(r.status, 0, r.stderr);
  return JSON.parse(r.stdout);
};
// The same, or null while the control socket is not there yet.
const statusOrNull = (store) => (fs.existsSync(path.join(store, 'control.sock')) ? status(store) : null);

const top = (store, args) => L.cli(['top', '--store', store, '--type', 'cpu', '-n', '3', ...args]);

test('worker threads: their own windows, labels and status; the main thread untouched', async () => {
  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  const node = await L.startNode(WORKLOAD);
  const d = await L.startDaemon(config(store, node.port), { dir });
  const att = await d.waitLog((l) => l.msg === 'thread attached' && l.thread === 'pool-1', 30000, 'pool-1 attached');
  assert.strictEqual(att.worker, 'pool');
  // pool-1's CPU windows name threadCrunch first; the main thread's never do
  await L.waitFor(() => {
    const r = top(store, ['--thread', 'pool-1']);
    return r.status === 0 && /^\s*\S+\s+\S+%.*threadCrunch .*node-threads\.js:15$/m.test(r.stdout.split('\n').slice(3, 4).join('\n'));
  }, 30000, 'pool-1 windows led by threadCrunch');
  await L.waitFor(() => L.windows(store, ['--thread', 'main', '--type', 'cpu']).length >= 2, 30000, 'main thread windows');
  assert.ok(!/threadCrunch/.test(top(store, ['--thread', 'main']).stdout), 'the main thread does not run threadCrunch');
  const ws = L.windows(store, ['--thread', 'pool-1']);
  assert.ok(ws.every((w) => w.thread === 'pool-1' && w.worker === 'pool' && w.isolate === Number(att.isolate)), JSON.stringify(ws[0]));
  // a worker created now is held until its heap sampler runs: its first heap window has startupAlloc
  process.kill(node.pid, 'SIGUSR2');
  await L.waitFor(() => /late-1 started after \d+ ms/.test(node.stderrText), 20000, 'late-1 to start');
  await d.waitLog((l) => l.msg === 'thread attached' && l.thread === 'late-1', 20000, 'late-1 attached');
  await L.waitFor(() => {
    const r = L.cli(['top', '--store', store, '--thread', 'late-1', '--type', 'heap', '-n', '5']);
    return r.status === 0 && /startupAlloc/.test(r.stdout);
  }, 30000, 'late-1 heap window naming startupAlloc');
  const st = status(store);
  const threads = st.targets.map((t) => t.thread).sort();
  assert.deepStrictEqual(threads, ['late-1', 'main', 'pool-1']);
  assert.ok(st.targets.every((t) => t.state === 'ready'), JSON.stringify(st.targets));
  assert.ok(st.counters.threads_attached >= 2, JSON.stringify(st.counters));
  // isoprof profile --thread takes a window of that thread
  const out = path.join(dir, 'pool.pb.gz');
  const p = L.cli(['profile', '--socket', path.join(store, 'control.sock'), '--worker', 'pool', '--thread', 'pool-1', '--type', 'cpu', '--seconds', '1', '-o', out], { timeout: 30000 });
  assert.strictEqual(p.status, 0, p.stderr);
  assert.strictEqual(L.pprofTop(out)[0].name, 'threadCrunch');
  const r = await L.stopDaemon(d, { signal: 'SIGTERM' });
  assert.strictEqual(r.code, 0, d.tail());
  assert.strictEqual(d.count((l) => l.level === 'error'), 0, d.tail());
  await L.stop(node);
});

// 1,000 workers; the sanitizer build (ISOPROF_THREADS_CHURN, set by CMake)
// runs fewer, its daemon being several times slower.
const CHURN = Number(process.env.ISOPROF_THREADS_CHURN || 1000);

test(`${CHURN} short-lived workers: the daemon stays flat and counts them`, async () => {
  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  const node = await L.startNode(WORKLOAD, { env: { CHURN: String(CHURN), CHURN_DELAY_MS: '2000' } });
  // Under ASan, freed memory waits in a quarantine of up to 256 MiB, which
  // RSS would measure instead of the daemon; a small one keeps the check
  // about isoprofd (LeakSanitizer checks what is left at exit).
  const env = process.env.ASAN_OPTIONS ? { ASAN_OPTIONS: `${process.env.ASAN_OPTIONS}:quarantine_size_mb=8` } : {};
  const d = await L.startDaemon(config(store, node.port), { dir, env });
  const rss = () => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${d.pid}/status`, 'utf8'))[1]);
  const fds = () => fs.readdirSync(`/proc/${d.pid}/fd`).length;
  let early = null;
  await L.waitFor(() => {
    const st = statusOrNull(store);
    if (st === null) return false;
    const c = st.counters;
    if (early === null && c.threads_attached + c.threads_refused >= CHURN / 5) early = { rss: rss(), fds: fds() };
    return new RegExp(`churn done ${CHURN}`).test(node.stderrText);
  }, 240000, 'the churn to finish');
  await L.waitFor(() => status(store).targets.length === 2, 20000, 'only main and pool-1 left');
  const late = { rss: rss(), fds: fds() };
  const c = status(store).counters;
  assert.ok(c.threads_attached + c.threads_refused >= CHURN * 0.9, JSON.stringify(c));
  assert.ok(c.threads_detached >= c.threads_attached - 2, JSON.stringify(c));
  assert.ok(early !== null);
  assert.ok(late.rss < early.rss * 1.25 + 1024, `RSS ${early.rss} KiB -> ${late.rss} KiB`);
  assert.ok(late.fds <= early.fds + 2, `fds ${early.fds} -> ${late.fds}`);
  const m = L.cli(['metrics', '--socket', path.join(store, 'control.sock')]).stdout;
  assert.match(m, /^isoprof_threads_attached_total \d+$/m);
  const r = await L.stopDaemon(d, { signal: 'SIGTERM' });
  assert.strictEqual(r.code, 0, d.tail());
  await L.stop(node);
});
