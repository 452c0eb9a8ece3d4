// GET /metrics and GET /status of a running daemon: the page passes
// `promtool check metrics` (Debian's prometheus package) without a single
// complaint, its counters move as windows are taken, the metrics.listen TCP
// listener serves the same families, and /status names the target with its
// state, memory and last windows.
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const path = require('node:path');
const fs = require('node:fs');
const http = require('node:http');
const { spawnSync } = require('node:child_process');
const L = require('./lib');

// One GET, over the Unix socket (socketPath) or TCP (port): {status, type, body}.
function get({ socketPath, port, p, timeoutMs = 5000 }) {
  return new Promise((resolve, reject) => {
    const o = socketPath ? { socketPath, path: p } : { host: '127.0.0.1', port, path: p };
    const req = http.request({ ...o, method: 'GET', timeout: timeoutMs }, (res) => {
      const chunks = [];
      res.on('data', (d) => chunks.push(d));
      res.on('end', () => resolve({ status: res.statusCode, type: res.headers['content-type'] || '', body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${p}: timeout`)));
    req.on('error', reject);
    req.end();
  });
}

// promtool reads the page on stdin; exit 0 and not one line of output
// (its lint warnings, such as a counter without _total, exit 0 or 3 too).
function promtool(text, what) {
  const r = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8', timeout: 30000 });
  if (r.error) throw new Error(`promtool: ${r.error.message} (packaging/setup.sh installs Debian's prometheus package)`);
  const out = `${r.stdout || ''}${r.stderr || ''}`.trim();
  assert.strictEqual(out, '', `promtool check metrics on ${what}:\n${out}`);
  assert.strictEqual(r.status, 0, `promtool exit status on ${what}`);
}

// Text format 0.0.4 -> {types: {family: type}, helps: {family}, samples: {"name{labels}": value}}.
function parseMetrics(text) {
  const types = {}, helps = {}, samples = {};
  assert.ok(text.endsWith('\n'), 'the page ends with a newline');
  for (const line of text.split('\n').slice(0, -1)) {
    let m;
    if ((m = /^# HELP (\w+) (.+)$/.exec(line))) { helps[m[1]] = m[2]; continue; }
    if ((m = /^# TYPE (\w+) (counter|gauge|histogram)$/.exec(line))) { types[m[1]] = m[2]; continue; }
    m = /^(\w+)(\{[^}]*\})? (\S+)$/.exec(line);
    assert.ok(m, `not a sample line: ${JSON.stringify(line)}`);
    const hist = /^(\w+)_(bucket|sum|count)$/.exec(m[1]);
    assert.ok(types[m[1]] || (hist && types[hist[1]] === 'histogram'), `${m[1]} has no TYPE line before it`);
    const v = Number(m[3]);
    assert.ok(Number.isFinite(v) && v >= 0, `${line}: value`);
    samples[m[1] + (m[2] || '')] = v;
  }
  return { types, helps, samples };
}

// The sum of a family's samples (every label set).
function total(m, family) {
  let s = 0, n = 0;
  for (const [k, v] of Object.entries(m.samples)) {
    if (k === family || k.startsWith(`${family}{`)) { s += v; n++; }
  }
  assert.ok(n > 0, `${family} has samples`);
  return s;
}

const COUNTERS = [
  'isoprof_windows_started_total', 'isoprof_windows_stored_total', 'isoprof_windows_evicted_total',
  'isoprof_windows_delayed_total', 'isoprof_windows_lost_total', 'isoprof_windows_skipped_total',
  'isoprof_windows_dropped_total', 'isoprof_conversion_errors_total', 'isoprof_store_errors_total',
  'isoprof_sessions_attached_total', 'isoprof_sessions_dropped_total', 'isoprof_discovery_errors_total',
  'isoprof_heap_windows_total', 'isoprof_anomalies_total', 'isoprof_upload_requests_total',
  'isoprof_upload_profiles_total', 'isoprof_statsd_lines_total', 'isoprof_control_requests_total',
  'isoprof_windows_deferred_total', 'isoprof_upload_too_new_total', 'isoprof_upload_labels_cut_total',
  'isoprof_upload_rate_waits_total',
];
const GAUGES = [
  'isoprof_outbox_pending', 'isoprof_outbox_expired', 'isoprof_outbox_oldest_age_seconds', 'isoprof_loop_lag_seconds',
  'isoprof_loop_lag_max_seconds', 'isoprof_resident_memory_bytes', 'isoprof_targets',
  'isoprof_windows_running', 'isoprof_uptime_seconds', 'isoprof_store_windows', 'isoprof_store_bytes',
  'isoprof_store_budget_bytes', 'isoprof_build_info',
];

test('metrics: promtool-clean, counters move, TCP listener; status names the target', { timeout: 100000 }, async () => {
  const node = await L.startNode(path.join(L.WORKLOADS, 'node-light.js'));
  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  const sock = path.join(dir, 'ctl.sock');
  const mport = await L.freePort();
  const extra = `control: {socket: ${JSON.stringify(sock)}}\nmetrics: {listen: "127.0.0.1:${mport}"}`;
  const d = await L.startDaemon(L.yamlConfig({ store, targets: [{ port: node.port, version: 'v1' }], duration: '2s', period: '3s', heap: '{period: 3s}', level: 'info', extra }), { dir });
  await d.waitLog((l) => l.msg === 'target attached', 15000, 'target attached');
  await L.waitFor(() => fs.existsSync(sock), 10000, 'the control socket');

  // /status, once a CPU window is stored, memory was polled and the store figures were read.
  let st;
  await L.waitFor(async () => {
    const r = await get({ socketPath: sock, p: '/status' });
    assert.strictEqual(r.status, 200, r.body);
    st = JSON.parse(r.body);
    const t = st.targets && st.targets[0];
    return t && t.last_window.cpu !== null && t.last_window.heap !== null && t.memory.used !== null && t.memory.limit !== null && st.store.as_of !== null && st.store.windows > 0;
  }, 40000, 'stored CPU and heap windows, a memory poll and the store figures in /status');
  assert.strictEqual(st.version, '0.1.0');
  assert.strictEqual(st.pid, d.pid);
  assert.ok(Number.isInteger(st.uptime_s) && st.uptime_s >= 0);
  assert.strictEqual(st.config, d.config);
  assert.strictEqual(st.targets.length, 1);
  const t = st.targets[0];
  assert.deepStrictEqual(Object.keys(t), ['worker', 'version', 'version_source', 'thread', 'isolate', 'runtime', 'endpoint', 'state', 'memory', 'last_window', 'window', 'budget', 'cpu_mode', 'anomaly']);
  assert.strictEqual(t.worker, 'node-light.js');
  assert.strictEqual(t.version, 'v1');
  assert.strictEqual(t.version_source, 'config');
  assert.strictEqual(t.thread, 'main');
  assert.ok(Number.isInteger(t.isolate) && t.isolate > 0, `isolate ${t.isolate}`);
  assert.strictEqual(t.runtime, 'node');
  assert.strictEqual(t.endpoint, `127.0.0.1:${node.port}`);
  assert.strictEqual(t.state, 'ready');
  assert.ok(t.memory.used > 0, `memory.used ${t.memory.used}`);
  // memory_limit auto: V8's own, once the first poll has learned it.
  assert.ok(t.memory.limit >= 1024 * 1024 * 1024, JSON.stringify(t.memory));
  assert.strictEqual(t.memory.limit_source, 'auto:v8-default');
  assert.deepStrictEqual(Object.keys(t.memory), ['used', 'limit', 'limit_source', 'growth']);
  const cpuAt = Date.parse(t.last_window.cpu);
  assert.match(t.last_window.cpu, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  assert.ok(Math.abs(cpuAt - Date.now()) < 60000, `last cpu window ${t.last_window.cpu} is recent`);
  assert.ok(Math.abs(Date.parse(t.last_window.heap) - Date.now()) < 60000, `last heap window ${t.last_window.heap}`);
  assert.ok(['none', 'queued', 'starting', 'running', 'stopping'].includes(t.window), t.window);
  // The pause budget (none in this config): the config's schedule, the calls measured.
  assert.deepStrictEqual(Object.keys(t.budget), ['period_ms', 'duration_ms', 'heap_period_ms', 'factor', 'limited', 'over_max_pause', 'duration_capped', 'planned_share', 'spent_share', 'paused_ms', 'observed_ms', 'credit_ms', 'deferred', 'estimate', 'pauses']);
  assert.strictEqual(t.budget.period_ms, 3000);
  assert.strictEqual(t.budget.duration_ms, 2000);
  assert.strictEqual(t.budget.limited, false);
  assert.ok(t.budget.pauses.start.count >= 1 && t.budget.pauses.stop.count >= 1 && t.budget.pauses.heap.count >= 1, JSON.stringify(t.budget.pauses));
  assert.ok(t.budget.pauses.start.max_ms >= t.budget.pauses.start.p50_ms && t.budget.pauses.start.p50_ms > 0, JSON.stringify(t.budget.pauses.start));
  assert.strictEqual(t.anomaly, null);
  assert.deepStrictEqual(Object.keys(st.schedule), ['running', 'delayed', 'max_concurrent']);
  assert.strictEqual(st.schedule.max_concurrent, 4);
  assert.strictEqual(st.store.path, store);
  assert.ok(st.store.bytes > 0 && st.store.budget > 0 && st.store.evicted_total === 0, JSON.stringify(st.store));
  assert.deepStrictEqual(Object.keys(st.outbox), ['pending', 'oldest_age_s', 'rejected', 'expired', 'uploaded', 'evicted']);
  assert.strictEqual(st.upload.enabled, false);
  for (const k of ['windows_started', 'windows_stored', 'sessions_attached', 'control_requests', 'control_errors', 'control_rejected_connections']) {
    assert.ok(Number.isInteger(st.counters[k]), `counters.${k}`);
  }
  assert.ok(st.counters.windows_stored >= 1 && st.counters.sessions_attached === 1, JSON.stringify(st.counters));
  assert.deepStrictEqual(Object.keys(st.counters.anomalies), ['memory_near_limit', 'oom_suspected', 'latency_p999_spike', 'memory_growth', 'version_regression']);

  // /metrics twice, some seconds apart: both clean, the window counters moved, none went back.
  const first = await get({ socketPath: sock, p: '/metrics' });
  assert.strictEqual(first.status, 200);
  assert.match(first.type, /^text\/plain/);
  promtool(first.body, 'the first scrape');
  const m1 = parseMetrics(first.body);
  for (const f of COUNTERS) assert.strictEqual(m1.types[f], 'counter', `${f} is a counter`);
  for (const f of GAUGES) assert.strictEqual(m1.types[f], 'gauge', `${f} is a gauge`);
  for (const f of Object.keys(m1.types)) assert.ok(m1.helps[f], `${f} has HELP`);
  assert.strictEqual(m1.samples['isoprof_build_info{version="0.1.0"}'], 1);
  assert.strictEqual(m1.samples['isoprof_targets{state="ready"}'], 1);
  for (const k of ['memory_near_limit', 'oom_suspected', 'latency_p999_spike', 'memory_growth', 'version_regression']) assert.ok(`isoprof_anomalies_total{kind="${k}"}` in m1.samples, k);
  assert.ok(m1.samples.isoprof_resident_memory_bytes > 1 << 20);
  assert.ok(m1.samples['isoprof_windows_stored_total{type="cpu"}'] >= 1);
  assert.ok(m1.samples['isoprof_windows_stored_total{type="heap"}'] >= 1);
  assert.strictEqual(m1.types.isoprof_pause_seconds, 'histogram');
  for (const call of ['start', 'stop', 'heap']) {
    const n = m1.samples[`isoprof_pause_seconds_count{call="${call}"}`];
    assert.ok(n >= 1 && m1.samples[`isoprof_pause_seconds_bucket{call="${call}",le="+Inf"}`] === n, `${call}: ${n}`);
  }

  await L.sleep(4000);
  let second, m2;
  await L.waitFor(async () => {
    second = await get({ socketPath: sock, p: '/metrics' });
    m2 = parseMetrics(second.body);
    return total(m2, 'isoprof_windows_started_total') > total(m1, 'isoprof_windows_started_total') &&
      total(m2, 'isoprof_windows_stored_total') > total(m1, 'isoprof_windows_stored_total');
  }, 30000, 'windows_started and windows_stored to move');
  promtool(second.body, 'the second scrape');
  for (const [k, v] of Object.entries(m1.samples)) {
    if (m1.types[k.replace(/\{.*$/, '')] === 'counter') assert.ok(m2.samples[k] >= v, `${k}: ${v} -> ${m2.samples[k]}`);
  }
  assert.ok(m2.samples.isoprof_uptime_seconds > m1.samples.isoprof_uptime_seconds);
  assert.ok(m2.samples.isoprof_control_requests_total > m1.samples.isoprof_control_requests_total);

  // The TCP listener: the same page.
  const tcp = await get({ port: mport, p: '/metrics' });
  assert.strictEqual(tcp.status, 200);
  promtool(tcp.body, 'the TCP scrape');
  const m3 = parseMetrics(tcp.body);
  assert.deepStrictEqual(m3.types, m2.types);
  assert.deepStrictEqual(Object.keys(m3.samples).sort(), Object.keys(m2.samples).sort());

  const stop = await L.stopDaemon(d);
  assert.strictEqual(stop.code, 0, d.tail());
});
