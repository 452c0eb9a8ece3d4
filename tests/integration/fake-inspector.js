// A scripted V8 inspector for the integration tests: an HTTP server on
// 127.0.0.1 that serves /json/version and /json/list, and a WebSocket server
// written here from RFC 6455 (so it can also break the protocol on purpose)
// that answers CDP requests like Node 20 does, or misbehaves as told.
//
//   const fake = await startFakeInspector({ mode: 'huge-frame' });
//   fake.port, fake.sessions, fake.methods, fake.paths, fake.violations
//   await fake.close();
//
// Modes (what the target does; `on` names the request that triggers it):
//   normal            well-formed replies; Profiler.stop returns `profile`
//   invalid-json      replies `{"id":N,"result":{` and keeps the socket open
//   truncated-frame   a frame header announcing 4096 bytes, 100 of them, close
//   huge-frame        a frame header announcing 300 MB, 64 KiB of it, stall
//   bad-heap          well-formed, but every heap profile is malformed
//   bad-profile       Profiler.stop returns nodes whose children/samples
//                     reference ids that do not exist
//   hostile-list      /json/list names targets with hostile strings (see
//                     hostileList below); their sessions behave normally
//   version-garbage   /json/version is not JSON
//   stall-stop        never answers Profiler.stop (the session stays open)
// Raw answers, for hostile input: `versionBody` / `listBody` (strings) are
// sent as /json/version and /json/list; `stopText(id)` returns the text of
// the Profiler.stop reply message (a string or Buffer, sent as one frame),
// `heapText` the text of the profile every getSamplingProfile answers;
// `onOpen(sock)` runs when a session opens (to send what the target likes).
// style 'workerd' answers like workerd (empty results echo the request,
// Browser "workerd"); the default is Node 20.
// fake.listStall (set any time): /json/list requests are left unanswered,
// as a runtime too busy to serve its listing; the sessions go on.
// `times` (default Infinity) bounds how many times the misbehaviour fires;
// after that the fake behaves normally, so a reattach can succeed.
//
// Heap snapshots: `snapshot` (an option, or fake.snapshot set later)
// scripts every isolate's answer to HeapProfiler.takeHeapSnapshot; without
// it the method is unknown, as before. {chunks, reply}:
//   chunks  the `chunk` texts of the HeapProfiler.addHeapSnapshotChunk
//           events, in order: an array of strings, or a function (i) ->
//           string, called until it returns null (one that never does is a
//           stream that never ends, sent as fast as the agent reads it and
//           stopped when the session closes)
//   reply   'result' (the default: {} after the last chunk), 'never', or
//           {code, message}: an error after the chunks
// fake.snapshots counts the calls, fake.snapshotBytes the chunk text sent
// (UTF-16 units: ASCII text is bytes). heapSnapshot(graph) builds a V8
// .heapsnapshot object for a small graph, to send whole or broken.
//
// Worker threads, as Node 20's NodeWorker domain relays them over the main
// session (modes apply to the main session only):
//   fake.attachWorker({sessionId, name, waiting})  attachedToWorker to every
//       session that sent NodeWorker.enable; the worker then answers
//       sendMessageToWorker like a normal isolate, wrapped in
//       receivedMessageFromWorker (error replies with the id last, as Node)
//   fake.detachWorker(sessionId)       detachedFromWorker; it answers no more
//   fake.fromWorker(sessionId, text)   receivedMessageFromWorker carrying text
//   fake.workers                       sessionId -> {name, released}
//   fake.detached                      the sessionIds NodeWorker.detach named
//   fake.nodeWorkerCalls               every NodeWorker.* request but sendMessageToWorker
// `onWorkerCall(sessionId, msg)` runs first for every call to a worker;
// returning true means it handled the call (e.g. detached the worker).
// Like Node, a call to an unknown session is answered {} and nothing else.
//
// Everything the agent does is recorded: `violations` lists WebSocket rules
// a client broke (unmasked frame, ping, fragment, bad handshake).
//
// Run directly (`node fake-inspector.js [mode]`) it prints `port=N` and
// serves until killed, for poking at the daemon by hand.
'use strict';
const crypto = require('node:crypto');
const http = require('node:http');

const WS_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

// Sec-WebSocket-Accept for a client's Sec-WebSocket-Key (RFC 6455 4.2.2).
function acceptKey(key) {
  return crypto.createHash('sha1').update(key + WS_GUID).digest('base64');
}

