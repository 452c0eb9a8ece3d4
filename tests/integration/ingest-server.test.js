// The loopback Pyroscope ingest server (ingest-server.js) on its own: it
// decodes and records what a Push or /ingest client sends, refuses what a
// real server refuses, and misbehaves exactly as scripted. When an upload
// test fails, this one says whether the server is to blame.
'use strict';
const { test, after } = require('node:test');
const assert = require('node:assert');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const http = require('node:http');
const path = require('node:path');
const zlib = require('node:zlib');
const L = require('./lib');
const I = require('./ingest-server');

after(I.closeAll);
after(L.cleanup);

// --- a PushRequest encoder (field numbers of PROTOCOLS.md §3) -------------

function varint(n) {
  const out = [];
  do { let b = n % 128; n = Math.floor(n / 128); if (n) b |= 0x80; out.push(b); } while (n);
  return Buffer.from(out);
}
const key = (f, w) => varint(f * 8 + w);
const len = (f, b) => { b = Buffer.isBuffer(b) ? b : Buffer.from(b); return Buffer.concat([key(f, 2), varint(b.length), b]); };
const vint = (f, v) => Buffer.concat([key(f, 0), varint(v)]);
// series: [{labels: {k: v}, samples: [{raw, id}]}]; extra(level) adds bytes
// at the end of each message (unknown fields).
function pushRequest(series, extra = () => Buffer.alloc(0)) {
  return Buffer.concat([...series.map((s) => len(1, Buffer.concat([
    ...Object.entries(s.labels).map(([k, v]) => len(1, Buffer.concat([len(1, k), len(2, v), extra('label')]))),
    ...s.samples.map((x) => len(2, Buffer.concat([len(1, x.raw), len(2, x.id), extra('sample')]))),
    extra('series'),
  ]))), extra('request')]);
}

// Every wire type an unknown field may have: varint, fixed64, bytes,
// fixed32, and a group with a field inside.
const UNKNOWN = Buffer.concat([
  vint(99, 300), key(98, 1), Buffer.alloc(8, 7), len(96, 'skip me'), key(97, 5), Buffer.alloc(4, 9),
  key(95, 3), vint(1, 5), len(2, 'in a group'), key(95, 4),
]);

const PPROF = L.encodePprof({
  sampleTypes: [['samples', 'count'], ['cpu', 'nanoseconds']],
  samples: [
    { stack: [{ fn: 'hotLoop', file: '/app/main.js', line: 12 }, { fn: 'main', file: '/app/main.js', line: 3 }], values: [90, 900000000] },
    { stack: [{ fn: 'coldPath', file: '/app/main.js', line: 30 }, { fn: 'main', file: '/app/main.js', line: 3 }], values: [10, 100000000] },
  ],
  periodType: ['cpu', 'nanoseconds'],
  period: 10000000,
});
const PPROF_RAW = zlib.gunzipSync(PPROF);
const ID1 = '0b8e4b4e-7c55-4c1b-9a3e-2b1f0f6f9c01';
const ID2 = '0b8e4b4e-7c55-4c1b-9a3e-2b1f0f6f9c02';
const TWO_SERIES = [
  { labels: { __name__: 'process_cpu', service_name: 'checkout', version: 'v42' }, samples: [{ raw: PPROF, id: ID1 }] },
  { labels: { __name__: 'process_cpu', service_name: 'search', version: 'v7' }, samples: [{ raw: PPROF_RAW, id: ID2 }] },
];
const PROTO = { 'Content-Type': 'application/proto', 'Connect-Protocol-Version': '1' };

