// The harness itself, without isoprofd: the fake inspector speaks valid
// WebSocket to a real client (Node's) and misbehaves exactly as scripted;
// Node, workerd and Deno start on loopback ports and answer what the daemon
// relies on; the go tool pprof and logfmt parsers read what they should.
// When a daemon test fails, this one says whether the harness is to blame.
'use strict';
const { test, after } = require('node:test');
const assert = require('node:assert');
const crypto = require('node:crypto');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const L = require('./lib');
const F = require('./fake-inspector');

after(L.cleanup);

// Sends one CDP request and resolves to the parsed reply with that id.
function call(ws, id, method, params) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`${method}: no reply`)), 5000);
    const prev = ws.onmessage;
    ws.onmessage = (m) => {
      const v = JSON.parse(m.data);
      if (v.id === id) { clearTimeout(t); ws.onmessage = prev; resolve(v); }
    };
    ws.send(JSON.stringify({ id, method, params }));
  });
}

// Waits for the next message, close or error on ws, whichever comes first.
function nextEvent(ws, ms) {
  return new Promise((resolve) => {
    const t = setTimeout(() => resolve({ kind: 'none' }), ms);
    ws.onmessage = (m) => { clearTimeout(t); resolve({ kind: 'message', data: String(m.data) }); };
    ws.onclose = (e) => { clearTimeout(t); resolve({ kind: 'close', code: e.code }); };
    ws.onerror = () => { clearTimeout(t); resolve({ kind: 'error' }); };
  });
}

test('Sec-WebSocket-Accept follows RFC 6455', () => {
  assert.strictEqual(F.acceptKey('dGhlIHNhbXBsZSBub25jZQ=='), 's3pPLMBiTxaQ9kYGzzhZRbK+xOo=');
});

test('frame parser: masked frames of every length encoding, unmasked flagged', () => {
  const mk = (len, masked) => {
    const payload = crypto.randomBytes(len);
    const mask = crypto.randomBytes(4);
    const body = Buffer.from(payload);
    if (masked) for (let i = 0; i < body.length; i++) body[i] ^= mask[i & 3];
    const h = F.frameHeader(1, len);
    if (masked) h[1] |= 0x80;
    return { payload, wire: Buffer.concat([h, masked ? mask : Buffer.alloc(0), body]) };
  };
  const a = mk(5, true); const b = mk(300, true); const c = mk(70000, true); const d = mk(3, false);
  const all = Buffer.concat([a.wire, b.wire, c.wire, d.wire]);
  // Fed in awkward pieces, as TCP may deliver them.
  let buf = Buffer.alloc(0); const got = [];
  for (let i = 0; i < all.length; i += 997) {
    buf = Buffer.concat([buf, all.subarray(i, i + 997)]);
    const r = F.parseFrames(buf, 1 << 20);
    got.push(...r.frames); buf = r.rest;
  }
  assert.strictEqual(buf.length, 0);
  assert.deepStrictEqual(got.map((f) => f.payload.length), [5, 300, 70000, 3]);
  assert.ok(got[0].payload.equals(a.payload) && got[1].payload.equals(b.payload) && got[2].payload.equals(c.payload));
  assert.deepStrictEqual(got.map((f) => f.masked), [true, true, true, false]);
  assert.match(F.parseFrames(Buffer.concat([F.frameHeader(1, 300e6)]), 1 << 20).error, /300000000/);
});

