// A damaged store is a report, never a crash: `isoprof store check` on a
// truncated or bit-flipped data.mdb exits 2 with a report (no signal);
// isoprofd refuses a damaged store with one log line and exit status 3;
// with store.on_damage: move_aside it moves the files into
// <store>/damaged-<time>/, starts a new store, and that store checks clean.
// A store restored without lock.mdb gets one its owner can open, and a
// check that cannot run says so instead of calling the store damaged.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const L = require('./lib');
const F = require('./fake-inspector');

after(L.cleanup);

let base; // a store the daemon filled, copied for each case

// LMDB's first meta page: its page size is the free list DB's pad, after
// the page header (16 bytes) and magic, version, address and map size.
function pageSize(file) {
  const fd = fs.openSync(file, 'r');
  const b = Buffer.alloc(64);
  fs.readSync(fd, b, 0, 64, 0);
  fs.closeSync(fd);
  assert.strictEqual(b.readUInt32LE(16), 0xbeefc0de, 'an LMDB file');
  return b.readUInt32LE(40);
}

// A fresh copy of the base store (data.mdb only) in a new directory.
function copyStore() {
  const dir = path.join(L.tmpdir(), 'store');
  fs.mkdirSync(dir);
  fs.copyFileSync(path.join(base, 'data.mdb'), path.join(dir, 'data.mdb'));
  return dir;
}

// Cut data.mdb right after its two meta pages (and 100 bytes): every tree
// page, the roots among them, is gone.
function truncated() {
  const dir = copyStore();
  const file = path.join(dir, 'data.mdb');
  fs.truncateSync(file, 2 * pageSize(file) + 100);
  return dir;
}

// One bit flipped in the header of every tree page (the high bit of the
// page's lower bound, which says how many nodes it holds).
function flippedPages() {
  const dir = copyStore();
  const file = path.join(dir, 'data.mdb');
  const buf = fs.readFileSync(file);
  const ps = pageSize(file);
  for (let p = 2 * ps; p + ps <= buf.length; p += ps) buf[p + 8 + 4 + 1] ^= 0x80;
  fs.writeFileSync(file, buf);
  return dir;
}

function storeCheck(dir) {
  const r = L.cli(['store', 'check', '--store', dir]); // throws on a sanitizer report
  assert.strictEqual(r.signal, null, `store check killed by ${r.signal}: ${r.stderr}`);
  return r;
}

const config = (store, onDamage) => {
  const text = L.yamlConfig({ store, targets: [], level: 'info' });
  return onDamage ? text.replace(/^store: \{path: (.*)\}$/m, `store: {path: $1, on_damage: ${onDamage}}`) : text;
};

// Start isoprofd on store and wait until it has exited (a refusal).
async function daemonExit(store, onDamage) {
  const d = await L.startDaemon(config(store, onDamage));
  await L.waitFor(() => d.exitCode !== null || d.signalCode !== null, 30000, `isoprofd to exit:\n${d.tail()}`);
  const r = await d.exited;
  L.assertNoSanitizer(d.raw, 'isoprofd');
  return { d, r };
}

before(async () => {
  const dir = L.tmpdir();
  base = path.join(dir, 'store');
  const fake = await F.startFakeInspector({ url: 'file:///fake/service.js' });
  const d = await L.startDaemon(L.yamlConfig({ store: base, targets: [{ port: fake.port, version: 'v1' }], duration: '1s', period: '1500ms', jitter: '0%' }), { dir });
  await L.waitFor(() => d.count((l) => l.msg === 'window stored') >= 3, 30000, 'three windows stored');
  const r = await L.stopDaemon(d, { signal: 'SIGTERM' });
  assert.strictEqual(r.code, 0, d.tail());
  await fake.close();
  assert.match(L.storeCheck(base), /: ok$/m);
});

test('isoprof store check: a truncated store is a report and exit 2', { timeout: 30000 }, () => {
  const dir = truncated();
  const r = storeCheck(dir);
  assert.strictEqual(r.status, 2, r.stdout + r.stderr);
  assert.match(r.stderr, /^isoprof: store check failed: store file is damaged\n/);
  assert.match(r.stderr, /data\.mdb is \d+ bytes but its meta page says \d+ pages of \d+/);
  // stat and the listings refuse it too, with the same reason.
  for (const cmd of [['store', 'stat'], ['windows']]) {
    const s = L.cli([...cmd, '--store', dir]);
    assert.strictEqual(s.signal, null);
    assert.strictEqual(s.status, 2, `${cmd.join(' ')}: ${s.stderr}`);
    assert.match(s.stderr, /data\.mdb is \d+ bytes but its meta page says/);
  }
});

test('isoprof store check: a bit-flipped store is a report and exit 2', { timeout: 60000 }, () => {
  const r = storeCheck(flippedPages());
  assert.strictEqual(r.status, 2, r.stdout + r.stderr);
  assert.match(r.stderr, /^isoprof: store check failed: store file is damaged\n\S/);
  // Single bits anywhere past the meta pages: clean, or a report; never a signal.
  const size = fs.statSync(path.join(base, 'data.mdb')).size;
  const ps = pageSize(path.join(base, 'data.mdb'));
  let x = 0x2545f491;
  const seen = { 0: 0, 2: 0 };
  for (let i = 0; i < 16; i++) {
    x ^= x << 13; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    const pos = 2 * ps + (x % (size - 2 * ps));
    const dir = copyStore();
    const file = path.join(dir, 'data.mdb');
    const buf = fs.readFileSync(file);
    buf[pos] ^= 1 << (x >>> 29);
    fs.writeFileSync(file, buf);
    const f = storeCheck(dir);
    assert.ok(f.status === 0 || f.status === 2, `flip at ${pos}: status ${f.status}: ${f.stderr}`);
    if (f.status === 2) assert.match(f.stderr, /^isoprof: store check failed: /, `flip at ${pos}`);
    seen[f.status]++;
  }
  process.stderr.write(`single flips: ${seen[0]} clean, ${seen[2]} reported\n`);
});