// One server-to-client frame header (never masked) for `len` payload bytes.
function frameHeader(opcode, len, fin = true) {
  const b0 = (fin ? 0x80 : 0) | opcode;
  if (len < 126) return Buffer.from([b0, len]);
  if (len < 65536) {
    const h = Buffer.alloc(4);
    h[0] = b0; h[1] = 126; h.writeUInt16BE(len, 2);
    return h;
  }
  const h = Buffer.alloc(10);
  h[0] = b0; h[1] = 127; h.writeBigUInt64BE(BigInt(len), 2);
  return h;
}

function frame(opcode, payload) {
  const p = Buffer.isBuffer(payload) ? payload : Buffer.from(payload);
  return Buffer.concat([frameHeader(opcode, p.length), p]);
}

// Parses client frames out of `buf`; returns {frames, rest} or {error}.
// Client frames must be masked (RFC 6455 5.1); the payload is unmasked here.
function parseFrames(buf, maxPayload) {
  const frames = [];
  let off = 0;
  for (;;) {
    if (buf.length - off < 2) break;
    const b0 = buf[off]; const b1 = buf[off + 1];
    const fin = (b0 & 0x80) !== 0;
    const rsv = b0 & 0x70;
    const opcode = b0 & 0x0f;
    const masked = (b1 & 0x80) !== 0;
    let len = b1 & 0x7f;
    let p = off + 2;
    if (len === 126) {
      if (buf.length - p < 2) break;
      len = buf.readUInt16BE(p); p += 2;
    } else if (len === 127) {
      if (buf.length - p < 8) break;
      const big = buf.readBigUInt64BE(p); p += 8;
      if (big > BigInt(maxPayload)) return { error: `client frame of ${big} bytes` };
      len = Number(big);
    }
    if (len > maxPayload) return { error: `client frame of ${len} bytes` };
    let mask = null;
    if (masked) {
      if (buf.length - p < 4) break;
      mask = buf.subarray(p, p + 4); p += 4;
    }
    if (buf.length - p < len) break;
    const payload = Buffer.from(buf.subarray(p, p + len));
    if (mask) for (let i = 0; i < payload.length; i++) payload[i] ^= mask[i & 3];
    frames.push({ fin, rsv, opcode, masked, payload });
    off = p + len;
  }
  return { frames, rest: buf.subarray(off) };
}

const monoUs = () => Number(process.hrtime.bigint() / 1000n);

// A small, valid Node-style CPU profile: fakeHot (file:///fake/app.js,
// 0-based line 9, so pprof line 10) has 90 of 101 samples, fakeCold 10.
// Times are µs on CLOCK_MONOTONIC, as V8 reports them; the samples are
// spread evenly from startUs to endUs.
function defaultProfile(startUs = monoUs() - 100100, endUs = startUs + 100100) {
  const nodes = [
    { id: 1, callFrame: { functionName: '(root)', scriptId: '0', url: '', lineNumber: -1, columnNumber: -1 }, hitCount: 0, children: [2, 3, 4] },
    { id: 2, callFrame: { functionName: '(program)', scriptId: '0', url: '', lineNumber: -1, columnNumber: -1 }, hitCount: 1, children: [] },
    { id: 3, callFrame: { functionName: 'fakeHot', scriptId: '7', url: 'file:///fake/app.js', lineNumber: 9, columnNumber: 17 }, hitCount: 90, children: [], positionTicks: [{ line: 11, ticks: 90 }] },
    { id: 4, callFrame: { functionName: 'fakeCold', scriptId: '7', url: 'file:///fake/app.js', lineNumber: 19, columnNumber: 18 }, hitCount: 10, children: [] },
  ];
  const samples = [2];
  for (let i = 0; i < 100; i++) samples.push(i % 10 === 0 ? 4 : 3);
  const step = Math.max(1, Math.floor((endUs - startUs) / samples.length));
  const timeDeltas = samples.map(() => step);
  return { nodes, startTime: startUs, endTime: Math.max(endUs, startUs + step * samples.length), samples, timeDeltas };
}

// Nodes whose children and samples name ids that do not exist.
function badProfile(startUs, endUs) {
  const p = defaultProfile(startUs, endUs);
  p.nodes[0].children = [2, 3, 4, 999];
  p.samples[5] = 12345;
  return p;
}

