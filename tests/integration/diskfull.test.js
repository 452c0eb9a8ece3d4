// The store's filesystem full: a tmpfs of the test's own, filled to the last
// byte while the daemon profiles a Node isolate. The daemon keeps running;
// its writes fail and are retried; what waits is held up to
// store.pending_max and the oldest windows past it are dropped and counted;
// an anomaly flagged meanwhile is recorded once space returns, with the
// windows behind it; nothing committed is lost and `store check` is clean.
//
// Mounting needs root (or CAP_SYS_ADMIN): elsewhere the test is skipped and
// says why.
'use strict';
const { test } = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const L = require('./lib');

// Unmounted (lazily: the daemon may still hold its files) at the end of
// the test, before the harness removes the temp dirs, and at exit.
const mounts = new Set();
function unmountAll() {
  for (const m of mounts) spawnSync('umount', ['-l', m]);
  mounts.clear();
}
process.on('exit', unmountAll);

// A tmpfs of `size` at a new directory of dir; null (and why) if refused.
function mountTmpfs(dir, size) {
  const mnt = path.join(dir, 'mnt');
  fs.mkdirSync(mnt);
  const r = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${size},mode=0700`, 'isoprof-test', mnt], { encoding: 'utf8' });
  if (r.error || r.status !== 0) return { why: (r.error && r.error.message) || r.stderr.trim() };
  mounts.add(mnt);
  return { mnt };
}

// Writes until the filesystem refuses: ENOSPC, the disk is full.
function fill(file) {
  const fd = fs.openSync(file, 'w');
  try {
    for (const size of [1 << 20, 64 << 10, 4 << 10, 512, 1]) {
      const buf = Buffer.alloc(size, 0x5a);
      try {
        for (;;) fs.writeSync(fd, buf);
      } catch (e) {
        if (e.code !== 'ENOSPC') throw e;
      }
    }
  } finally {
    fs.closeSync(fd);
  }
}

test('a full disk: writes retried, the oldest windows past store.pending_max dropped and counted, recovery when space returns', async (t) => {
  const dir = L.tmpdir();
  const m = mountTmpfs(dir, '16m');
  if (!m.mnt) {
    t.skip(`cannot mount a tmpfs here (${m.why}): needs root or CAP_SYS_ADMIN`);
    return;
  }
  try {
    await fullDisk(dir, m.mnt);
  } finally {
    unmountAll();
  }
});

async function fullDisk(dir, mnt) {
  const store = path.join(mnt, 'store');
  const node = await L.startNode(path.join(L.ROOT, 'tests/integration/workloads/node-hot.js'));
  const cfgOf = (limit) => L.yamlConfig({
    store, pendingMax: '16KiB', targets: [{ port: node.port, worker: 'full', memory_limit: limit }],
    duration: '100ms', period: '150ms', jitter: '0%', memoryPoll: '200ms',
  });
  const d = await L.startDaemon(cfgOf('128MiB'), { dir });
  await L.waitFor(() => d.count((l) => l.msg === 'window stored') >= 3, 30000, 'three windows stored');

  fill(path.join(mnt, 'filler'));
  const full = d.lines.length;
  // LMDB says ENOSPC, or EIO for a short write; the log names the free space
  await d.waitLog((l) => l.msg === 'store write failed, will retry' && l.fs_free === '0', 30000, 'a write refused for want of space', full);
  // flagged while the disk is full: the record waits with the windows
  fs.writeFileSync(d.config, cfgOf('1MiB'));
  process.kill(d.pid, 'SIGHUP');
  await d.waitLog((l) => l.msg === 'anomaly flagged' && l.kind === 'memory_near_limit', 30000, 'memory_near_limit flagged', full);
  await d.waitLog((l) => l.msg === 'windows dropped: the store cannot take them', 60000, 'windows dropped past store.pending_max', full);
  assert.ok(d.alive(), d.tail());
  assert.strictEqual(d.count((l, i) => i >= full && l.msg === 'anomaly recorded'), 0, 'nothing is recorded while the disk is full');
  // said once, then at most every 10 s, with the count
  const drops = d.lines.filter((l) => l.msg === 'windows dropped: the store cannot take them');
  assert.ok(drops.length <= 2, drops.map((l) => l.raw).join('\n'));
  assert.ok(Number(drops[0].held_bytes) > 16 * 1024, drops[0].raw);

  fs.unlinkSync(path.join(mnt, 'filler'));
  const freed = d.lines.length;
  // the backoff is at most 30 s
  await d.waitLog((l) => l.msg === 'store written again', 60000, 'writes to go through again', freed);
  await d.waitLog((l) => l.msg === 'anomaly recorded' && l.kind === 'memory_near_limit', 60000, 'the anomaly recorded once space returned', freed);
  await d.waitLog((l) => l.msg === 'window stored' && l.anomaly === 'memory_near_limit', 60000, 'a window of the anomaly stored', freed);
  const status = JSON.parse(L.cli(['status', '--json', '--socket', path.join(store, 'control.sock')]).stdout);
  assert.ok(status.counters.windows_dropped > 0, JSON.stringify(status.counters));
  assert.ok(status.counters.store_errors > 0, JSON.stringify(status.counters));

  const r = await L.stopDaemon(d, { signal: 'SIGTERM' });
  assert.strictEqual(r.code, 0, d.tail());
  const errors = d.lines.filter((l) => l.level === 'error' && l.msg !== 'store write failed, will retry');
  assert.deepStrictEqual(errors.map((l) => l.raw), []);
  // every window logged as stored is in the store (none was evicted)
  const stored = d.lines.filter((l) => l.msg === 'window stored').map((l) => l.id).sort();
  const counters = d.lines.find((l) => l.msg === 'counters');
  assert.strictEqual(Number(counters.windows_stored), stored.length, counters.raw);
  assert.strictEqual(Number(counters.windows_evicted), 0, counters.raw);
  assert.deepStrictEqual(L.windows(store, []).map((w) => w.id).sort(), stored);
  L.storeCheck(store);
  const an = L.anomalies(store, []);
  assert.deepStrictEqual(an.map((a) => a.kind), ['memory_near_limit'], JSON.stringify(an));
  await L.stop(node);
}