test('fake inspector: HTTP discovery and a CDP session with a real WebSocket client', async () => {
  const fake = await F.startFakeInspector();
  try {
    assert.deepStrictEqual(await L.getJson(fake.port, '/json/version'), { Browser: 'node.js/v20.20.2', 'Protocol-Version': '1.3' });
    const list = await L.getJson(fake.port, '/json/list');
    assert.strictEqual(list.length, 1);
    assert.strictEqual(list[0].webSocketDebuggerUrl, `ws://127.0.0.1:${fake.port}/${list[0].id}`);
    const ws = await L.connectWs(list[0].webSocketDebuggerUrl);
    assert.deepStrictEqual(await call(ws, 1, 'Profiler.enable'), { id: 1, result: {} });
    assert.deepStrictEqual(await call(ws, 2, 'Profiler.setSamplingInterval', { interval: 1000 }), { id: 2, result: {} });
    assert.deepStrictEqual(await call(ws, 3, 'Profiler.stop'), { id: 3, error: { code: -32000, message: 'No recording profiles found' } });
    await call(ws, 4, 'Profiler.start');
    assert.match((await call(ws, 5, 'Profiler.setSamplingInterval', { interval: 1000 })).error.message, /Cannot change sampling interval/);
    const stop = await call(ws, 6, 'Profiler.stop');
    const p = stop.result.profile;
    assert.strictEqual(p.samples.length, p.nodes.reduce((s, n) => s + n.hitCount, 0));
    assert.strictEqual(p.samples.length, p.timeDeltas.length);
    assert.ok(p.samples.every((id) => p.nodes.some((n) => n.id === id)));
    // A request over 64 KiB (the 64-bit length form from the client).
    const big = await call(ws, 7, 'Runtime.getHeapUsage', { pad: 'x'.repeat(100000) });
    assert.deepStrictEqual(Object.keys(big.result), ['usedSize', 'totalSize']);
    assert.match((await call(ws, 8, 'Nope.nope')).error.message, /wasn't found/);
    const closed = nextEvent(ws, 3000);
    ws.close();
    assert.strictEqual((await closed).kind, 'close');
    assert.deepStrictEqual(fake.violations, []);
    assert.deepStrictEqual(fake.methods.slice(0, 3), ['Profiler.enable', 'Profiler.setSamplingInterval', 'Profiler.stop']);
    await L.waitFor(() => fake.open === 0, 3000, 'session closed on the server');
  } finally {
    await fake.close();
  }
});

test('fake inspector: workerd style echoes requests that have an empty result', async () => {
  const fake = await F.startFakeInspector({ style: 'workerd', id: 'alpha' });
  try {
    assert.strictEqual((await L.getJson(fake.port, '/json/version')).Browser, 'workerd');
    const ws = await L.connectWs(`ws://127.0.0.1:${fake.port}/alpha`);
    assert.deepStrictEqual(await call(ws, 1, 'Profiler.enable'), { id: 1, method: 'Profiler.enable', params: {} });
    assert.deepStrictEqual(Object.keys((await call(ws, 2, 'Runtime.getHeapUsage')).result), ['usedSize', 'totalSize']);
    ws.close();
  } finally {
    await fake.close();
  }
});

test('fake inspector: each misbehaviour happens as scripted', async () => {
  const open = async (mode) => {
    const fake = await F.startFakeInspector({ mode });
    const ws = await L.connectWs(`ws://127.0.0.1:${fake.port}/x`);
    return { fake, ws };
  };
  {
    const { fake, ws } = await open('invalid-json');
    const ev = nextEvent(ws, 3000);
    ws.send(JSON.stringify({ id: 1, method: 'Profiler.enable' }));
    const e = await ev;
    assert.strictEqual(e.kind, 'message');
    assert.throws(() => JSON.parse(e.data));
    ws.close(); await fake.close();
  }
  for (const mode of ['truncated-frame', 'huge-frame', 'bad-profile']) {
    const { fake, ws } = await open(mode);
    assert.strictEqual((await call(ws, 1, 'Profiler.enable')).id, 1, `${mode}: enable is normal`);
    await call(ws, 2, 'Profiler.start');
    const ev = nextEvent(ws, 1500);
    ws.send(JSON.stringify({ id: 3, method: 'Profiler.stop' }));
    const e = await ev;
    if (mode === 'truncated-frame') {
      assert.notStrictEqual(e.kind, 'message', 'no message from a truncated frame');
      assert.notStrictEqual(e.kind, 'none', 'the connection ends');
    } else if (mode === 'huge-frame') {
      assert.strictEqual(e.kind, 'none', 'a 300 MB frame that never completes: nothing arrives, nothing closes');
      assert.strictEqual(fake.open, 1);
    } else {
      const p = JSON.parse(e.data).result.profile;
      const ids = new Set(p.nodes.map((n) => n.id));
      assert.ok(p.nodes.some((n) => (n.children || []).some((c) => !ids.has(c))), 'a child id that does not exist');
      assert.ok(p.samples.some((s) => !ids.has(s)), 'a sample id that does not exist');
    }
    assert.strictEqual(fake.fired, 1, mode);
    try { ws.close(); } catch (_) { /* already closed */ }
    await fake.close();
  }
  {
    const fake = await F.startFakeInspector({ mode: 'version-garbage' });
    await assert.rejects(L.getJson(fake.port, '/json/version'));
    await fake.close();
  }
  {
    const fake = await F.startFakeInspector({ mode: 'hostile-list' });
    const list = await L.getJson(fake.port, '/json/list');
    assert.ok(list.length >= 10);
    assert.ok(list.some((t) => t && typeof t.title === 'string' && t.title.length === 200000));
    assert.ok(list.some((t) => t && /^ws:\/\/203\.0\.113\.7:/.test(t.webSocketDebuggerUrl)));
    assert.ok(list.some((t) => t === null) && list.some((t) => typeof t === 'number'));
    await fake.close();
  }
  {
    // `times` bounds the misbehaviour: the second session is healthy.
    const fake = await F.startFakeInspector({ mode: 'invalid-json', times: 1 });
    const ws1 = await L.connectWs(`ws://127.0.0.1:${fake.port}/x`);
    const ev = nextEvent(ws1, 3000);
    ws1.send(JSON.stringify({ id: 1, method: 'Profiler.enable' }));
    const bad = (await ev).data;
    assert.throws(() => JSON.parse(bad));
    ws1.close();
    const ws2 = await L.connectWs(`ws://127.0.0.1:${fake.port}/x`);
    assert.deepStrictEqual(await call(ws2, 1, 'Profiler.enable'), { id: 1, result: {} });
    ws2.close();
    await fake.close();
  }
});

test('fake inspector: client protocol violations are recorded', async () => {
  const fake = await F.startFakeInspector();
  try {
    const key = crypto.randomBytes(16).toString('base64');
    const sock = net.connect(fake.port, '127.0.0.1');
    await new Promise((r) => sock.on('connect', r));
    sock.write(`GET /x HTTP/1.1\r\nHost: 127.0.0.1:${fake.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n\r\n`);
    const head = await new Promise((r) => sock.once('data', (d) => r(String(d))));
    assert.match(head, /^HTTP\/1\.1 101 /);
    assert.ok(head.includes(`Sec-WebSocket-Accept: ${F.acceptKey(key)}\r\n`));
    sock.write(F.frame(9, 'hi')); // unmasked ping
    await L.waitFor(() => fake.violations.length >= 2, 2000, 'violations');
    assert.deepStrictEqual(fake.violations, ['unmasked client frame', 'ping from client']);
    sock.destroy();
  } finally {
    await fake.close();
  }
});

// CPU seconds a process has used (utime + stime from /proc).
function cpuSeconds(pid) {
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(f[11]) + Number(f[12])) / 100;
}

