// The control socket and the metrics listener against real Node isolates:
// GET /status (over the socket and through `isoprof status`), on-demand CPU
// and heap profiles while the schedule runs (`isoprof profile`, concurrent
// requests for one isolate and another, a merged one for a worker with two
// isolates), every error status, the socket's permissions (a client run as
// nobody is refused), hostile clients (garbage, a 100 MB header, slowloris,
// 100 connections) and metrics.listen on a loopback port.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const http = require('node:http');
const net = require('node:net');
const path = require('node:path');
const zlib = require('node:zlib');
const { spawn, spawnSync } = require('node:child_process');
const L = require('./lib');

after(L.cleanup);

const ctx = {};
const SANITIZED = (() => {
  const bin = fs.readFileSync(L.ISOPROFD);
  return bin.includes('__asan_init') || bin.includes('__ubsan_handle');
})();

// One request on the control socket (or a TCP port): {status, headers, body}.
function request(target, method, p, { timeoutMs = 30000, headers } = {}) {
  return new Promise((resolve, reject) => {
    const where = typeof target === 'number' ? { host: '127.0.0.1', port: target } : { socketPath: target };
    const req = http.request({ ...where, method, path: p, agent: false, headers, timeout: timeoutMs }, (res) => {
      const chunks = [];
      res.on('data', (d) => chunks.push(d));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${p}: timeout`)));
    req.on('error', reject);
    req.end();
  });
}

const json = (r) => JSON.parse(r.body.toString('utf8'));

// isoprof without blocking the test's own event loop.
function cliAsync(args, env = {}) {
  return new Promise((resolve) => {
    const c = L.track(spawn(L.ISOPROF, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } }), 'isoprof');
    const out = [];
    c.stdout.on('data', (d) => out.push(d));
    c.exited.then(({ code, signal }) => {
      L.assertNoSanitizer(c.stderrText, 'isoprof');
      resolve({ status: code, signal, stdout: Buffer.concat(out), stderr: c.stderrText });
    });
  });
}

// Raw bytes on a fresh connection; resolves with what came back once the
// server closed it (or after timeoutMs).
function raw(sock, bytes, timeoutMs = 5000) {
  return new Promise((resolve) => {
    const s = net.connect(sock);
    const got = [];
    const t = setTimeout(() => s.destroy(), timeoutMs);
    s.on('connect', () => s.write(bytes));
    s.on('data', (d) => got.push(d));
    s.on('error', () => {});
    s.on('close', () => { clearTimeout(t); resolve(Buffer.concat(got).toString('latin1')); });
  });
}

function vmHwmKiB(pid) {
  const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : 0;
}

before(async () => {
  const [hot, twin1, twin2] = await Promise.all([
    L.startNode(path.join(L.WORKLOADS, 'node-hot.js')),
    L.startNode(path.join(L.WORKLOADS, 'node-light.js')),
    L.startNode(path.join(L.WORKLOADS, 'node-light.js')),
  ]);
  // A store directory nobody may traverse, so a refused client is refused by
  // the socket's own mode, not by a directory on the way.
  const dir = L.tmpdir();
  fs.chmodSync(dir, 0o755);
  const store = path.join(dir, 'store');
  fs.mkdirSync(store, { mode: 0o755 });
  fs.chmodSync(store, 0o755);
  const metricsPort = await L.freePort();
  const cfg = L.yamlConfig({
    store,
    targets: [
      { port: hot.port, worker: 'hot', version: 'v1' },
      { port: twin1.port, worker: 'twin', version: 'v2' },
      { port: twin2.port, worker: 'twin', version: 'v2' },
    ],
    duration: '2s', period: '3s', interval: '1ms', level: 'info',
    extra: `metrics: {listen: "127.0.0.1:${metricsPort}"}`,
  });
  const d = await L.startDaemon(cfg, { dir });
  await L.waitFor(() => d.count((l) => l.msg === 'target attached') >= 3, 20000, 'three targets attached');
  Object.assign(ctx, { d, dir, store, sock: path.join(store, 'control.sock'), metricsPort, hot, twin1, twin2 });
  // Every target READY (heap sampling on) before the tests ask for windows.
  await L.waitFor(async () => {
    const s = json(await request(ctx.sock, 'GET', '/status'));
    return s.targets.length === 3 && s.targets.every((t) => t.state === 'ready' && t.memory.limit !== null);
  }, 15000, 'three ready targets in /status, their limits known');
});

test('GET /status names the attached targets; isoprof status and --json', async () => {
  const r = await request(ctx.sock, 'GET', '/status');
  assert.strictEqual(r.status, 200);
  assert.strictEqual(r.headers['content-type'], 'application/json');
  assert.strictEqual(Number(r.headers['content-length']), r.body.length);
  const s = json(r);
  assert.strictEqual(typeof s.version, 'string');
  assert.ok(s.uptime_s >= 0);
  const hot = s.targets.find((t) => t.worker === 'hot');
  assert.ok(hot, JSON.stringify(s.targets));
  assert.strictEqual(hot.version, 'v1');
  assert.strictEqual(hot.runtime, 'node');
  assert.strictEqual(hot.endpoint, `127.0.0.1:${ctx.hot.port}`);
  assert.strictEqual(hot.state, 'ready');
  assert.ok(Number.isInteger(hot.isolate));
  // memory_limit auto: V8's limit for a process without heap flags.
  assert.strictEqual(hot.memory.limit_source, 'auto:v8-default');
  assert.ok(hot.memory.limit >= 1024 * 1024 * 1024, JSON.stringify(hot.memory));
  assert.ok('cpu' in hot.last_window && 'heap' in hot.last_window);
  assert.strictEqual(hot.anomaly, null);
  assert.strictEqual(s.targets.filter((t) => t.worker === 'twin').length, 2);
  for (const k of ['schedule', 'store', 'outbox', 'counters']) assert.ok(s[k], `/status has ${k}`);
  ctx.isolates = Object.fromEntries(['hot', 'twin'].map((w) => [w, s.targets.filter((t) => t.worker === w).map((t) => t.isolate)]));

  // the table (the socket found from --store), and the raw JSON
  const table = await cliAsync(['status', '--store', ctx.store]);
  assert.strictEqual(table.status, 0, table.stderr);
  const text = table.stdout.toString();
  assert.match(text, /^WORKER\s+VERSION\s+ISOLATE\s+RUNTIME\s+STATE\s+MEMORY\s+LIMIT FROM/);
  assert.match(text, new RegExp(`^hot\\s+v1\\s+${hot.isolate}\\s+node\\s+ready\\s+\\S+/\\d+\\.\\dGiB\\s+auto:v8-default\\s`, 'm'));
  assert.strictEqual(text.split('\n').filter((l) => /^twin\s+v2\s/.test(l)).length, 2);
  assert.match(text, /^schedule\s+\d+ windows? running, \d+ delayed/m);
  assert.match(text, /^store\s+.*store/m);
  assert.match(text, /^agent\s+isoprofd \S+ \(pid \d+\), up /m);
  const raw1 = await cliAsync(['status', '--json'], { ISOPROF_SOCKET: ctx.sock });
  assert.strictEqual(raw1.status, 0, raw1.stderr);
  const j = JSON.parse(raw1.stdout.toString());
  assert.deepStrictEqual(j.targets.map((t) => t.isolate).sort(), s.targets.map((t) => t.isolate).sort());

  // no agent there
  const none = await cliAsync(['status', '--socket', path.join(ctx.dir, 'nothing.sock')]);
  assert.strictEqual(none.status, 2);
  assert.match(none.stderr, /^isoprof: cannot connect to .*nothing\.sock: No such file or directory \(is isoprofd running\? --socket\)\n$/);
});

test('on-demand: cpu and heap while the schedule runs, concurrent requests, go tool pprof reads them', async () => {
  const out = (n) => path.join(ctx.dir, n);
  const [twinIso] = ctx.isolates.twin;
  const t0 = Date.now();
  // two for the same isolate (one to stdout), one for another isolate
  const [a, b, c] = await Promise.all([
    cliAsync(['profile', '--socket', ctx.sock, '--worker', 'hot', '--type', 'cpu', '--seconds', '2', '-o', out('a.pb.gz')]),
    cliAsync(['profile', '--socket', ctx.sock, '--worker', 'hot', '--version', 'v1', '--type', 'cpu', '--seconds', '2']),
    cliAsync(['profile', '--socket', ctx.sock, '--worker', 'twin', '--isolate', String(twinIso), '--type', 'cpu', '--seconds', '2', '--interval', '500us', '-o', out('c.pb.gz')]),
  ]);
  const ms = Date.now() - t0;
  for (const [n, r] of [['a', a], ['b', b], ['c', c]]) assert.strictEqual(r.status, 0, `${n}: ${r.stderr}`);
  assert.ok(ms >= 1900 && ms < 15000, `three 2 s windows answered in ${ms} ms`);
  assert.ok(!fs.existsSync(out('a.pb.gz.tmp')), 'the .tmp file was renamed');
  fs.writeFileSync(out('b.pb.gz'), b.stdout);
  assert.ok(zlib.gunzipSync(b.stdout).length > 0);
  for (const f of ['a.pb.gz', 'b.pb.gz', 'c.pb.gz']) {
    const top = L.goPprof(['-top', out(f)]);
    assert.match(top, /Type: cpu/, `${f}: ${top}`);
  }
  assert.ok(L.pprofTop(out('a.pb.gz')).length > 0);

  // heap (the worker name percent-encoded over the raw socket, then the CLI).
  // A 503 "ask again" is the daemon's answer when V8 said its sampler was
  // not started and the daemon restarted it. It came once under ASan beside
  // a CPU hog, with no other client on the target (likely the teardown of
  // a session the daemon dropped, stopping the sampler after the next
  // session started it). The contract is that asking again then works.
  const askAgain = (st, text) => st === 503 && /ask again/.test(text);
  let h = await request(ctx.sock, 'POST', '/profile?worker=h%6Ft&type=heap');
  for (let i = 0; i < 3 && askAgain(h.status, h.body.toString()); i++) h = await request(ctx.sock, 'POST', '/profile?worker=h%6Ft&type=heap');
  assert.strictEqual(h.status, 200, h.body.toString());
  assert.strictEqual(h.headers['content-type'], 'application/octet-stream');
  assert.strictEqual(Number(h.headers['content-length']), h.body.length);
  let hc = await cliAsync(['profile', '--socket', ctx.sock, '--worker', 'hot', '--type', 'heap', '-o', out('h.pb.gz')]);
  for (let i = 0; i < 3 && hc.status !== 0 && /ask again/.test(hc.stderr); i++) {
    hc = await cliAsync(['profile', '--socket', ctx.sock, '--worker', 'hot', '--type', 'heap', '-o', out('h.pb.gz')]);
  }
  assert.strictEqual(hc.status, 0, hc.stderr);
  assert.match(L.goPprof(['-top', out('h.pb.gz')]), /Type: inuse_space/);

  // stored and marked, beside the scheduled windows
  const ws = L.windows(ctx.store);
  const od = ws.filter((w) => w.on_demand);
  assert.ok(od.some((w) => w.worker === 'hot' && w.type === 'cpu'), JSON.stringify(od));
  assert.ok(od.some((w) => w.worker === 'hot' && w.type === 'heap'));
  assert.ok(od.some((w) => w.worker === 'twin' && w.isolate === twinIso && w.type === 'cpu' && w.interval === 500000));
  // the schedule ran too (its window may still be open or in the writer
  // while the on-demand ones answered: wait for it rather than race it)
  await L.waitFor(() => L.windows(ctx.store).some((w) => !w.on_demand && w.type === 'cpu'), 30000, 'a scheduled CPU window beside the on-demand ones');
});

test('several isolates: 409 with their ids, all=1 merges them', async () => {
  const r = await request(ctx.sock, 'POST', '/profile?worker=twin&type=cpu&seconds=1');
  assert.strictEqual(r.status, 409);
  const j = json(r);
  assert.match(j.error, /twin has 2 attached isolates/);
  assert.deepStrictEqual([...j.isolates].sort(), [...ctx.isolates.twin].sort());
  const cli409 = await cliAsync(['profile', '--socket', ctx.sock, '--worker', 'twin', '--type', 'cpu', '--seconds', '1', '-o', path.join(ctx.dir, 'x')]);
  assert.strictEqual(cli409.status, 1);
  for (const id of ctx.isolates.twin) assert.ok(cli409.stderr.includes(String(id)), cli409.stderr);
  assert.ok(!fs.existsSync(path.join(ctx.dir, 'x')));

  const f = path.join(ctx.dir, 'merged.pb.gz');
  const all = await cliAsync(['profile', '--socket', ctx.sock, '--worker', 'twin', '--type', 'cpu', '--seconds', '1', '--all', '-o', f]);
  assert.strictEqual(all.status, 0, all.stderr);
  assert.match(L.goPprof(['-top', f]), /Type: cpu/);
});

test('errors: 404, 400 for each bad parameter, 405, and the CLI exit codes', async () => {
  const post = (q) => request(ctx.sock, 'POST', `/profile?${q}`);
  const r404 = await post('worker=nobody-here&type=cpu');
  assert.strictEqual(r404.status, 404);
  assert.deepStrictEqual(json(r404), { error: 'unknown worker nobody-here' });
  assert.strictEqual(r404.headers['content-type'], 'application/json');
  for (const [q, re] of [
    ['worker=hot&type=cpu&color=red', /unknown parameter 'color'/],
    ['worker=hot&type=x', /type must be cpu, heap or snapshot/],
    ['worker=hot&type=cpu&seconds=0', /seconds must be/],
    ['worker=hot&type=cpu&seconds=3601', /seconds must be/],
    ['worker=hot&type=cpu&interval=1us', /interval must be a duration from 100us to 1s/],
    ['worker=hot&type=cpu&interval=2s', /interval must be/],
    ['worker=hot&type=cpu&isolate=abc', /isolate must be/],
    ['worker=hot&type=cpu&isolate=4294967296', /isolate must be/],
    ['worker=hot&worker=hot&type=cpu', /given twice/],
    ['worker=hot', /type is required/],
    ['type=cpu', /worker is required/],
    ['worker=h%ZZ&type=cpu', /percent-encoding/],
  ]) {
    const r = await post(q);
    assert.strictEqual(r.status, 400, `${q}: ${r.status} ${r.body}`);
    assert.match(json(r).error, re, q);
  }
  const nv = await post('worker=hot&version=v9&type=cpu');
  assert.strictEqual(nv.status, 404);
  const r405 = await request(ctx.sock, 'GET', '/profile?worker=hot&type=cpu');
  assert.strictEqual(r405.status, 405);
  assert.strictEqual(r405.headers.allow, 'POST');
  const s405 = await request(ctx.sock, 'DELETE', '/status');
  assert.strictEqual(s405.status, 405);
  assert.match(s405.headers.allow, /GET/);
  const unknown = await request(ctx.sock, 'GET', '/nope');
  assert.strictEqual(unknown.status, 404);
  assert.match(json(unknown).error, /no such path/);

  const c404 = await cliAsync(['profile', '--socket', ctx.sock, '--worker', 'nobody-here', '--type', 'cpu', '-o', path.join(ctx.dir, 'y')]);
  assert.strictEqual(c404.status, 1);
  assert.match(c404.stderr, /unknown worker nobody-here/);
  const usage = await cliAsync(['profile', '--socket', ctx.sock, '--worker', 'hot', '--type', 'cpu', '--interval', '1us', '-o', path.join(ctx.dir, 'y')]);
  assert.strictEqual(usage.status, 2);
});

test('metrics: isoprof metrics, and metrics.listen serves GET /metrics only', async () => {
  const m = await cliAsync(['metrics', '--socket', ctx.sock]);
  assert.strictEqual(m.status, 0, m.stderr);
  assert.match(m.stdout.toString(), /^isoprof_control_requests_total \d+$/m);
  const r = await request(ctx.metricsPort, 'GET', '/metrics');
  assert.strictEqual(r.status, 200);
  assert.strictEqual(r.headers['content-type'], 'text/plain; version=0.0.4; charset=utf-8');
  assert.match(r.body.toString(), /^# TYPE isoprof_\w+ (counter|gauge)$/m);
  for (const p of ['/status', '/', '/profile?worker=hot&type=cpu']) {
    const x = await request(ctx.metricsPort, p.startsWith('/profile') ? 'POST' : 'GET', p);
    assert.strictEqual(x.status, 404, `${p} on metrics.listen`);
  }
});

test('permissions: the socket is 0600 and nobody cannot connect; a second agent is refused', async (t) => {
  const st = fs.statSync(ctx.sock);
  assert.ok(st.isSocket());
  assert.strictEqual(st.mode & 0o777, 0o600);
  if (process.getuid() !== 0) {
    t.skip('needs root to run a client as nobody');
  } else {
    const probe = `const s=require('net').connect(${JSON.stringify(ctx.sock)});` +
      "s.on('connect',()=>{console.log('CONNECTED');process.exit(0)});s.on('error',(e)=>{console.log(e.code);process.exit(0)})";
    const r = spawnSync('setpriv', ['--reuid=nobody', '--regid=nogroup', '--clear-groups', process.execPath, '-e', probe], { encoding: 'utf8', timeout: 10000 });
    assert.strictEqual(r.status, 0, r.stderr);
    assert.strictEqual(r.stdout.trim(), 'EACCES');
  }
  // another isoprofd on the same socket path stops at once and says why
  const dir2 = L.tmpdir();
  const cfg = L.yamlConfig({ store: path.join(dir2, 'store'), targets: [], extra: `control: {socket: ${JSON.stringify(ctx.sock)}}` });
  const d2 = await L.startDaemon(cfg, { dir: dir2 });
  const { code } = await d2.exited;
  assert.notStrictEqual(code, 0);
  assert.match(d2.raw, /another isoprofd listens on the control socket/);
  assert.strictEqual((await request(ctx.sock, 'GET', '/status')).status, 200, 'the first one still answers');
});

test('hostile clients: garbage, 100 MB header, slowloris, 100 connections; the daemon carries on', async () => {
  const { d, sock } = ctx;
  // slowloris, in the background: a byte a second
  const slow = new Promise((resolve) => {
    const s = net.connect(sock);
    const text = 'GET /status HTTP/1.1\r\nX-Slow: ' + 'a'.repeat(64);
    let i = 0;
    let got = '';
    const t0 = Date.now();
    const iv = setInterval(() => { if (!s.destroyed && i < text.length) s.write(text[i++]); }, 1000);
    s.on('connect', () => s.write(text[i++]));
    s.on('data', (b) => { got += b.toString('latin1'); });
    s.on('error', () => {});
    s.on('close', () => { clearInterval(iv); resolve({ ms: Date.now() - t0, got }); });
  });

  const hwm0 = vmHwmKiB(d.pid);
  const garbage = await raw(sock, Buffer.from('\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n', 'latin1'));
  assert.match(garbage, /^HTTP\/1\.1 400 /);
  assert.match(garbage, /\r\nConnection: close\r\n/);

  // 100 MB of one header: 431 after 16 KiB, nothing buffered
  const big = await new Promise((resolve) => {
    const s = net.connect(sock);
    let got = '';
    let sent = 0;
    let closed = false;
    const line = Buffer.from(`X-Big: ${'a'.repeat(65536 - 9)}\r\n`);
    s.on('data', (b) => { got += b.toString('latin1'); });
    s.on('error', () => {});
    s.on('close', () => { closed = true; resolve({ got, sent }); });
    s.on('connect', async () => {
      s.write('GET /status HTTP/1.1\r\nHost: x\r\n');
      while (!closed && sent < 100 << 20) {
        sent += line.length;
        if (!s.write(line)) await new Promise((r) => { s.once('drain', r); s.once('close', r); });
      }
      if (!closed) s.end();
    });
  });
  assert.match(big.got, /^HTTP\/1\.1 431 /);
  // VmHWM stays small (a sanitizer's shadow memory aside: then the growth)
  const hwm = vmHwmKiB(d.pid);
  assert.ok(hwm - hwm0 < 16 * 1024, `VmHWM grew from ${hwm0} to ${hwm} kB`);
  if (!SANITIZED) assert.ok(hwm < 100 * 1024, `VmHWM ${hwm} kB`);

  const body = await raw(sock, 'POST /profile?worker=hot&type=cpu HTTP/1.1\r\nContent-Length: 100000\r\n\r\n');
  assert.match(body, /^HTTP\/1\.1 413 /);

  // pipelined keep-alive requests are answered in order
  const piped = await raw(sock, 'GET /status HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n');
  assert.deepStrictEqual(piped.match(/HTTP\/1\.1 \d{3}/g), ['HTTP/1.1 200', 'HTTP/1.1 404', 'HTTP/1.1 200']);

  // 100 connections at once: each past the 64th evicts the oldest idle one
  // (control-hostile.test.js checks which), so 36 or 37 of them are closed
  const conns = [];
  let closedN = 0;
  for (let i = 0; i < 100; i++) {
    const s = net.connect(sock);
    s.on('close', () => { closedN++; });
    s.on('error', () => {});
    conns.push(s);
  }
  await L.waitFor(() => closedN >= 36, 5000, '36 connections closed by the daemon');
  await L.sleep(300);
  assert.ok(closedN >= 36 && closedN <= 37, `${closedN} of 100 closed (the slowloris holds one)`);
  for (const s of conns) s.destroy();
  await L.sleep(200);

  // the request deadline (CTL_REQUEST_MS, 5 s) from the accept
  const sl = await slow;
  assert.ok(sl.ms >= 4000 && sl.ms < 8000, `slowloris closed after ${sl.ms} ms`);
  assert.match(sl.got, /^HTTP\/1\.1 408 /);

  const st = await request(sock, 'GET', '/status');
  assert.strictEqual(st.status, 200);
  const n = json(st).counters;
  assert.ok(n.control_rejected_connections >= 36, JSON.stringify(n));
  assert.ok(n.control_errors >= 4);
  assert.ok(d.alive());
});

test('stop: a waiting request is answered, exit 0, every handle closed, the socket file gone', async () => {
  const waiting = request(ctx.sock, 'POST', '/profile?worker=hot&type=cpu&seconds=30');
  await L.sleep(500);
  const r = await L.stopDaemon(ctx.d);
  assert.strictEqual(r.code, 0, ctx.d.tail());
  // an answer, not a hang-up: the window cut short by the stop (if it was
  // stored and merged in time), else 503
  const w = await waiting;
  assert.ok(w.status === 200 || w.status === 503, `status ${w.status}`);
  if (w.status === 200) assert.ok(zlib.gunzipSync(w.body).length > 0);
  else assert.match(json(w).error, /stopping|went away/);
  assert.ok(!fs.existsSync(ctx.sock), 'the socket was removed');
  assert.ok(!ctx.d.lines.some((l) => l.msg === 'loop closed with handles open'), ctx.d.tail());
});