// One request on a fresh connection. Resolves {status, headers, body};
// rejects with the socket/parse error, or 'client timeout' after timeoutMs
// (err.response: {status, headers, bytes} if the headers had arrived).
function post(port, p, { headers = {}, body = Buffer.alloc(0), timeoutMs = 5000, method = 'POST' } = {}) {
  return new Promise((resolve, reject) => {
    let response = null;
    const req = http.request({ host: '127.0.0.1', port, path: p, method, headers: { 'Content-Length': body.length, ...headers }, agent: false }, (res) => {
      response = { status: res.statusCode, headers: res.headers, bytes: 0 };
      const chunks = [];
      res.on('data', (d) => { chunks.push(d); response.bytes += d.length; });
      res.on('end', () => { clearTimeout(t); resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }); });
      res.on('error', () => {});
    });
    const t = setTimeout(() => req.destroy(Object.assign(new Error('client timeout'), { code: 'CLIENT_TIMEOUT' })), timeoutMs);
    req.on('error', (e) => { clearTimeout(t); e.response = response; reject(e); });
    req.end(body);
  });
}
const push = (srv, body, headers = {}, opts = {}) => post(srv.port, I.PUSH_PATH, { headers: { ...PROTO, ...headers }, body, ...opts });

test('push: two series recorded with their labels, IDs and files; go tool pprof reads them', async () => {
  const dir = L.tmpdir();
  const srv = await I.startIngestServer({ dir });
  assert.strictEqual(srv.url, `http://127.0.0.1:${srv.port}`);
  const r = await push(srv, pushRequest(TWO_SERIES), { Authorization: 'Basic dTpw', 'X-Scope-OrgID': 'tenant-1', 'X-Extra': 'yes' });
  assert.strictEqual(r.status, 200, r.body.toString());
  assert.strictEqual(r.headers['content-type'], 'application/proto');
  assert.strictEqual(r.body.length, 0);

  const recs = await srv.waitProfiles(2, 1000);
  assert.strictEqual(recs.length, 2);
  const [a, b] = recs;
  assert.deepStrictEqual(a.labels, TWO_SERIES[0].labels);
  assert.deepStrictEqual(b.labels, TWO_SERIES[1].labels);
  assert.strictEqual(a.id, ID1); assert.strictEqual(b.id, ID2);
  assert.strictEqual(a.api, 'push'); assert.strictEqual(a.request, 0); assert.strictEqual(a.seq, 1); assert.strictEqual(b.seq, 2);
  assert.strictEqual(a.gzip, true); assert.strictEqual(b.gzip, false);
  assert.strictEqual(a.bytes, PPROF.length); assert.strictEqual(b.bytes, PPROF_RAW.length); assert.strictEqual(a.rawBytes, PPROF_RAW.length);
  assert.strictEqual(a.file, path.join(dir, '1.pb.gz'));
  assert.deepStrictEqual(fs.readFileSync(a.file), PPROF, 'a gzip\'d profile is kept byte for byte');
  assert.deepStrictEqual(zlib.gunzipSync(fs.readFileSync(b.file)), PPROF_RAW, 'a plain one is gzip\'d');
  for (const h of [['authorization', 'Basic dTpw'], ['x-scope-orgid', 'tenant-1'], ['connect-protocol-version', '1'], ['x-extra', 'yes']]) {
    assert.strictEqual(a.headers[h[0]], h[1], h[0]);
  }
  assert.strictEqual(a.from, null);
  const lines = fs.readFileSync(path.join(dir, 'records.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  assert.deepStrictEqual(lines, JSON.parse(JSON.stringify(recs)));
  assert.strictEqual(srv.requests.length, 1);
  assert.deepStrictEqual([srv.requests[0].status, srv.requests[0].series, srv.requests[0].profiles, srv.requests[0].recorded], [200, 2, 2, 2]);

  for (const rec of recs) {
    const top = I.pprofTop(rec.file, ['-nodecount=10']);
    assert.match(top, /hotLoop/);
    assert.match(top, /coldPath/);
    assert.deepStrictEqual(L.parsePprofTop(top).find((x) => x.name === 'hotLoop').flatPct, 90);
  }
  await srv.close();
});

test('push: gzip Content-Encoding of the body; unknown fields skipped at every level', async () => {
  const srv = await I.startIngestServer({ dir: L.tmpdir() });
  const r1 = await push(srv, zlib.gzipSync(pushRequest(TWO_SERIES)), { 'Content-Encoding': 'gzip' });
  assert.strictEqual(r1.status, 200, r1.body.toString());
  // Unknown fields everywhere, annotations (3), and series (1) with a wrong
  // wire type: all skipped, like protobuf-go does.
  const withUnknown = Buffer.concat([vint(1, 7), pushRequest(TWO_SERIES, (level) => (level === 'series' ? Buffer.concat([UNKNOWN, len(3, 'annotation')]) : UNKNOWN))]);
  const r2 = await push(srv, withUnknown);
  assert.strictEqual(r2.status, 200, r2.body.toString());
  await srv.waitProfiles(4, 1000);
  assert.deepStrictEqual(srv.profiles.map((p) => p.id), [ID1, ID2, ID1, ID2]);
  assert.deepStrictEqual(srv.profiles[3].labels, TWO_SERIES[1].labels);
  assert.deepStrictEqual(I.decodePushRequest(withUnknown).map((s) => s.labels.length), [3, 3]);
  await srv.close();
});

test('record: false keeps the records in memory only', async () => {
  const dir = L.tmpdir();
  const srv = await I.startIngestServer({ dir, record: false });
  assert.strictEqual((await push(srv, pushRequest(TWO_SERIES))).status, 200);
  const recs = await srv.waitProfiles(2, 1000);
  assert.deepStrictEqual(recs.map((p) => [p.id, p.file, p.gzip]), [[ID1, null, true], [ID2, null, false]]);
  assert.deepStrictEqual(fs.readdirSync(dir), []);
  await srv.close();
});

test('push: empty, malformed, wrong type or encoding, oversized: refused, nothing recorded', async () => {
  const srv = await I.startIngestServer({ dir: L.tmpdir(), maxBodyBytes: 4096 });
  const json = (r) => JSON.parse(r.body.toString());

  let r = await push(srv, Buffer.alloc(0));
  assert.strictEqual(r.status, 400);
  assert.deepStrictEqual(json(r), { code: 'invalid_argument', message: 'no profiles received' });
  r = await push(srv, pushRequest([{ labels: { __name__: 'process_cpu' }, samples: [] }]));
  assert.strictEqual(r.status, 400);
  assert.match(json(r).message, /no profiles received/);

  for (const bad of [
    Buffer.from([0x0a, 0x10, 0x01]), // length past the end
    Buffer.from([0x0a, 0x02, 0x0a]), // a nested length past its message
    Buffer.from([0x0f]), // wire type 7
    Buffer.from([0x08, 0xff]), // truncated varint
    Buffer.from([0x1c]), // end-group without a group
    pushRequest([{ labels: { __name__: Buffer.from([0xff, 0xfe]) }, samples: [{ raw: PPROF, id: ID1 }] }]), // invalid UTF-8
    pushRequest([{ labels: { __name__: 'x' }, samples: [{ raw: Buffer.from('not a profile at all'), id: ID1 }] }]),
    pushRequest([{ labels: { __name__: 'x' }, samples: [{ raw: Buffer.from([0x1f, 0x8b, 1, 2, 3]), id: ID1 }] }]), // bad gzip
  ]) {
    r = await push(srv, bad);
    assert.strictEqual(r.status, 400, `${bad.toString('hex')}: ${r.body}`);
    assert.ok(json(r).message.length > 5, r.body.toString());
  }
  r = await push(srv, pushRequest(TWO_SERIES), { 'Content-Type': 'application/json' });
  assert.strictEqual(r.status, 415);
  r = await push(srv, pushRequest(TWO_SERIES), { 'Content-Encoding': 'br' });
  assert.strictEqual(r.status, 501);
  r = await push(srv, Buffer.alloc(5000));
  assert.strictEqual(r.status, 413);
  r = await push(srv, zlib.gzipSync(Buffer.alloc(5000)), { 'Content-Encoding': 'gzip' });
  assert.strictEqual(r.status, 413, 'a gzip body is bounded once inflated too');
  r = await post(srv.port, '/nowhere', { body: Buffer.from('x') });
  assert.strictEqual(r.status, 404);
  r = await post(srv.port, I.PUSH_PATH, { method: 'GET' });
  assert.strictEqual(r.status, 405);

  assert.strictEqual(srv.profiles.length, 0);
  assert.strictEqual(srv.requests.length, 16);
  assert.ok(srv.requests.every((q) => q.done && q.recorded === 0 && q.status >= 400));
  assert.strictEqual(srv.requests[2].profiles, 0, 'undecodable: no count');
  assert.strictEqual(srv.requests[8].profiles, 1, 'decoded, but its profile is not pprof');
  assert.strictEqual(srv.requests[10].profiles, 0, '415: not decoded');
  await assert.rejects(srv.waitProfiles(1, 200), /timed out after 200 ms waiting for 1 profiles: 0 arrived/);
  await srv.close();
});

test('/ingest: multipart and raw format=pprof recorded with the name\'s labels', async () => {
  const srv = await I.startIngestServer({ dir: L.tmpdir() });
  const q = (name, extra = '') => `/ingest?name=${encodeURIComponent(name)}&from=1700000000&until=1700000010&spyName=isoprof${extra}`;
  const boundary = '----isoprof-7f3a';
  const multipart = Buffer.concat([
    Buffer.from(`preamble\r\n--${boundary}\r\nContent-Disposition: form-data; name="sample_type_config"\r\n\r\n{"cpu":{"units":"samples"}}\r\n`),
    Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="profile"; filename="profile.pprof"\r\nContent-Type: application/octet-stream\r\n\r\n`),
    PPROF, Buffer.from(`\r\n--${boundary}--\r\n`),
  ]);
  let r = await post(srv.port, q('checkout.cpu{worker=checkout,version=v42}'), { headers: { 'Content-Type': `multipart/form-data; boundary="${boundary}"` }, body: multipart });
  assert.strictEqual(r.status, 200, r.body.toString());
  r = await post(srv.port, q('search{}', '&format=pprof'), { headers: { 'Content-Type': 'application/octet-stream' }, body: PPROF_RAW });
  assert.strictEqual(r.status, 200, r.body.toString());
  const [a, b] = await srv.waitProfiles(2, 1000);
  assert.deepStrictEqual([a.api, a.app, a.labels, a.from, a.until, a.spyName, a.gzip, a.format], ['ingest', 'checkout.cpu', { worker: 'checkout', version: 'v42' }, '1700000000', '1700000010', 'isoprof', true, null]);
  assert.strictEqual(a.sampleTypeConfig, '{"cpu":{"units":"samples"}}');
  assert.deepStrictEqual(fs.readFileSync(a.file), PPROF);
  assert.deepStrictEqual([b.app, b.labels, b.gzip, b.format, b.id], ['search', {}, false, 'pprof', null]);
  assert.match(I.pprofTop(b.file), /hotLoop/);

  r = await post(srv.port, q('bad name{x}'), { headers: { 'Content-Type': `multipart/form-data; boundary=${boundary}` }, body: multipart });
  assert.strictEqual(r.status, 400);
  r = await post(srv.port, q('app'), { headers: { 'Content-Type': `multipart/form-data; boundary=${boundary}` }, body: Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="other"\r\n\r\nx\r\n--${boundary}--\r\n`) });
  assert.strictEqual(r.status, 422, 'no profile part');
  r = await post(srv.port, q('app'), { headers: { 'Content-Type': `multipart/form-data; boundary=${boundary}` }, body: Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="profile"\r\n\r\nunterminated`) });
  assert.strictEqual(r.status, 422, 'unterminated part');
  assert.deepStrictEqual(I.parseIngestName('a.b/c-d{k=v,k2=}'), { app: 'a.b/c-d', labels: { k: 'v', k2: '' } });
  assert.strictEqual(srv.profiles.length, 2);
  await srv.close();
});

test('scripted answers: statuses, Retry-After, bodies, delays, script sees the series', async () => {
  const srv = await I.startIngestServer({ dir: L.tmpdir() });
  const body = pushRequest(TWO_SERIES);
  srv.queue([{ status: 429, retryAfter: 2 }, 503, { status: 500 }, { status: 400, body: 'bad profile' }]);
  let r = await push(srv, body);
  assert.strictEqual(r.status, 429); assert.strictEqual(r.headers['retry-after'], '2');
  assert.strictEqual((await push(srv, body)).status, 503);
  assert.strictEqual((await push(srv, body)).status, 500);
  r = await push(srv, body);
  assert.deepStrictEqual([r.status, r.body.toString()], [400, 'bad profile']);
  assert.strictEqual(srv.profiles.length, 0, 'refused requests record nothing');
  assert.deepStrictEqual(srv.requests.map((q) => [q.status, q.series, q.profiles, q.recorded]), [[429, 2, 2, 0], [503, 2, 2, 0], [500, 2, 2, 0], [400, 2, 2, 0]]);
  assert.strictEqual((await push(srv, body)).status, 200, 'the queue ran out: default 200');

  const seen = [];
  srv.script((req) => { seen.push(req); return req.series && req.series[0].labels.service_name === 'checkout' ? { status: 503 } : { status: 200, delayMs: 300 }; });
  assert.strictEqual((await push(srv, body)).status, 503);
  const t0 = Date.now();
  r = await push(srv, pushRequest([TWO_SERIES[1]]));
  assert.strictEqual(r.status, 200);
  assert.ok(Date.now() - t0 >= 280, `delayMs: answered after ${Date.now() - t0} ms`);
  assert.strictEqual((await push(srv, Buffer.from([0x0f]))).status, 400, 'a script 200 does not make a malformed request valid');
  assert.deepStrictEqual(seen[0].series, [{ labels: TWO_SERIES[0].labels, ids: [ID1] }, { labels: TWO_SERIES[1].labels, ids: [ID2] }]);
  assert.deepStrictEqual([seen[0].index, seen[0].path, seen[0].api, seen[0].headers['content-type']], [5, I.PUSH_PATH, 'push', 'application/proto']);
  assert.strictEqual(seen[2].series, null, 'undecodable: series null');
  srv.script(() => { throw new Error('oops'); });
  assert.strictEqual((await push(srv, body)).status, 500);
  srv.script(null);
  assert.strictEqual(srv.profiles.length, 3);
  await srv.close();
});

test('scripted failures: hang, reset, garbage, huge, drip', async () => {
  const srv = await I.startIngestServer({ dir: L.tmpdir() });
  const body = pushRequest(TWO_SERIES);
  srv.queue(['hang', 'reset', 'garbage', 'huge', 'drip']);
  const [hang, reset, garbage, huge, drip] = await Promise.allSettled([
    push(srv, body, {}, { timeoutMs: 2500 }),
    // the rest go out once the hang is taken, so the queue order holds
    L.sleep(100).then(() => push(srv, body)),
    L.sleep(200).then(() => push(srv, body)),
    L.sleep(300).then(() => push(srv, body, {}, { timeoutMs: 2200 })),
    L.sleep(400).then(() => push(srv, body, {}, { timeoutMs: 2100 })),
  ]);
  assert.strictEqual(hang.status, 'rejected'); assert.strictEqual(hang.reason.code, 'CLIENT_TIMEOUT');
  assert.strictEqual(hang.reason.response, null, 'hang: not even a status line');
  assert.strictEqual(reset.status, 'rejected'); assert.strictEqual(reset.reason.code, 'ECONNRESET');
  assert.strictEqual(reset.reason.syscall, 'read', `a TCP RST, not a FIN ("socket hang up"): ${reset.reason.message}`);
  assert.strictEqual(garbage.status, 'rejected'); assert.match(garbage.reason.code, /^HPE_/, String(garbage.reason));
  assert.strictEqual(huge.status, 'rejected'); assert.strictEqual(huge.reason.code, 'CLIENT_TIMEOUT');
  assert.strictEqual(huge.reason.response.status, 200);
  assert.strictEqual(huge.reason.response.headers['content-length'], '1000000000');
  assert.ok(huge.reason.response.bytes > 0 && huge.reason.response.bytes < 1e6, `huge: ${huge.reason.response.bytes} bytes`);
  assert.strictEqual(drip.status, 'rejected'); assert.strictEqual(drip.reason.code, 'CLIENT_TIMEOUT');
  assert.strictEqual(drip.reason.response.status, 200);
  assert.ok(drip.reason.response.bytes >= 1 && drip.reason.response.bytes <= 3, `drip: ${drip.reason.response.bytes} bytes in ~2 s`);
  assert.deepStrictEqual(srv.requests.map((q) => [q.action, q.status, q.profiles]), [['hang', null, 2], ['reset', null, 2], ['garbage', null, 2], ['huge', 200, 2], ['drip', 200, 2]]);
  assert.strictEqual(srv.profiles.length, 0);
  assert.strictEqual((await push(srv, body)).status, 200);
  await srv.close();
});

test('pause refuses connections, resume listens on the same port; close ends hung connections', async () => {
  const srv = await I.startIngestServer({ dir: L.tmpdir() });
  const port = srv.port;
  const body = pushRequest([TWO_SERIES[0]]);
  await srv.pause();
  await assert.rejects(push(srv, body), (e) => e.code === 'ECONNREFUSED');
  assert.strictEqual(await L.portOpen(port), false);
  await srv.resume();
  assert.strictEqual(srv.port, port);
  assert.strictEqual((await push(srv, body)).status, 200);
  assert.strictEqual(srv.requests.length, 1, 'a refused connection is no request');

  srv.queue(['hang', 'hang']);
  const hung = [push(srv, body, {}, { timeoutMs: 10000 }), push(srv, body, {}, { timeoutMs: 10000 })];
  await srv.waitRequests(3, 2000);
  const t0 = Date.now();
  await srv.close();
  await srv.close(); // idempotent
  for (const h of hung) await assert.rejects(h, (e) => e.code === 'ECONNRESET' && e.response === null);
  assert.ok(Date.now() - t0 < 1000, `close took ${Date.now() - t0} ms to end hung connections`);
  assert.strictEqual(await L.portOpen(port), false);
  await assert.rejects(srv.waitProfiles(5, 1000), /closed/);
});

test('standalone: prints its URL, records, exits 0 on SIGTERM', async () => {
  const dir = L.tmpdir();
  const c = L.track(spawn(process.execPath, [path.join(__dirname, 'ingest-server.js'), '--port', '0', '--dir', dir], { stdio: ['ignore', 'pipe', 'pipe'] }), 'ingest-server');
  let out = '';
  c.stdout.on('data', (d) => { out += d; });
  const url = await L.waitFor(() => (/^listening (http:\/\/127\.0\.0\.1:(\d+))\n/.exec(out) || [])[1], 5000, 'the listening line');
  const port = Number(new URL(url).port);
  const r = await post(port, I.PUSH_PATH, { headers: PROTO, body: pushRequest(TWO_SERIES) });
  assert.strictEqual(r.status, 200, r.body.toString());
  assert.ok(fs.existsSync(path.join(dir, '2.pb.gz')));
  assert.strictEqual(fs.readFileSync(path.join(dir, 'records.jsonl'), 'utf8').trim().split('\n').length, 2);
  const { code } = await L.stop(c, 'SIGTERM', 3000);
  assert.strictEqual(code, 0, c.stderrText);
  assert.match(c.stderrText, /#0 POST \/push\.v1\.PusherService\/Push 200 .*recorded=2/);
});