// The workload, started by a shell that exits 2 s later, exits once
// orphaned (parent-guard.js).
async function orphanExits(argv) {
  const sh = L.track(spawn('sh', ['-c', '"$@" >/dev/null 2>&1 & echo $!; sleep 2', 'sh', ...argv],
    { stdio: ['ignore', 'pipe', 'ignore'] }), 'sh');
  const pid = await new Promise((resolve) => sh.stdout.once('data', (d) => resolve(parseInt(String(d), 10))));
  await sh.exited;
  const alive = () => { try { process.kill(pid, 0); return true; } catch (_) { return false; } };
  try {
    await L.waitFor(() => !alive(), 4000, `orphaned ${path.basename(argv[argv.length - 1])} (pid ${pid}) to exit`);
  } finally {
    if (alive()) process.kill(pid, 'SIGKILL');
  }
}

test('node: inspector on port 0, /json/list shape, one CDP session, hot loop runs', { timeout: 40000 }, async () => {
  const node = await L.startNode(path.join(L.WORKLOADS, 'node-hot.js'));
  const v = await L.getJson(node.port, '/json/version');
  assert.match(v.Browser, /^node\.js\/v20\./);
  const [t] = await L.getJson(node.port, '/json/list');
  assert.match(t.webSocketDebuggerUrl, new RegExp(`^ws://127\\.0\\.0\\.1:${node.port}/[0-9a-f-]{36}$`));
  assert.strictEqual(t.url, `file://${path.join(L.WORKLOADS, 'node-hot.js')}`);
  const ws = await L.connectWs(t.webSocketDebuggerUrl);
  assert.deepStrictEqual(await call(ws, 1, 'Profiler.enable'), { id: 1, result: {} });
  ws.close();
  // The hot loop starts 5 s in; the preloaded guard must not hold it up.
  // Poll rather than sleep a fixed time: on a loaded machine 2 s of hot
  // loop can be less than 1 s of CPU.
  await L.waitFor(() => cpuSeconds(node.pid) > 1, 25000, 'node-hot.js to use 1 s of CPU');
  await L.stop(node);
  await orphanExits([process.execPath, '--require', path.join(__dirname, 'parent-guard.js'), path.join(L.WORKLOADS, 'node-hot.js')]);
});

