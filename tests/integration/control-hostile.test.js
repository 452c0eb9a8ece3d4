// Hostile local clients against the control socket and metrics.listen, and
// the control socket's creation:
//   - idle connections past the connection cap (and an attacker who keeps
//     re-opening them, or keeps 70 slow requests going) never stop a scrape
//     of /metrics or a GET /status: a new connection evicts the oldest one
//     that has no request in progress;
//   - a slowloris dripping a header byte a second, a connection that sends
//     nothing and an idle keep-alive connection are all closed within the
//     request deadline (5 s), the slowloris with a 408;
//   - a symlink at control.socket's path, planted before the start or
//     between bind() and the mode change (an LD_PRELOAD shim plays the
//     attacker who wins that race), is replaced by the socket: the file it
//     points to keeps its mode and group, and the socket is 0600, or 0660
//     and control.group's with control.group.
'use strict';
const { test, before, after, afterEach } = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const http = require('node:http');
const net = require('node:net');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const L = require('./lib');

after(L.cleanup);

const REQUEST_MS = 5000; // agent/control/control.c CTL_REQUEST_MS
const ctx = {};
const opened = new Set(); // raw connections still open, destroyed after each test
afterEach(() => { for (const s of opened) s.destroy(); });

// One request on a fresh connection (Unix socket path or TCP port):
// {status, body, ms}. Rejects on a reset, a hang-up or timeoutMs.
function request(target, method, p, timeoutMs = 3000) {
  return new Promise((resolve, reject) => {
    const where = typeof target === 'number' ? { host: '127.0.0.1', port: target } : { socketPath: target };
    const t0 = Date.now();
    const req = http.request({ ...where, method, path: p, agent: false, timeout: timeoutMs }, (res) => {
      const chunks = [];
      res.on('data', (d) => chunks.push(d));
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString('utf8'), ms: Date.now() - t0 }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${p}: no answer within ${timeoutMs} ms`)));
    req.on('error', (e) => reject(new Error(`${method} ${p} after ${Date.now() - t0} ms: ${e.message}`)));
    req.end();
  });
}

// A raw connection that records when the daemon closed it and what it sent.
function connectRaw(target, onConnect) {
  const where = typeof target === 'number' ? { host: '127.0.0.1', port: target } : { path: target };
  const s = net.connect(where);
  opened.add(s);
  s.t0 = Date.now();
  s.got = '';
  s.goneAt = null;
  s.ready = new Promise((resolve) => s.on('connect', () => { if (onConnect) onConnect(s); resolve(); }));
  s.gone = new Promise((resolve) => s.on('close', () => { s.goneAt = Date.now(); opened.delete(s); resolve(Date.now() - s.t0); }));
  s.on('data', (d) => { s.got += d.toString('latin1'); });
  s.on('error', () => {});
  return s;
}

// n connections that connect and send nothing.
async function openIdle(target, n) {
  const conns = [];
  for (let i = 0; i < n; i++) conns.push(connectRaw(target));
  await Promise.race([Promise.all(conns.map((s) => s.ready)), L.sleep(5000)]);
  return conns;
}

// A slowloris: the start of a request, then one more header byte a second.
function slowloris(target, p = '/metrics') {
  const text = `GET ${p} HTTP/1.1\r\nHost: x\r\nX-Slow: ${'a'.repeat(64)}`;
  let i = 0;
  let iv = null;
  const s = connectRaw(target, (c) => {
    c.write(text.slice(0, 20));
    i = 20;
    iv = setInterval(() => { if (!c.destroyed && i < text.length) c.write(text[i++]); }, 1000);
  });
  s.gone.then(() => clearInterval(iv));
  return s;
}

async function counters() {
  return JSON.parse((await request(ctx.sock, 'GET', '/status')).body).counters;
}

before(async () => {
  const dir = L.tmpdir();
  const metricsPort = await L.freePort();
  const cfg = L.yamlConfig({
    store: path.join(dir, 'store'), targets: [], level: 'info',
    extra: `metrics: {listen: "127.0.0.1:${metricsPort}"}`,
  });
  const d = await L.startDaemon(cfg, { dir });
  await d.waitLog((l) => l.msg === 'control socket listening', 20000, 'the control socket');
  await d.waitLog((l) => l.msg === 'serving metrics', 5000, 'metrics.listen');
  Object.assign(ctx, { d, dir, metricsPort, sock: path.join(dir, 'store', 'control.sock') });
});

test('80 idle TCP connections: each scrape of /metrics is answered at once, the oldest idle are evicted', async () => {
  const before0 = (await counters()).control_rejected_connections;
  const idle = await openIdle(ctx.metricsPort, 80);
  await L.sleep(300); // the daemon accepted them all
  for (let i = 0; i < 5; i++) {
    const r = await request(ctx.metricsPort, 'GET', '/metrics');
    assert.strictEqual(r.status, 200, `scrape ${i}`);
    assert.match(r.body, /^isoprof_control_requests_total \d+$/m);
    assert.ok(r.ms < 2000, `scrape ${i} took ${r.ms} ms`);
    await L.sleep(200);
  }
  // 80 idle over 64 slots: 16 evicted, and one more for the first scrape
  // (each scrape's slot is free again once it is answered), the oldest first
  const evicted = idle.filter((s) => s.goneAt !== null);
  assert.ok(evicted.length >= 17, `${evicted.length} idle connections evicted`);
  assert.ok(idle.slice(-30).every((s) => s.goneAt === null), 'the newest are still open: the oldest went');
  const n = await counters();
  assert.ok(n.control_rejected_connections - before0 >= 17, JSON.stringify(n));
  // and the rest go at the request deadline, silently (no request, no answer)
  const lives = await Promise.all(idle.slice(-30).map((s) => s.gone));
  for (const ms of lives) assert.ok(ms >= REQUEST_MS - 1000 && ms < REQUEST_MS + 3000, `an idle connection lived ${ms} ms`);
  assert.ok(idle.every((s) => s.got === ''));
});

test('an attacker re-opening 70 idle connections for 12 s: every scrape gets in', async () => {
  let stop = false;
  const live = new Set();
  const keep = () => {
    while (!stop && live.size < 70) {
      const s = connectRaw(ctx.metricsPort);
      live.add(s);
      s.gone.then(() => { live.delete(s); setTimeout(keep, 50); });
    }
  };
  keep();
  await L.sleep(500);
  const t0 = Date.now();
  let n = 0;
  try {
    while (Date.now() - t0 < 12000) {
      const r = await request(ctx.metricsPort, 'GET', '/metrics');
      assert.strictEqual(r.status, 200);
      assert.ok(r.ms < 2000, `scrape took ${r.ms} ms`);
      n++;
      await L.sleep(1000);
    }
  } finally {
    stop = true;
    for (const s of live) s.destroy();
  }
  assert.ok(n >= 8, `${n} scrapes`);
});

test('70 slow requests in progress: a scrape still gets in (they go before anything else does)', async () => {
  const slow = [];
  for (let i = 0; i < 70; i++) slow.push(slowloris(ctx.metricsPort));
  await Promise.race([Promise.all(slow.map((s) => s.ready)), L.sleep(5000)]);
  await L.sleep(300);
  const r = await request(ctx.metricsPort, 'GET', '/metrics');
  assert.strictEqual(r.status, 200);
  assert.ok(r.ms < 2000, `scrape took ${r.ms} ms`);
  for (const s of slow) s.destroy();
});

test('the control socket: 80 idle connections, GET /status still answers', async () => {
  const idle = await openIdle(ctx.sock, 80);
  await L.sleep(300);
  for (let i = 0; i < 3; i++) {
    const r = await request(ctx.sock, 'GET', '/status');
    assert.strictEqual(r.status, 200, `GET /status ${i}`);
    assert.ok(r.ms < 2000, `GET /status ${i} took ${r.ms} ms`);
  }
  assert.ok(idle.filter((s) => s.goneAt !== null).length >= 17);
  for (const s of idle) s.destroy();
});

test('slowloris on metrics.listen and on the socket: 408 within the request deadline', async () => {
  const tcp = slowloris(ctx.metricsPort);
  const unix = slowloris(ctx.sock, '/status');
  const [a, b] = await Promise.all([tcp.gone, unix.gone]);
  for (const [what, ms, s] of [['tcp', a, tcp], ['unix', b, unix]]) {
    assert.ok(ms >= REQUEST_MS - 1000 && ms < REQUEST_MS + 3000, `${what}: slowloris closed after ${ms} ms`);
    assert.match(s.got, /^HTTP\/1\.1 408 /, what);
    assert.match(s.got, /\r\nConnection: close\r\n/, what);
  }
});

test('an idle keep-alive connection is closed at the request deadline after its answer', async () => {
  const s = connectRaw(ctx.metricsPort);
  await s.ready;
  s.write('GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n');
  await L.waitFor(() => /\r\n\r\n/.test(s.got), 3000, 'the answer head');
  const answered = Date.now();
  assert.match(s.got, /^HTTP\/1\.1 200 /);
  assert.match(s.got, /\r\nConnection: keep-alive\r\n/);
  await s.gone;
  const idleMs = s.goneAt - answered;
  assert.ok(idleMs >= REQUEST_MS - 1000 && idleMs < REQUEST_MS + 3000, `closed ${idleMs} ms after the answer`);
  assert.ok(ctx.d.alive());
});

// --- the socket file -------------------------------------------------------

// A group to give the socket: one that is not ours (as root), else our own.
function otherGroup() {
  const mine = process.getgid();
  const want = process.getuid() === 0 ? ['nogroup', 'nobody', 'daemon', 'adm'] : [];
  for (const g of want) {
    const r = spawnSync('getent', ['group', g], { encoding: 'utf8' });
    const f = r.status === 0 ? r.stdout.trim().split(':') : [];
    if (f.length >= 3 && Number(f[2]) !== mine) return { name: f[0], gid: Number(f[2]) };
  }
  const r = spawnSync('id', ['-gn'], { encoding: 'utf8' });
  return { name: r.stdout.trim(), gid: mine };
}

// A victim file the test owns, and a symlink to it where the socket goes.
function plant(dir) {
  const victim = path.join(dir, 'victim');
  fs.writeFileSync(victim, 'keep me\n');
  fs.chmodSync(victim, 0o644);
  const sock = path.join(dir, 'ctl.sock');
  return { victim, sock, st: fs.statSync(victim) };
}

function assertUntouched(v) {
  const st = fs.statSync(v.victim);
  assert.strictEqual((st.mode & 0o7777).toString(8), (v.st.mode & 0o7777).toString(8), 'the victim keeps its mode');
  assert.strictEqual(st.uid, v.st.uid, 'the victim keeps its owner');
  assert.strictEqual(st.gid, v.st.gid, 'the victim keeps its group');
  assert.strictEqual(fs.readFileSync(v.victim, 'utf8'), 'keep me\n');
}

async function startWithSocket(v, { group, env } = {}) {
  const dir = L.tmpdir();
  const ctl = group ? `{socket: ${JSON.stringify(v.sock)}, group: ${JSON.stringify(group)}}` : `{socket: ${JSON.stringify(v.sock)}}`;
  const cfg = L.yamlConfig({ store: path.join(dir, 'store'), targets: [], level: 'info', extra: `control: ${ctl}` });
  const d = await L.startDaemon(cfg, { dir, env });
  await d.waitLog((l) => l.msg === 'control socket listening', 20000, 'the control socket');
  return d;
}

async function checkSocket(d, v, mode, gid) {
  assertUntouched(v);
  const st = fs.lstatSync(v.sock);
  assert.ok(st.isSocket(), 'a socket at the path, not the symlink');
  assert.strictEqual((st.mode & 0o777).toString(8), mode.toString(8));
  if (gid !== undefined) assert.strictEqual(st.gid, gid);
  assertUntouched(v);
  assert.strictEqual((await request(v.sock, 'GET', '/status')).status, 200);
  assert.strictEqual((await L.stopDaemon(d)).code, 0, d.tail());
  assert.ok(!fs.existsSync(v.sock), 'the socket was removed at stop');
  assertUntouched(v);
  // no private directory left beside it
  assert.deepStrictEqual(fs.readdirSync(path.dirname(v.sock)).sort(), ['victim']);
}

test('a symlink planted at control.socket is replaced, never followed (0600, and 0660 with control.group)', async () => {
  const g = otherGroup();
  for (const group of [null, g.name]) {
    const v = plant(L.tmpdir());
    fs.symlinkSync(v.victim, v.sock);
    const d = await startWithSocket(v, { group });
    await checkSocket(d, v, group ? 0o660 : 0o600, group ? g.gid : undefined);
  }
});

// The attacker who wins the race: right after the daemon's bind() on a Unix
// socket in the directory of ISOPROF_TEST_RACE_LINK, the shim replaces
// whatever is at that path by a symlink to ISOPROF_TEST_RACE_TARGET.
const SHIM = `
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
int bind(int fd, const struct sockaddr *sa, socklen_t len)
{
    static int (*real)(int, const struct sockaddr *, socklen_t);
    static int done;
    if (real == NULL)
        real = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "bind");
    int rc = real(fd, sa, len);
    const char *link = getenv("ISOPROF_TEST_RACE_LINK");
    const char *target = getenv("ISOPROF_TEST_RACE_TARGET");
    if (rc != 0 || done || link == NULL || target == NULL || sa->sa_family != AF_UNIX)
        return rc;
    const char *p = ((const struct sockaddr_un *)sa)->sun_path;
    const char *slash = strrchr(link, '/');
    size_t dl = slash ? (size_t)(slash - link) : 0;
    if (strncmp(p, "/proc/self/fd/", 14) != 0 && (strncmp(p, link, dl) != 0 || p[dl] != '/'))
        return rc;
    done = 1;
    unlink(link);
    symlink(target, link);
    return rc;
}
`;

function buildShim() {
  const dir = L.tmpdir();
  fs.writeFileSync(path.join(dir, 'race.c'), SHIM);
  const so = path.join(dir, 'race.so');
  const cc = process.env.CC || 'cc';
  const r = spawnSync(cc, ['-shared', '-fPIC', '-O1', '-o', so, path.join(dir, 'race.c'), '-ldl'], { encoding: 'utf8' });
  if (r.error || r.status !== 0) throw new Error(`${cc} could not build the race shim: ${r.error ? r.error.message : r.stderr}`);
  return so;
}

test('a symlink planted between bind() and the mode change: the file it names is not touched', async () => {
  const so = buildShim();
  const g = otherGroup();
  for (const group of [null, g.name]) {
    const v = plant(L.tmpdir());
    const asan = process.env.ASAN_OPTIONS ? `${process.env.ASAN_OPTIONS}:` : '';
    const env = {
      LD_PRELOAD: so,
      ASAN_OPTIONS: `${asan}verify_asan_link_order=0`,
      ISOPROF_TEST_RACE_LINK: v.sock,
      ISOPROF_TEST_RACE_TARGET: v.victim,
    };
    const d = await startWithSocket(v, { group, env });
    await checkSocket(d, v, group ? 0o660 : 0o600, group ? g.gid : undefined);
  }
});

test('the daemon carried on', async () => {
  assert.ok(ctx.d.alive());
  assert.strictEqual((await request(ctx.sock, 'GET', '/status')).status, 200);
  assert.strictEqual((await L.stopDaemon(ctx.d)).code, 0, ctx.d.tail());
});