// A /json/list whose entries carry hostile strings. Usable entries have an
// id and a ws:// URL; the rest lack or break a required field.
function hostileList(port) {
  const ws = (p) => `ws://127.0.0.1:${port}${p}`;
  return [
    // Usable, with hostile labels the agent must sanitise.
    { id: 'huge-title', type: 'node', title: 'T'.repeat(200000), url: '', webSocketDebuggerUrl: ws('/huge-title') },
    { id: 'ctl"chars', type: 'node', title: 'a"b\\c\n level=error msg="forged" \u0001\u007f\u00e9\u2028', url: 'file:///srv/x"\n msg=forged\u0007.js', webSocketDebuggerUrl: ws('/ctl') },
    // Advertises another host: the agent may use only the path, and must
    // connect to the endpoint it was configured with (this server).
    { id: 'elsewhere', type: 'node', title: 'elsewhere', url: 'file:///srv/elsewhere.js', webSocketDebuggerUrl: 'ws://203.0.113.7:9229/elsewhere' },
    // Unusable.
    { title: 'no id', webSocketDebuggerUrl: ws('/no-id') },
    { id: 'no-ws', title: 'no ws url' },
    { id: 'ws-not-string', webSocketDebuggerUrl: 12345 },
    { id: 'http-url', webSocketDebuggerUrl: `http://127.0.0.1:${port}/http-url` },
    { id: 'space-path', webSocketDebuggerUrl: ws('/a b') },
    { id: 'ctl-path', webSocketDebuggerUrl: ws('/a\u0001b') },
    { id: 'i'.repeat(5000), webSocketDebuggerUrl: ws('/long-id') },
    { id: '', webSocketDebuggerUrl: ws('/empty-id') },
    42, null, 'a string', [],
  ];
}
// Paths of the entries above that must never be connected to.
const HOSTILE_UNUSABLE_PATHS = ['/no-id', '/http-url', '/a b', '/a%20b', '/a\u0001b', '/long-id', '/empty-id'];

// A sampling heap profile: two functions holding 3 and 1 sampled objects.
function heapProfile() {
  const cf = (functionName, lineNumber) => ({ functionName, scriptId: '1', url: '/srv/app.js', lineNumber, columnNumber: 2 });
  return {
    head: { callFrame: cf('(root)', -1), selfSize: 0, id: 1, children: [
      { callFrame: cf('buildCache', 10), selfSize: 3 * 65536, id: 2, children: [] },
      { callFrame: cf('handle', 20), selfSize: 65536, id: 3, children: [] },
    ] },
    samples: [{ size: 65536, nodeId: 2, ordinal: 1 }, { size: 65536, nodeId: 2, ordinal: 2 },
      { size: 65536, nodeId: 2, ordinal: 3 }, { size: 65536, nodeId: 3, ordinal: 4 }],
  };
}

// A malformed one: a duplicate node id and a sample naming no node.
function badHeapProfile() {
  const cf = { functionName: 'x', scriptId: '1', url: '', lineNumber: 0, columnNumber: 0 };
  return { head: { callFrame: cf, selfSize: 0, id: 1, children: [{ callFrame: cf, selfSize: 1, id: 1, children: [] }] },
    samples: [{ size: 8, nodeId: 99, ordinal: 1 }] };
}

// Every fake still open; closeAll() is the harness's cleanup, so a test
// that failed half-way does not leave a listening server behind (which
// would keep the test process alive until CTest's timeout).
const open = new Set();
function closeAll() { return Promise.all([...open].map((f) => f.close())); }