test('deno: inspector answers; path is /<uuid>; hot loop runs; orphan exits', { timeout: 40000 }, async () => {
  const deno = await L.startDeno(path.join(L.WORKLOADS, 'deno-hot.js'));
  assert.match((await L.getJson(deno.port, '/json/version')).Browser, /^Deno\//);
  const [t] = await L.getJson(deno.port, '/json/list');
  assert.match(t.title, /^deno - main \[pid: \d+\]$/);
  // PROTOCOLS.md said /ws/<uuid>; Deno 2.9 serves /<uuid>.
  assert.match(t.webSocketDebuggerUrl, new RegExp(`^ws://127\\.0\\.0\\.1:${deno.port}/[0-9a-f-]{36}$`));
  assert.strictEqual(t.url, `file://${path.join(L.WORKLOADS, 'deno-hot.js')}`);
  const ws = await L.connectWs(t.webSocketDebuggerUrl);
  assert.deepStrictEqual(await call(ws, 1, 'Profiler.enable'), { id: 1, result: {} });
  ws.close();
  await L.waitFor(() => cpuSeconds(deno.pid) > 1, 25000, 'deno-hot.js to use 1 s of CPU');
  await L.stop(deno);
  await orphanExits([L.runtimeBinary('deno'), 'run', '--no-prompt', '--preload', path.join(__dirname, 'parent-guard.js'), path.join(L.WORKLOADS, 'deno-hot.js')]);
});

test('workerd: one target per service; replies echo; a second client evicts the first', { timeout: 40000 }, async () => {
  const services = [{ name: 'alpha', port: await L.freePort() }, { name: 'beta', port: await L.freePort() }];
  const wd = await L.startWorkerd(path.join(L.WORKLOADS, 'worker-hot.js'), services);
  assert.strictEqual((await L.getJson(wd.port, '/json/version')).Browser, 'workerd');
  const list = await L.getJson(wd.port, '/json/list');
  assert.deepStrictEqual(list.map((t) => t.id).sort(), ['alpha', 'beta']);
  for (const t of list) assert.strictEqual(t.webSocketDebuggerUrl, `ws://127.0.0.1:${wd.port}/${t.id}`);
  // The worker answers HTTP on its socket.
  const body = await new Promise((resolve, reject) => {
    require('node:http').get({ host: '127.0.0.1', port: services[0].port, path: '/' }, (res) => {
      let b = ''; res.on('data', (d) => { b += d; }); res.on('end', () => resolve(b));
    }).on('error', reject);
  });
  assert.match(body, /^-?[\d.e+-]+$/);
  const ws1 = await L.connectWs(`ws://127.0.0.1:${wd.port}/alpha`);
  // workerd answers Profiler.enable without a "result": it echoes the request.
  assert.deepStrictEqual(await call(ws1, 1, 'Profiler.enable'), { id: 1, method: 'Profiler.enable', params: {} });
  const heap = await call(ws1, 2, 'Runtime.getHeapUsage');
  assert.ok(heap.result.usedSize > 0 && 'embedderHeapUsedSize' in heap.result);
  // A second client evicts the first. workerd 2026-11-17 then drops the
  // second connection too (close frame 1000 "client closed connection" to
  // the first, a bare TCP close to the second); a third, alone, works.
  const gone1 = nextEvent(ws1, 5000);
  const ws2 = await L.connectWs(`ws://127.0.0.1:${wd.port}/alpha`);
  const gone2 = nextEvent(ws2, 5000);
  const e1 = await gone1;
  assert.strictEqual(e1.kind, 'close', 'the first session is evicted');
  assert.strictEqual(e1.code, 1000);
  assert.strictEqual((await gone2).kind, 'close', 'workerd drops the evicting session as well');
  const ws3 = await L.connectWs(`ws://127.0.0.1:${wd.port}/alpha`);
  assert.deepStrictEqual(await call(ws3, 1, 'Profiler.enable'), { id: 1, method: 'Profiler.enable', params: {} });
  // beta's isolate has a session of its own, untouched by alpha's.
  const wsb = await L.connectWs(`ws://127.0.0.1:${wd.port}/beta`);
  assert.strictEqual((await call(wsb, 1, 'Runtime.getHeapUsage')).id, 1);
  const still = nextEvent(ws3, 1000);
  assert.strictEqual((await still).kind, 'none', 'a session on another service does not evict');
  ws3.close();
  wsb.close();
  await L.stop(wd);
});

test('go tool pprof: -top and -raw parsers read a profile written here', () => {
  const dir = L.tmpdir();
  const file = path.join(dir, 'p.pb.gz');
  fs.writeFileSync(file, L.encodePprof({
    sampleTypes: [['samples', 'count'], ['cpu', 'nanoseconds']], periodType: ['cpu', 'nanoseconds'], period: 1000000,
    samples: [
      { stack: [{ fn: 'hot', file: '/a/app.js', line: 11, startLine: 10 }, { fn: 'main', file: '/a/app.js', line: 30 }], values: [90, 90000000] },
      { stack: [{ fn: 'cold', file: '/a/app.js', line: 21 }, { fn: 'main', file: '/a/app.js', line: 31, startLine: 30 }], values: [10, 10000000] },
    ],
  }));
  const top = L.pprofTop(file);
  assert.deepStrictEqual(top.map((r) => [r.name, r.flatPct, r.cumPct]), [['hot', 90, 90], ['cold', 10, 10], ['main', 0, 100]]);
  const lines = L.pprofTop(file, ['-lines']);
  assert.strictEqual(lines[0].name, 'hot /a/app.js:11');
  const raw = L.pprofRaw(file);
  assert.deepStrictEqual(raw.sampleTypes, ['samples/count', 'cpu/nanoseconds']);
  assert.deepStrictEqual(raw.samples.map((s) => s.values), [[90, 90000000], [10, 10000000]]);
  const leaf = raw.locations.get(raw.samples[0].locs[0]);
  assert.deepStrictEqual(leaf, [{ fn: 'hot', file: '/a/app.js', line: 11, start: 10 }]);
  assert.strictEqual(raw.locations.get(raw.samples[1].locs[1])[0].start, 30);
});

test('logfmt parser: quoting and escapes as agent/daemon/log.c writes them', () => {
  const l = L.parseLogfmt('ts=2026-12-02T12:00:00.123Z level=warn msg="session dropped" worker=a_b err="bad \\"json\\"" why="x\\ny\\t\\x01\\\\" n=3 empty=');
  assert.deepStrictEqual({ ...l }, { ts: '2026-12-02T12:00:00.123Z', level: 'warn', msg: 'session dropped', worker: 'a_b', err: 'bad "json"', why: 'x\ny\t\u0001\\', n: '3', empty: '' });
  assert.deepStrictEqual({ ...L.parseLogfmt('==123==ERROR: AddressSanitizer: heap-use-after-free') }, {});
});

test('setup.sh --print-runtimes names the runtimes and the TypeScript tools (run packaging/setup.sh --runtimes if not)', () => {
  const r = L.runtimes();
  for (const name of ['workerd', 'deno', 'esbuild']) {
    assert.ok(r[name], `${name} missing: run packaging/setup.sh --runtimes`);
    assert.ok(fs.statSync(r[name]).mode & 0o111, `${r[name]} is executable`);
  }
});
