// A flood of distinct DogStatsD worker tags against a running daemon: 1,100
// junk workers keep the latency detector's 1,024-series table full, yet
// the configured worker's series gets in (it is known, so it displaces a
// junk one), learns its baseline and has its P999 spike flagged; the lines
// refused for want of room are counted in /metrics and said in a warning.
// All on loopback, against the fake inspector (the detector needs no real
// runtime), waiting on conditions only.
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const path = require('node:path');
const http = require('node:http');
const dgram = require('node:dgram');
const L = require('./lib');
const { startFakeInspector } = require('./fake-inspector');

// GET http://127.0.0.1:port/p -> the body (status 200 asserted).
function get(port, p) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: p, method: 'GET', timeout: 5000 }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        if (res.statusCode !== 200) reject(new Error(`GET ${p}: ${res.statusCode}`));
        else resolve(Buffer.concat(chunks).toString('utf8'));
      });
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${p}: timeout`)));
    req.on('error', reject);
    req.end();
  });
}

// The value of one sample line of the Prometheus page (NaN if absent).
function sample(text, name) {
  const m = new RegExp(`^${name.replace(/[{}"=]/g, '\\$&')} (\\S+)$`, 'm').exec(text);
  return m ? Number(m[1]) : NaN;
}

// Every `everyMs`, one line from each of `n` junk workers, 25 lines a
// datagram: they stay "seen recently", so the table stays full.
function junkStream(port, n, everyMs) {
  const sock = dgram.createSocket('udp4');
  const send = () => {
    for (let i = 0; i < n; i += 25) {
      const lines = [];
      for (let j = i; j < Math.min(n, i + 25); j++) lines.push(`req:5|ms|#worker:junk-${j},version:v1`);
      sock.send(lines.join('\n'), port, '127.0.0.1');
    }
  };
  send();
  const timer = setInterval(send, everyMs);
  return { stop() { clearInterval(timer); return new Promise((r) => sock.close(r)); } };
}

// worker api/v1 at `rate` lines a second in batches every 10 ms, 4-6 ms
// each; once slow() is called, one line in 50 takes 3-3.05 s. (So slow
// that even the window the slow path starts in, which may hold too few slow
// lines to flag and then feeds the baseline, cannot lift the threshold
// over them.)
function apiStream(port, rate) {
  const sock = dgram.createSocket('udp4');
  let n = 0, slowEvery = 0;
  const perTick = Math.round(rate / 100);
  const timer = setInterval(() => {
    const lines = [];
    for (let i = 0; i < perTick; i++, n++) {
      const ms = slowEvery && n % slowEvery === 0 ? 3000 + (n % 50) : 4 + (n % 3);
      lines.push(`http.request.duration:${ms}|ms|#worker:api,version:v1`);
    }
    sock.send(lines.join('\n'), port, '127.0.0.1');
  }, 10);
  return {
    sent: () => n,
    slow() { slowEvery = 50; },
    stop() { clearInterval(timer); return new Promise((r) => sock.close(r)); },
  };
}

const flagged = (l) => l.msg === 'anomaly flagged' && l.kind === 'latency_p999_spike';

test('1,100 junk worker tags fill the series table: refusals counted and warned, the configured worker still flags its spike', { timeout: 60000 }, async () => {
  const fake = await startFakeInspector({ mode: 'normal' });
  const dir = L.tmpdir();
  const udp = await L.freePort();
  const mport = await L.freePort();
  const d = await L.startDaemon(L.yamlConfig({
    store: path.join(dir, 'store'), targets: [{ port: fake.port, worker: 'api', version: 'v1' }],
    duration: '1s', period: '60s', level: 'info',
    anomaly: `{cooldown: 5s, latency: {listen: "127.0.0.1:${udp}", window: 1s, min_count: 200}}`,
    extra: `metrics: {listen: "127.0.0.1:${mport}"}`,
  }), { dir });
  await d.waitLog((l) => l.msg === 'listening for DogStatsD latency', 10000, 'the DogStatsD listener');
  await L.waitFor(() => L.portOpen(mport), 10000, 'the metrics listener');

  const junk = junkStream(udp, 1100, 500);
  let api;
  try {
    // The table is full once lines are refused for want of room.
    let page = '';
    await L.waitFor(async () => {
      page = await get(mport, '/metrics');
      return sample(page, 'isoprof_latency_refused_total') > 0;
    }, 15000, 'isoprof_latency_refused_total > 0');
    const refusedFirst = sample(page, 'isoprof_latency_refused_total');
    const warn = await d.waitLog((l) => l.msg === 'latency detection refused new series: table full', 5000, 'the refusal warning');
    assert.ok(Number(warn.refused_lines) > 0 && Number(warn.series) === 1024, warn.raw);
    assert.strictEqual(Number(warn.known_series), 0, warn.raw);

    // Now the configured worker: a steady stream for five windows (a
    // baseline), nothing flagged; then a slow path, flagged.
    api = apiStream(udp, 1000);
    await L.waitFor(() => api.sent() >= 5000, 20000, 'five windows of steady api traffic');
    assert.strictEqual(d.count(flagged), 0, 'a steady stream flagged a spike');
    api.slow();
    const spike = await d.waitLog(flagged, 15000, 'the api spike, with the table full of junk');
    assert.strictEqual(spike.worker, 'api');
    assert.strictEqual(spike.version, 'v1');
    assert.ok(Number(spike.p999_ms) >= 3000 && Number(spike.baseline_ms) < 1000, spike.raw);

    page = await get(mport, '/metrics');
    assert.match(page, /^# TYPE isoprof_latency_refused_total counter$/m);
    const refused = sample(page, 'isoprof_latency_refused_total');
    assert.ok(refused > refusedFirst, `junk lines keep being refused (${refusedFirst}, then ${refused})`);
  } finally {
    await junk.stop();
    if (api) await api.stop();
  }
  assert.ok(d.alive());
  const stop = await L.stopDaemon(d);
  assert.strictEqual(stop.code, 0, d.tail());
  assert.strictEqual(d.count(flagged), 1, 'one episode, for api only');
  await fake.close();
});