async function startFakeInspector(opts = {}) {
  const fake = {
    mode: opts.mode || 'normal',
    on: opts.on || (opts.mode === 'bad-profile' || opts.mode === 'huge-frame' || opts.mode === 'truncated-frame' ? 'Profiler.stop' : 'Profiler.enable'),
    times: opts.times === undefined ? Infinity : opts.times,
    fired: 0,
    style: opts.style || 'node',
    browser: opts.browser || (opts.style === 'workerd' ? 'workerd' : 'node.js/v20.20.2'),
    profile: opts.profile || null,
    heapUsed: opts.heapUsed || (5 << 20),
    heapProfiles: 0,
    list: opts.list || null,
    sessions: 0,
    open: 0,
    methods: [],
    paths: [],
    violations: [],
    httpRequests: [],
    sockets: new Set(),
    workers: new Map(),
    detached: [],
    nodeWorkerCalls: [],
    snapshot: opts.snapshot || null,
    snapshots: 0,
    snapshotBytes: 0,
    listStall: false,
    port: 0,
  };
  const workerSocks = new Set(); // sessions that sent NodeWorker.enable
  const running = new Map(); // socket -> profiling state

  function targets(host) {
    if (fake.mode === 'hostile-list') return hostileList(fake.port);
    if (fake.list) return typeof fake.list === 'function' ? fake.list(fake.port, host) : fake.list;
    const id = opts.id || '5f8b1e64-0a3c-4a8e-9c1e-6a9a7a1f0c01';
    return [{
      description: 'node.js instance', devtoolsFrontendUrl: `devtools://devtools/bundled/js_app.html?experiments=true&v8only=true&ws=${host}/${id}`,
      faviconUrl: 'https://nodejs.org/static/images/favicons/favicon.ico', id, title: opts.title || 'fake.js',
      type: 'node', url: opts.url || 'file:///fake/fake.js', webSocketDebuggerUrl: `ws://${host}/${id}`,
    }];
  }

  const server = http.createServer((req, res) => {
    fake.httpRequests.push(req.url);
    const host = req.headers.host || `127.0.0.1:${fake.port}`;
    let body;
    if (req.url === '/json/version') {
      body = opts.versionBody !== undefined ? opts.versionBody
        : fake.mode === 'version-garbage' ? '<html>not json' : JSON.stringify({ Browser: fake.browser, 'Protocol-Version': '1.3' });
    } else if (req.url === '/json/list' || req.url === '/json') {
      if (fake.listStall) return; // left unanswered: close() ends it
      body = opts.listBody !== undefined ? opts.listBody : JSON.stringify(targets(host));
    } else {
      res.writeHead(404); res.end(); return;
    }
    res.writeHead(200, { 'Content-Type': 'application/json; charset=UTF-8', 'Content-Length': Buffer.byteLength(body) });
    res.end(body);
  });

  function shouldFire(method) {
    if (fake.mode === 'normal' || fake.mode === 'hostile-list' || fake.mode === 'version-garbage' || fake.mode === 'bad-heap') return false;
    if (fake.mode === 'stall-stop') return method === 'Profiler.stop';
    if (method !== fake.on || fake.fired >= fake.times) return false;
    fake.fired++;
    return true;
  }

  // workerd answers methods whose result is empty by echoing the request
  // ({id, method, params}, no "result"); style 'workerd' does the same.
  // `out` is where a session's messages go: {write(text), worker}.
  function reply(out, id, result, req) {
    const echo = fake.style === 'workerd' && Object.keys(result).length === 0;
    const msg = echo ? { id, method: req.method, params: req.params || {} } : fake.style === 'workerd' ? { id, method: req.method, result } : { id, result };
    out.write(JSON.stringify(msg));
  }
  function error(out, id, code, message) {
    out.write(out.worker ? JSON.stringify({ error: { code, message }, id }) : JSON.stringify({ id, error: { code, message } }));
  }
  function mainOut(sock) { return { worker: null, sock, write: (text) => sock.write(frame(1, text)) }; }
  function workerOut(sock, sessionId) {
    return {
      worker: sessionId,
      sock,
      write: (text) => sock.write(frame(1, JSON.stringify({ method: 'NodeWorker.receivedMessageFromWorker', params: { sessionId, message: text } }))),
    };
  }
  function event(sock, method, params) { sock.write(frame(1, JSON.stringify({ method, params }))); }

  fake.attachWorker = ({ sessionId, name, waiting = true, workerId = sessionId }) => {
    fake.workers.set(sessionId, { name, released: false, st: { profiling: false, enabled: false } });
    const title = name ? `[worker ${workerId}] ${name}` : `[worker ${workerId}]`;
    for (const sock of workerSocks) event(sock, 'NodeWorker.attachedToWorker', { sessionId, workerInfo: { workerId: String(workerId), type: 'worker', title, url: '' }, waitingForDebugger: waiting });
  };
  fake.detachWorker = (sessionId) => {
    fake.workers.delete(sessionId);
    for (const sock of workerSocks) event(sock, 'NodeWorker.detachedFromWorker', { sessionId });
  };
  fake.fromWorker = (sessionId, text) => {
    for (const sock of workerSocks) event(sock, 'NodeWorker.receivedMessageFromWorker', { sessionId, message: text });
  };

  // NodeWorker.sendMessageToWorker: {} on the main session, then the inner
  // call answered by the worker, if it exists.
  function toWorker(sock, id, params, req) {
    reply(mainOut(sock), id, {}, req);
    const w = params && fake.workers.get(params.sessionId);
    if (!w) return;
    let inner;
    try { inner = JSON.parse(params.message); } catch (_) { fake.violations.push(`invalid JSON to a worker: ${String(params.message).slice(0, 80)}`); return; }
    if (inner.method === 'Runtime.runIfWaitingForDebugger') w.released = true;
    if (opts.onWorkerCall && opts.onWorkerCall(params.sessionId, inner)) return;
    dispatch(workerOut(sock, params.sessionId), w.st, inner);
  }

  function onMessage(sock, text) {
    let msg;
    try { msg = JSON.parse(text); } catch (_) { fake.violations.push(`invalid JSON from client: ${text.slice(0, 80)}`); return; }
    const { id, method } = msg;
    fake.methods.push(method);
    if (method && method.startsWith('NodeWorker.') && method !== 'NodeWorker.sendMessageToWorker') fake.nodeWorkerCalls.push(msg);
    if (typeof id !== 'number' || typeof method !== 'string') { fake.violations.push(`bad request: ${text.slice(0, 80)}`); return; }
    const st = running.get(sock);
    if (method === 'NodeWorker.sendMessageToWorker') { toWorker(sock, id, msg.params, msg); return; }
    if (method === 'NodeWorker.enable') workerSocks.add(sock);
    if (method === 'NodeWorker.disable') workerSocks.delete(sock);
    if (shouldFire(method)) {
      switch (fake.mode) {
        case 'invalid-json':
          sock.write(frame(1, `{"id":${id},"result":{`));
          return;
        case 'truncated-frame': {
          sock.write(Buffer.concat([frameHeader(1, 4096), Buffer.from(`{"id":${id},"result":{"profile":`), Buffer.alloc(70, 0x20)]));
          setTimeout(() => sock.end(), 50);
          return;
        }
        case 'huge-frame': {
          sock.write(Buffer.concat([frameHeader(1, 300 * 1000 * 1000), Buffer.from(`{"id":${id},"result":{"profile":{"nodes":[`), Buffer.alloc(65536, 0x20)]));
          return; // stall: no more bytes, the socket stays open
        }
        case 'stall-stop':
          fake.stalled = (fake.stalled || 0) + 1;
          return; // never answered
        case 'bad-profile':
          st.profiling = false;
          reply(mainOut(sock), id, { profile: badProfile(st.startUs, monoUs()) }, msg);
          return;
        default:
          throw new Error(`unknown mode ${fake.mode}`);
      }
    }
    dispatch(mainOut(sock), st, msg);
  }

  // A well-behaved isolate's answer to msg, written to out.
  function dispatch(out, st, msg) {
    const { id, method } = msg;
    const main = out.worker === null;
    switch (method) {
      case 'Profiler.enable': case 'Profiler.disable': case 'Runtime.enable': case 'Runtime.runIfWaitingForDebugger':
      case 'Debugger.enable': case 'Debugger.disable': case 'HeapProfiler.enable': case 'NodeWorker.enable':
      case 'NodeWorker.disable': case 'NodeWorker.detach':
        if (method === 'NodeWorker.detach' && msg.params) { fake.detached.push(msg.params.sessionId); fake.workers.delete(msg.params.sessionId); }
        st.enabled = method === 'Profiler.enable' ? true : st.enabled;
        reply(out, id, {}, msg);
        return;
      case 'Profiler.setSamplingInterval':
        if (st.profiling) { error(out, id, -32000, 'Cannot change sampling interval when profiling.'); return; }
        st.interval = msg.params && msg.params.interval;
        reply(out, id, {}, msg);
        return;
      case 'Profiler.start':
        st.profiling = true;
        st.startUs = monoUs();
        reply(out, id, {}, msg);
        return;
      case 'Profiler.stop':
        if (!st.profiling) { error(out, id, -32000, 'No recording profiles found'); return; }
        st.profiling = false;
        if (main && opts.stopText) { out.write(opts.stopText(id)); return; }
        reply(out, id, { profile: fake.profile || defaultProfile(st.startUs, monoUs()) }, msg);
        return;
      case 'HeapProfiler.takeHeapSnapshot':
        if (!fake.snapshot) { error(out, id, -32601, `'${method}' wasn't found`); return; }
        sendSnapshot(out, id, msg, fake.snapshot);
        return;
      case 'Runtime.getHeapUsage':
        reply(out, id, { usedSize: fake.heapUsed, totalSize: fake.heapUsed * 2 }, msg);
        return;
      case 'HeapProfiler.startSampling':
        st.sampling = true;
        reply(out, id, {}, msg);
        return;
      case 'HeapProfiler.stopSampling':
      case 'HeapProfiler.getSamplingProfile':
        if (!st.sampling) { error(out, id, -32000, 'V8 sampling heap profiler was not started.'); return; }
        if (method === 'HeapProfiler.stopSampling') st.sampling = false;
        fake.heapProfiles++;
        if (main && opts.heapText) { out.write(`{"id":${id},"result":{"profile":${opts.heapText}}}`); return; }
        reply(out, id, { profile: main && fake.mode === 'bad-heap' ? badHeapProfile() : heapProfile() }, msg);
        return;
      default:
        error(out, id, -32601, `'${method}' wasn't found`);
    }
  }

  // The chunk events of one takeHeapSnapshot, each written once the socket
  // took the one before (a stream that never ends must not queue here),
  // then the reply spec.reply asks for.
  async function sendSnapshot(out, id, req, spec) {
    fake.snapshots++;
    const sock = out.sock;
    const gone = () => sock.destroyed || sock.writableEnded || !fake.sockets.has(sock);
    let lastChunk = null;
    let lastText = null;
    for (let i = 0; ; i++) {
      const chunk = typeof spec.chunks === 'function' ? spec.chunks(i) : (spec.chunks || [])[i];
      if (chunk === null || chunk === undefined || gone()) break;
      if (chunk !== lastChunk) {
        lastChunk = chunk;
        lastText = JSON.stringify({ method: 'HeapProfiler.addHeapSnapshotChunk', params: { chunk } });
      }
      fake.snapshotBytes += chunk.length;
      if (!out.write(lastText)) {
        await new Promise((resolve) => {
          const done = () => { sock.off('drain', done); sock.off('close', done); resolve(); };
          sock.on('drain', done);
          sock.on('close', done);
        });
      }
    }
    if (gone() || spec.reply === 'never') return;
    if (spec.reply && typeof spec.reply === 'object') error(out, id, spec.reply.code, spec.reply.message);
    else reply(out, id, {}, req);
  }

  server.on('upgrade', (req, sock, head) => {
    fake.paths.push(req.url);
    const key = req.headers['sec-websocket-key'];
    const version = req.headers['sec-websocket-version'];
    const upgrade = (req.headers.upgrade || '').toLowerCase();
    const connection = (req.headers.connection || '').toLowerCase();
    if (!key || Buffer.from(key, 'base64').length !== 16 || version !== '13' || upgrade !== 'websocket' || !connection.split(/,\s*/).includes('upgrade')) {
      fake.violations.push(`bad handshake: ${JSON.stringify(req.headers)}`);
      sock.end('HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n');
      return;
    }
    if (!/^127\.0\.0\.1:\d+$|^localhost:\d+$/.test(req.headers.host || '')) fake.violations.push(`Host header ${req.headers.host}`);
    sock.write(['HTTP/1.1 101 Switching Protocols', 'Upgrade: websocket', 'Connection: Upgrade',
      `Sec-WebSocket-Accept: ${acceptKey(key)}`, '', ''].join('\r\n'));
    fake.sessions++;
    fake.open++;
    fake.sockets.add(sock);
    running.set(sock, { profiling: false, enabled: false });
    sock.setNoDelay(true);
    let buf = head && head.length ? Buffer.from(head) : Buffer.alloc(0);
    let closed = false;
    const onData = (d) => {
      buf = buf.length ? Buffer.concat([buf, d]) : d;
      const r = parseFrames(buf, 16 << 20);
      if (r.error) { fake.violations.push(r.error); sock.destroy(); return; }
      buf = r.rest;
      for (const f of r.frames) {
        if (!f.masked) fake.violations.push('unmasked client frame');
        if (f.rsv) fake.violations.push('RSV bits set');
        if (!f.fin || f.opcode === 0) fake.violations.push('fragmented client frame');
        if (f.opcode === 1) {
          if (!closed) onMessage(sock, f.payload.toString('utf8'));
        } else if (f.opcode === 8) {
          if (!closed) { closed = true; sock.end(frame(8, f.payload.subarray(0, 2))); }
        } else if (f.opcode === 9) {
          fake.violations.push('ping from client');
          sock.write(frame(10, f.payload));
        } else if (f.opcode === 10) {
          fake.violations.push('unsolicited pong from client');
        } else if (f.opcode !== 0) {
          fake.violations.push(`opcode ${f.opcode} from client`);
        }
      }
    };
    sock.on('data', onData);
    if (opts.onOpen) opts.onOpen(sock);
    sock.on('error', () => {});
    sock.on('close', () => { fake.open--; fake.sockets.delete(sock); running.delete(sock); workerSocks.delete(sock); });
  });

  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port || 0, '127.0.0.1', resolve);
  });
  fake.port = server.address().port;
  fake.inspector = `127.0.0.1:${fake.port}`;
  fake.server = server;
  // Drop every open session (the target "crashes").
  fake.dropAll = () => { for (const s of fake.sockets) s.destroy(); };
  fake.close = () => new Promise((resolve) => {
    open.delete(fake);
    fake.dropAll();
    server.close(() => resolve());
    server.closeAllConnections();
  });
  open.add(fake);
  return fake;
}

