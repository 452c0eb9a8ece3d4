#!/usr/bin/env node
// What a host costs Pyroscope at fleet scale, measured against the
// loopback test ingest server (the series model is bench_series, a C
// program on the daemon's own label rules):
//
//   node tests/bench/bench_fleet.js [--build build] [--seconds 90]
//        [--isolates 20] [--outage-min 50] [--rate BYTES_A_SECOND] [--rps 200]
//
// 1. Bytes an isolate uploads an hour at the default schedule: one Node
//    target (workloads/service.js, the overhead benchmark's HTTP service,
//    driven here at --rps 200 requests a second) profiled with the default CPU window (10 s at 10 ms) and
//    heap sampling, the period shortened to 15 s (CPU) and 30 s (heap) so
//    that --seconds collects several of each; each window's size does not
//    depend on the period. Reported: the median CPU and heap window, as
//    sent (gzip) and uncompressed (what Pyroscope's rate limit counts), and
//    per hour at the default periods (60 CPU and 12 heap windows).
// 2. The drain after an outage: a store holding --outage-min minutes of
//    backlog for --isolates isolates at the default CPU period (one window
//    a minute each; heap windows not included), each window a real CPU
//    window recorded in part 1 (outbox_fill), drained by a daemon with no
//    targets at upload.max_rate --rate (default: the option's default) to
//    the ingest server. Reported: drain time, the peak rate over any 1 s
//    and the mean rate (uncompressed bytes, at the server's clock).
// It measures; it asserts nothing. Every child is started here on
// 127.0.0.1 and stopped by its PID.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const C = require('./common');
const { startIngestServer } = require('../integration/ingest-server');

const SECONDS = Number(C.arg('seconds', '90'));
const ISOLATES = Number(C.arg('isolates', '20'));
const OUTAGE_MIN = Number(C.arg('outage-min', '50'));
const RATE = Number(C.arg('rate', '4096')); // upload.max_rate's default
const RPS = Number(C.arg('rps', '200'));
const SERVICE = path.join(__dirname, 'workloads', 'service.js');
const http = require('node:http');
const bin = C.binaries(C.arg('build'));

const med = (xs) => (xs.length ? C.median(xs) : NaN);
const kib = (b) => (b / 1024).toFixed(1);

function daemonConfig(dir, store, targets, srv, extra = []) {
  const cfg = path.join(dir, 'isoprof.yaml');
  fs.writeFileSync(cfg, [
    `store: {path: "${store}", max_size: 4GiB}`,
    targets.length ? 'targets:' : 'targets: []',
    ...targets.map((t) => `  - {inspector: "127.0.0.1:${t.port}", worker: "${t.worker}", version: v1}`),
    'sampling: {cpu: {period: 15s, jitter: 0%}, heap: {period: 30s}, budget: {pause_share: 100%}}',
    'anomaly: {latency: {listen: ""}}',
    'log: {level: info}',
    `upload: {url: "${srv.url}", host: bench, batch: {max_delay: 1s}${extra.length ? ', ' + extra.join(', ') : ''}}`,
  ].join('\n') + '\n');
  return cfg;
}

// POST /orders/render to the service at about rps requests a second until
// stopped: a real handler's stacks in every window.
function load(port, body, rps) {
  let on = true;
  const one = () => new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/orders/render', agent: keep,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) } }, (res) => { res.resume(); res.on('end', resolve); });
    req.on('error', resolve);
    req.end(body);
  });
  const keep = new http.Agent({ keepAlive: true, maxSockets: 8 });
  const loop = (async () => { while (on) { await Promise.all(Array.from({ length: 8 }, one)); await C.sleep(8000 / rps); } })();
  return async () => { on = false; await loop; keep.destroy(); };
}