test('isoprofd refuses a damaged store: one log line, exit 3', { timeout: 60000 }, async () => {
  for (const [what, dir] of [['truncated', truncated()], ['bit-flipped', flippedPages()]]) {
    const before = fs.readdirSync(dir).sort();
    const { d, r } = await daemonExit(dir);
    assert.strictEqual(r.code, 3, `${what}: exit ${r.code} ${r.signal}:\n${d.tail()}`);
    assert.strictEqual(r.signal, null);
    const refusals = d.lines.filter((l) => l.msg === 'store is damaged; refusing to start');
    assert.strictEqual(refusals.length, 1, d.tail());
    assert.strictEqual(refusals[0].level, 'error');
    assert.strictEqual(refusals[0].path, dir);
    assert.ok(refusals[0].problem.length > 0, d.tail());
    assert.match(refusals[0].hint, /isoprof store check/);
    if (what === 'truncated') assert.match(refusals[0].problem, /data\.mdb is \d+ bytes but its meta page says/);
    assert.ok(!d.lines.some((l) => l.msg === 'isoprofd started'), 'it never started');
    // Nothing was moved or created but the lock file LMDB may leave.
    assert.deepStrictEqual(fs.readdirSync(dir).filter((f) => f !== 'lock.mdb').sort(), before.filter((f) => f !== 'lock.mdb'));
  }
});

test('store.on_damage: move_aside moves the files aside and starts a new store', { timeout: 60000 }, async () => {
  const dir = truncated();
  const damagedSize = fs.statSync(path.join(dir, 'data.mdb')).size;
  const d = await L.startDaemon(config(dir, 'move_aside'));
  const moved = await d.waitLog((l) => l.msg === 'store was damaged; moved it aside and starting a new store', 20000, 'the move aside');
  await d.waitLog((l) => l.msg === 'isoprofd started', 20000, 'the start on a new store');
  assert.strictEqual(moved.level, 'warn');
  assert.strictEqual(moved.path, dir);
  assert.match(moved.moved_to, /\/damaged-\d{8}T\d{6}Z(-\d+)?$/);
  assert.strictEqual(path.dirname(moved.moved_to), dir, 'inside the store directory (a StateDirectory cannot be renamed)');
  const r = await L.stopDaemon(d);
  assert.strictEqual(r.code, 0, d.tail());
  // The damaged file is kept as it was, and still reported as damaged.
  assert.strictEqual(fs.statSync(path.join(moved.moved_to, 'data.mdb')).size, damagedSize);
  const old = storeCheck(moved.moved_to);
  assert.strictEqual(old.status, 2, old.stderr);
  // The new store checks clean.
  assert.match(L.storeCheck(dir), /: ok$/m);
  // A second start finds nothing wrong and moves nothing.
  const again = await L.startDaemon(config(dir, 'move_aside'));
  await again.waitLog((l) => l.msg === 'isoprofd started', 20000, 'the second start');
  assert.ok(again.lines.some((l) => l.msg === 'store verified'), again.tail());
  assert.ok(!again.lines.some((l) => /damaged/.test(l.msg || '')), again.tail());
  assert.strictEqual((await L.stopDaemon(again)).code, 0);
  assert.strictEqual(fs.readdirSync(dir).filter((f) => f.startsWith('damaged-')).length, 1);
});

// The mode store_open gives the files it creates, under this process's umask.
function createdMode() {
  const um = process.umask(0o022);
  process.umask(um);
  return 0o640 & ~um;
}

test('a store without lock.mdb (an mdb_copy backup restored): the check leaves one its owner can open', { timeout: 60000 }, async () => {
  const dir = copyStore();
  const lock = path.join(dir, 'lock.mdb');
  assert.ok(!fs.existsSync(lock));
  assert.match(L.storeCheck(dir), /: ok$/m);
  assert.strictEqual(fs.statSync(lock).mode & 0o7777, createdMode(), 'made by store check');
  fs.unlinkSync(lock);
  const d = await L.startDaemon(config(dir));
  await d.waitLog((l) => l.msg === 'isoprofd started', 20000, 'the start');
  assert.ok(d.lines.some((l) => l.msg === 'store verified'), d.tail());
  assert.strictEqual((await L.stopDaemon(d)).code, 0, d.tail());
  assert.strictEqual(fs.statSync(lock).mode & 0o7777, createdMode(), 'made by the check at start');
});

test('isoprof store check that cannot run its check says so and exits 2, not "damaged"', { timeout: 60000 }, () => {
  const dir = copyStore();
  L.storeCheck(dir);
  // Ever more descriptors: too few for the check's pipe, for the walk's
  // open of the store, then enough.
  let said = 0;
  for (let n = 4; n <= 12; n++) {
    const r = L.cli(['-c', `ulimit -n ${n} && exec "$0" "$@"`, L.ISOPROF, 'store', 'check', '--store', dir], { bin: '/bin/sh' });
    assert.strictEqual(r.signal, null, `${n} descriptors: ${r.signal}: ${r.stderr}`);
    if (r.status === 0) continue;
    assert.strictEqual(r.status, 2, `${n} descriptors: ${r.stderr}`);
    assert.match(r.stderr, /^isoprof: .*: could not check the store: .*Too many open files\n$/, `${n} descriptors`);
    assert.doesNotMatch(r.stderr, /damaged/);
    said++;
  }
  assert.ok(said > 0, 'some limit was too low for the check');
});