// A V8 heap snapshot (the .heapsnapshot format of Node 20's V8) of a
// small graph, as an object whose keys are in V8's order (JSON.stringify
// writes it as V8 does). graph: [{type, name, self_size, edges: [{type,
// name | index, to}]}], node 0 the root; types are V8's names ('object',
// 'synthetic', 'array'...; 'property', 'element', 'internal', 'weak'...).
const SNAP_NODE_TYPES = ['hidden', 'array', 'string', 'object', 'code', 'closure', 'regexp', 'number', 'native',
  'synthetic', 'concatenated string', 'sliced string', 'symbol', 'bigint', 'object shape'];
const SNAP_EDGE_TYPES = ['context', 'element', 'property', 'internal', 'hidden', 'shortcut', 'weak'];
function heapSnapshot(graph) {
  const strings = [''];
  const sid = (s) => { let i = strings.indexOf(s); if (i < 0) { i = strings.length; strings.push(s); } return i; };
  const nodes = [];
  const edges = [];
  graph.forEach((n, i) => {
    const es = n.edges || [];
    nodes.push(SNAP_NODE_TYPES.indexOf(n.type), sid(n.name || ''), 2 * i + 1, n.self_size || 0, es.length, 0, 0);
    for (const e of es) {
      const named = e.type !== 'element' && e.type !== 'hidden';
      edges.push(SNAP_EDGE_TYPES.indexOf(e.type), named ? sid(e.name) : e.index, e.to * 7);
    }
  });
  return {
    snapshot: {
      meta: {
        node_fields: ['type', 'name', 'id', 'self_size', 'edge_count', 'trace_node_id', 'detachedness'],
        node_types: [SNAP_NODE_TYPES, 'string', 'number', 'number', 'number', 'number', 'number'],
        edge_fields: ['type', 'name_or_index', 'to_node'],
        edge_types: [SNAP_EDGE_TYPES, 'string_or_number', 'node'],
        trace_function_info_fields: ['function_id', 'name', 'script_name', 'script_id', 'line', 'column'],
        trace_node_fields: ['id', 'function_info_index', 'count', 'size', 'children'],
        sample_fields: ['timestamp_us', 'last_assigned_id'],
        location_fields: ['object_index', 'script_id', 'line', 'column'],
      },
      node_count: graph.length,
      edge_count: edges.length / 3,
      trace_function_count: 0,
    },
    nodes, edges, trace_function_infos: [], trace_tree: [], samples: [], locations: [], strings,
  };
}

module.exports = { startFakeInspector, closeAll, acceptKey, frame, frameHeader, parseFrames, defaultProfile, badProfile, hostileList, HOSTILE_UNUSABLE_PATHS, heapSnapshot };

if (require.main === module) {
  startFakeInspector({ mode: process.argv[2] || 'normal' }).then((f) => {
    console.log(`port=${f.port}`);
  });
}