async function bytesPerHour() {
  const dir = C.tmpdir('fleet');
  const srv = await startIngestServer({ dir: path.join(dir, 'ingest') });
  const portFile = path.join(dir, 'port');
  const node = await C.startNode(SERVICE, { env: { SERVICE_PORT_FILE: portFile } });
  const port = await C.waitFor(() => (fs.existsSync(portFile) ? Number(fs.readFileSync(portFile, 'utf8')) : null), 15000, 'the service port');
  const stopLoad = load(port, require(SERVICE).orderBody(1), RPS);
  const cfg = daemonConfig(dir, path.join(dir, 'store'), [{ port: node.port, worker: 'svc' }], srv);
  const d = C.start(bin.isoprofd, ['--config', cfg]);
  await C.sleep(SECONDS * 1000);
  await C.stop(d, 'SIGINT', 20000);
  await stopLoad();
  await C.stop(node);
  await srv.close();
  const cpu = srv.profiles.filter((p) => p.labels.__name__ === 'process_cpu');
  const heap = srv.profiles.filter((p) => p.labels.__name__ === 'memory');
  const r = {
    cpu: { n: cpu.length, gz: med(cpu.map((p) => p.bytes)), raw: med(cpu.map((p) => p.rawBytes)) },
    heap: { n: heap.length, gz: med(heap.map((p) => p.bytes)), raw: med(heap.map((p) => p.rawBytes)) },
    sample: cpu.length ? cpu[Math.floor(cpu.length / 2)].file : null,
  };
  r.hour = { gz: 60 * r.cpu.gz + 12 * r.heap.gz, raw: 60 * r.cpu.raw + 12 * r.heap.raw };
  return r;
}

async function drain(sampleFile) {
  const dir = C.tmpdir('fleet-drain');
  const store = path.join(dir, 'store');
  const n = ISOLATES * OUTAGE_MIN;
  const f = spawnSync(bin.bench('outbox_fill'), [store, String(n), sampleFile, '60'], { encoding: 'utf8' });
  if (f.status !== 0) throw new Error(`outbox_fill: ${f.stderr}`);
  const srv = await startIngestServer({ dir: path.join(dir, 'ingest'), record: false });
  const cfg = daemonConfig(dir, store, [], srv, [`max_rate: ${RATE}B`]);
  const t0 = Date.now();
  const d = C.start(bin.isoprofd, ['--config', cfg]);
  await C.waitFor(() => srv.profiles.length >= n, 3600 * 1000, 'the backlog drained');
  const ms = Date.now() - t0;
  await C.stop(d, 'SIGINT', 20000);
  await srv.close();
  // bytes by the second they arrived
  const bySec = new Map();
  for (const p of srv.profiles) bySec.set(Math.floor(p.time / 1000), (bySec.get(Math.floor(p.time / 1000)) || 0) + p.rawBytes);
  const total = srv.profiles.reduce((s, p) => s + p.rawBytes, 0);
  return { n, fill: f.stdout.trim(), ms, total, peak: Math.max(...bySec.values()), requests: srv.requests.length };
}

(async () => {
  console.log(`bench_fleet: ${SECONDS} s of one isolate; drain of ${OUTAGE_MIN} min x ${ISOLATES} isolates at ${kib(RATE)} KiB/s`);
  const a = await bytesPerHour();
  C.printTable(['window', 'n', 'sent (gzip) B', 'uncompressed B'], [
    ['cpu (10 s at 10 ms)', a.cpu.n, a.cpu.gz, a.cpu.raw],
    ['heap', a.heap.n, a.heap.gz, a.heap.raw],
    ['an hour (60 cpu + 12 heap)', '', a.hour.gz, a.hour.raw],
  ]);
  console.log(`per isolate: ${kib(a.hour.gz)} KiB/h sent, ${kib(a.hour.raw)} KiB/h uncompressed ` +
    `(${(a.hour.raw / 3600).toFixed(0)} B/s); ${ISOLATES} isolates: ${kib(ISOLATES * a.hour.raw / 3600)} KiB/s steady`);
  if (!a.sample) throw new Error('no CPU window arrived');
  const b = await drain(a.sample);
  console.log(`\ndrain: ${b.n} windows (${b.fill}), ${(b.total / 1048576).toFixed(2)} MiB uncompressed, ${b.requests} requests`);
  console.log(`drain time ${(b.ms / 1000).toFixed(1)} s; peak ${kib(b.peak)} KiB/s over 1 s; mean ${kib(b.total / (b.ms / 1000))} KiB/s; ` +
    `max_rate ${kib(RATE)} KiB/s (bucket: one second's worth)`);
})().catch((e) => { console.error(e); process.exit(1); });
