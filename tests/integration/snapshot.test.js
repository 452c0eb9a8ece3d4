// Heap snapshots near the limit (anomaly.memory.snapshot, issue 16): a
// real Node leaking through a module-level Map gets one snapshot per
// memory_near_limit episode, stored raw and as a retained profile that
// names the Map; a target killed mid-snapshot leaves nothing half-written;
// the skip rules (snapshot_max_heap, MemAvailable) are counted and said
// once an episode; hostile snapshot streams from scripted targets are
// stored raw, refused by the conversion with their reason, and never grow
// the daemon; an endless one is cut at its limit; `isoprof profile --type
// snapshot` takes one on Node, workerd and Deno.
//
// The cases are independent (a daemon each); each group runs concurrently.
'use strict';
const { describe, test } = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const L = require('./lib');
const F = require('./fake-inspector');

const MIB = 1 << 20;
const is = (msg, worker) => (l) => l.msg === msg && (worker === undefined || l.worker === worker);
const flagged = (kind) => (l) => l.msg === 'anomaly flagged' && l.kind === kind;
const SNAPSHOT_RESULTS = ['stored', 'skipped_max_heap', 'skipped_mem_available', 'skipped_held', 'discarded', 'failed', 'retained_failed'];

// counters.snapshots of GET /status, every result named.
function snapshotCounters(store, expected) {
  const got = L.status(store).counters.snapshots;
  assert.deepStrictEqual(Object.keys(got).sort(), [...SNAPSHOT_RESULTS].sort(), JSON.stringify(got));
  assert.deepStrictEqual(got, { stored: 0, skipped_max_heap: 0, skipped_mem_available: 0, skipped_held: 0, discarded: 0, failed: 0, retained_failed: 0, ...expected });
  return got;
}

// The value of one sample of GET /metrics (`isoprof metrics`).
function metric(store, name) {
  const r = L.cli(['metrics', '--socket', path.join(store, 'control.sock')]);
  assert.strictEqual(r.status, 0, r.stderr);
  const line = r.stdout.split('\n').find((l) => l.startsWith(`${name} `));
  assert.ok(line, `${name} missing from /metrics`);
  return Number(line.slice(name.length + 1));
}

// The exit log's counters line ({key: value}; the stderr pipe may still
// hold it when the exit is seen).
function exitCounters(d) {
  return L.waitFor(() => d.lines.filter(is('counters')).pop(), 5000, 'the counters line at exit');
}

function vmHwmKiB(pid) {
  const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : 0;
}
// ASan keeps shadow memory and a quarantine: its RSS says nothing of ours.
const sanitized = L.sanitized;

// Checks a parsed .heapsnapshot for consistent counts; returns its total
// self size and the total and count of the nodes the root reaches over
// retaining edges (as heapsnap.h counts them: a weak edge never retains, a
// shortcut only from the root).
function snapshotTotals(s) {
  const m = s.snapshot.meta;
  const nf = m.node_fields.length;
  const ef = m.edge_fields.length;
  const n = s.snapshot.node_count;
  assert.strictEqual(s.nodes.length, n * nf, 'nodes.length == node_count x node_fields');
  assert.strictEqual(s.edges.length, s.snapshot.edge_count * ef, 'edges.length == edge_count x edge_fields');
  const iSelf = m.node_fields.indexOf('self_size');
  const iEdges = m.node_fields.indexOf('edge_count');
  const iType = m.edge_fields.indexOf('type');
  const iTo = m.edge_fields.indexOf('to_node');
  const edgeTypes = m.edge_types[0];
  const first = new Uint32Array(n + 1);
  let sum = 0;
  let total = 0;
  for (let i = 0; i < n; i++) {
    first[i] = sum;
    sum += s.nodes[i * nf + iEdges];
    total += s.nodes[i * nf + iSelf];
  }
  first[n] = sum;
  assert.strictEqual(sum, s.snapshot.edge_count, 'the edge_count fields add up to edge_count');
  const seen = new Uint8Array(n);
  const stack = [0];
  seen[0] = 1;
  let reached = 0;
  let reachedSize = 0;
  while (stack.length) {
    const v = stack.pop();
    reached++;
    reachedSize += s.nodes[v * nf + iSelf];
    for (let e = first[v]; e < first[v + 1]; e++) {
      const t = edgeTypes[s.edges[e * ef + iType]];
      if (t === 'weak' || (t === 'shortcut' && v !== 0)) continue;
      const to = s.edges[e * ef + iTo] / nf;
      if (!seen[to]) { seen[to] = 1; stack.push(to); }
    }
  }
  return { nodes: n, total, reached, reachedSize };
}

// The small leak the fake targets' snapshots hold: the root's `registry`
// property, a MetricsRegistry, whose `series` Map holds `count` Series.
function leakGraph(count) {
  const g = [
    { type: 'synthetic', name: '', edges: [{ type: 'property', name: 'registry', to: 1 }] },
    { type: 'object', name: 'MetricsRegistry', self_size: 32, edges: [{ type: 'property', name: 'series', to: 2 }] },
    { type: 'object', name: 'Map', self_size: 64, edges: [] },
  ];
  for (let i = 0; i < count; i++) {
    g[2].edges.push({ type: 'element', index: i, to: g.length });
    g.push({ type: 'object', name: 'Series', self_size: 120, edges: [] });
  }
  return g;
}

// text cut into n pieces at arbitrary places (inside tokens too), as V8's
// chunks are.
function cut(text, n) {
  const out = [];
  const step = Math.ceil(text.length / n);
  for (let i = 0; i < text.length; i += step) out.push(text.slice(i, i + step));
  return out;
}

// The scripted targets live in this process: a case that keeps it busy
// (go tool pprof, a 30 MB JSON.parse) would stall their answers and make
// the daemon drop their sessions. They run together, before the cases on
// real runtimes, which run together after them.
describe('heap snapshots: scripted targets', { concurrency: true }, () => {
  test('skip rules: used heap over snapshot_max_heap, MemAvailable under what V8 needs: counted and said once an episode, no snapshot asked for', { timeout: 90000 }, async (ctx) => {
    const t0 = Date.now();
    const memDir = L.tmpdir();
    const meminfo = path.join(memDir, 'meminfo');
    fs.writeFileSync(meminfo, 'MemTotal:       2048 kB\nMemFree:        1024 kB\nMemAvailable:   1024 kB\n');
    // Each fake would answer a snapshot well, so one taken would be seen.
    const snapshot = { chunks: cut(JSON.stringify(F.heapSnapshot(leakGraph(10))), 2) };
    const cases = [
      { result: 'skipped_max_heap', why: /snapshot_max_heap/, anomaly: '{memory: {snapshot: true, snapshot_max_heap: 1MiB}, cooldown: 1s, latency: {listen: ""}}', env: {} },
      { result: 'skipped_mem_available', why: /MemAvailable/, anomaly: '{memory: {snapshot: true}, cooldown: 1s, latency: {listen: ""}}', env: { ISOPROFD_MEMINFO: meminfo } },
    ];
    await Promise.all(cases.map(async (k) => {
      const fake = await F.startFakeInspector({ heapUsed: 20 * MIB, snapshot });
      const dir = L.tmpdir();
      const store = path.join(dir, 'store');
      const d = await L.startDaemon(L.yamlConfig({
        store, targets: [{ port: fake.port, worker: 'skip', memory_limit: '16MiB' }],
        duration: '500ms', period: '2s', memoryPoll: '200ms', anomaly: k.anomaly,
      }), { dir, env: k.env });
      const polls = () => fake.methods.filter((m) => m === 'Runtime.getHeapUsage').length;
      for (let episode = 1; episode <= 2; episode++) {
        const flag = await L.waitFor(() => d.lines.filter(flagged('memory_near_limit'))[episode - 1], 30000, `${k.result}: episode ${episode}`);
        const skip = await d.waitLog((l) => l.seq > flag.seq && l.msg === 'heap snapshot skipped', 30000, `${k.result}: heap snapshot skipped`);
        assert.strictEqual(skip.worker, 'skip');
        assert.strictEqual(Number(skip.used), 20 * MIB);
        assert.match(skip.why, k.why, skip.raw);
        if (k.result === 'skipped_max_heap') assert.strictEqual(Number(skip.snapshot_max_heap), MIB, skip.raw);
        else assert.strictEqual(Number(skip.mem_available), 1024 * 1024, skip.raw);
        // Ten more polls above the threshold: still the one skip.
        const p0 = polls();
        await L.waitFor(() => polls() >= p0 + 10, 30000, 'ten more memory polls');
        assert.strictEqual(d.count(is('heap snapshot skipped')), episode, `${k.result}: one skip line per episode`);
        snapshotCounters(store, { [k.result]: episode });
        assert.strictEqual(metric(store, `isoprof_snapshots_total{result="${k.result}"}`), episode);
        if (episode === 1) {
          // The episode ends (under the threshold for the cooldown), then a
          // new one begins: skipped and said again.
          fake.heapUsed = 2 * MIB;
          await d.waitLog((l) => l.msg === 'anomaly ended', 30000, 'the episode ended');
          fake.heapUsed = 20 * MIB;
        }
      }
      assert.strictEqual(fake.snapshots, 0, `${k.result}: a snapshot was asked for`);
      assert.strictEqual(d.count(is('heap snapshot started')), 0);
      const stop = await L.stopDaemon(d);
      assert.strictEqual(stop.code, 0, d.tail());
      const c = await exitCounters(d);
      assert.strictEqual(c[`snapshots_${k.result}`], '2', c.raw);
      assert.deepStrictEqual(L.windows(store, ['--type', 'snapshot']), []);
      assert.deepStrictEqual(fake.violations, []);
      await fake.close();
    }));
    ctx.diagnostic(`skip rules: ${Date.now() - t0} ms`);
  });

  test('hostile snapshot streams (not JSON, nodes not a multiple of node_fields, an edge past the nodes, 10M nodes claimed, an error answer): stored raw as sent, the conversion refused with its reason and counted, the daemon keeps working in bounded memory', { timeout: 120000 }, async (ctx) => {
    const t0 = Date.now();
    const goodText = JSON.stringify(F.heapSnapshot(leakGraph(200)));
    const broken = (f) => { const s = JSON.parse(goodText); f(s); return JSON.stringify(s); };
    const targets = [
      // The same graph unbroken: converted, so the fake's format is right
      // and each refusal below is for its own defect.
      { worker: 'ok', text: goodText },
      { worker: 'notjson', text: goodText.replace('"node_count":', '"node_count"='), reason: 'json' },
      // nodes one number longer than node_count x node_fields
      { worker: 'count', text: broken((s) => s.nodes.push(0)), reason: 'count' },
      // the last edge's to_node five nodes past the nodes array
      { worker: 'edge', text: broken((s) => { s.edges[s.edges.length - 1] = (s.snapshot.node_count + 5) * 7; }), reason: 'edge' },
      // 10 million nodes claimed in 7 KB of text: over the parse budget
      // (2 x the text + 16 MiB) at the count, before anything is allocated
      { worker: 'toobig', text: broken((s) => { s.snapshot.node_count = 10000000; }), reason: 'too_big' },
      // a first chunk, then an error answer: nothing stored
      { worker: 'error', chunks: [goodText.slice(0, 1000)], reply: { code: -32000, message: 'Heap snapshot failed: out of memory' } },
    ];
    for (const t of targets) {
      t.fake = await F.startFakeInspector({ heapUsed: 2 * MIB, snapshot: { chunks: t.chunks || cut(t.text, 3), reply: t.reply } });
    }
    const healthy = await F.startFakeInspector({});
    const dir = L.tmpdir();
    const store = path.join(dir, 'store');
    const d = await L.startDaemon(L.yamlConfig({
      store, targets: [...targets.map((t) => ({ port: t.fake.port, worker: t.worker, memory_limit: '8MiB' })), { port: healthy.port, worker: 'healthy' }],
      duration: '500ms', period: '1s', memoryPoll: '200ms', level: 'info', maxConcurrent: 8,
      anomaly: '{memory: {heap_period: 10s, snapshot: true}, latency: {listen: ""}}',
    }), { dir });
    await L.waitFor(() => d.count(is('target attached')) >= targets.length + 1, 30000, 'every target attached');
    await d.waitLog(is('window stored', 'healthy'), 30000, 'a window of the healthy target');
    const hwm0 = vmHwmKiB(d.pid);
    // Past 90 % of the 8 MiB memory_limit: each takes its snapshot, one at a time.
    for (const t of targets) t.fake.heapUsed = 8 * MIB;

    const ends = [];
    for (const t of targets.filter((x) => x.text)) {
      t.stored = await d.waitLog(is('heap snapshot stored', t.worker), 60000, `${t.worker}: heap snapshot stored`);
      assert.strictEqual(Number(t.stored.bytes), Buffer.byteLength(t.text), t.stored.raw);
      if (t.reason) {
        const f = await d.waitLog((l) => l.msg === 'conversion failed' && l.type === 'retained' && l.worker === t.worker, 60000, `${t.worker}: conversion failed`);
        assert.ok(f.why.startsWith(`snapshot refused (${t.reason}): `), `${t.worker}: ${f.raw}`);
        ends.push(f.seq);
      } else {
        ends.push((await d.waitLog((l) => l.msg === 'window stored' && l.type === 'retained' && l.worker === t.worker, 60000, `${t.worker}: retained window`)).seq);
      }
    }
    const failed = await d.waitLog(is('heap snapshot failed', 'error'), 60000, 'error: heap snapshot failed');
    assert.match(failed.why, /Heap snapshot failed: out of memory/, failed.raw);
    ends.push(failed.seq);
    const last = Math.max(...ends);
    await d.waitLog((l) => l.seq > last && is('window stored', 'healthy')(l), 30000, 'a later window of the healthy target');
    assert.ok(d.alive());
    const hwm = vmHwmKiB(d.pid);
    // Texts of 7 KB, a parse budget of 16 MiB each: the daemon's peak RSS
    // grows by less than 32 MiB.
    if (!sanitized(d.pid)) assert.ok(hwm - hwm0 < 32 * 1024, `VmHWM grew from ${hwm0} to ${hwm} KiB`);
    snapshotCounters(store, { stored: 5, retained_failed: 4, failed: 1 });
    assert.strictEqual(metric(store, 'isoprof_snapshots_total{result="retained_failed"}'), 4);
    assert.strictEqual(metric(store, 'isoprof_snapshots_total{result="failed"}'), 1);
    assert.strictEqual(metric(store, 'isoprof_windows_stored_total{type="snapshot"}'), 5);
    assert.strictEqual(metric(store, 'isoprof_windows_stored_total{type="retained"}'), 1);
    for (const t of targets) {
      assert.strictEqual(t.fake.snapshots, 1, `${t.worker}: ${t.fake.snapshots} snapshots asked for`);
      assert.strictEqual(d.count(is('heap snapshot started', t.worker)), 1, `${t.worker}: snapshots started`);
      assert.deepStrictEqual(t.fake.violations, [], t.worker);
    }
    const stop = await L.stopDaemon(d);
    assert.strictEqual(stop.code, 0, d.tail());
    const c = await exitCounters(d);
    assert.deepStrictEqual([c.snapshots_stored, c.snapshots_retained_failed, c.snapshots_failed, c.snapshots_discarded], ['5', '4', '1', '0'], c.raw);

    // Each raw snapshot stored exactly as sent, pinned to its episode;
    // only the good one has a retained window, which names the registry.
    const snaps = L.windows(store, ['--type', 'snapshot']);
    assert.deepStrictEqual(snaps.map((w) => w.worker).sort(), targets.filter((t) => t.text).map((t) => t.worker).sort());
    for (const t of targets.filter((x) => x.text)) {
      const w = snaps.find((x) => x.worker === t.worker);
      assert.strictEqual(w.id, t.stored.id);
      assert.ok(w.pinned.includes('memory_near_limit'), JSON.stringify(w));
      const file = L.exportTo(store, ['--id', w.id], path.join(dir, `${t.worker}.heapsnapshot`));
      assert.strictEqual(fs.readFileSync(file, 'utf8'), t.text, `${t.worker}: the exported snapshot is what was sent`);
    }
    const ret = L.windows(store, ['--type', 'retained']);
    assert.deepStrictEqual(ret.map((w) => w.worker), ['ok']);
    const rows = L.pprofTop(L.exportTo(store, ['--id', ret[0].id], path.join(dir, 'ok.pb.gz')), ['-cum', '-sample_index=retained_space']);
    const reg = rows.find((r) => r.name === 'MetricsRegistry registry');
    assert.ok(reg && reg.cumPct === 100, JSON.stringify(rows));
    assert.ok(rows.some((r) => r.name === 'Map series'), JSON.stringify(rows));
    L.storeCheck(store);
    ctx.diagnostic(`hostile streams: VmHWM ${hwm0} -> ${hwm} KiB; ${Date.now() - t0} ms`);
  });

  test('an endless snapshot stream (chunks forever, no answer): cut past 4 x used heap + 64 MiB, session dropped, discarded, reattached and not snapshotted again; the daemon keeps working in bounded memory', { timeout: 120000 }, async (ctx) => {
    const t0 = Date.now();
    // A snapshot's start, then 100 KB chunks for as long as the daemon reads.
    const filler = '0,'.repeat(50000);
    const head = JSON.stringify(F.heapSnapshot(leakGraph(1))).replace(/"nodes":\[.*$/, '"nodes":[');
    const fake = await F.startFakeInspector({ heapUsed: 2 * MIB, snapshot: { chunks: (i) => (i === 0 ? head : filler), reply: 'never' } });
    const healthy = await F.startFakeInspector({});
    const dir = L.tmpdir();
    const store = path.join(dir, 'store');
    const d = await L.startDaemon(L.yamlConfig({
      store, targets: [{ port: fake.port, worker: 'endless', memory_limit: '40MiB' }, { port: healthy.port, worker: 'healthy' }],
      duration: '500ms', period: '1s', memoryPoll: '200ms', level: 'info',
      anomaly: '{memory: {heap_period: 10s, snapshot: true}, latency: {listen: ""}}',
    }), { dir });
    try {
      await L.waitFor(() => d.count(is('target attached')) >= 2, 30000, 'both targets attached');
      await d.waitLog(is('window stored', 'healthy'), 30000, 'a window of the healthy target');
      const hwm0 = vmHwmKiB(d.pid);
      fake.heapUsed = 40 * MIB;
      const started = await d.waitLog(is('heap snapshot started', 'endless'), 30000, 'heap snapshot started');
      const past = await d.waitLog(is('heap snapshot past its limit, session dropped', 'endless'), 90000, 'past its limit');
      assert.strictEqual(Number(past.limit), 4 * 40 * MIB + 64 * MIB, past.raw);
      assert.ok(Number(past.bytes) > Number(past.limit), past.raw);
      const disc = await d.waitLog((l) => l.seq > past.seq && is('heap snapshot discarded', 'endless')(l), 30000, 'discarded');
      assert.match(disc.why, /past its limit/, disc.raw);
      try {
        snapshotCounters(store, { discarded: 1 });
      } catch (e) {
        // Once, beside a CPU hog under ASan, this read 2: the daemon's own
        // account of every snapshot so far says which one.
        const ours = d.lines.filter((l) => /snapshot|session dropped|target (attached|stalled)/.test(l.msg));
        e.message += `\n--- the daemon's snapshot lines ---\n${ours.map((l) => l.raw).join('\n')}`;
        throw e;
      }
      assert.strictEqual(metric(store, 'isoprof_snapshots_total{result="discarded"}'), 1);
      const back = await d.waitLog((l) => l.seq > past.seq && is('target attached', 'endless')(l), 60000, 'reattached');
      const polls = () => fake.methods.filter((m) => m === 'Runtime.getHeapUsage').length;
      const p0 = polls();
      await d.waitLog((l) => l.seq > back.seq && is('window stored', 'healthy')(l), 30000, 'a later window of the healthy target');
      assert.ok(d.alive());
      const hwm = vmHwmKiB(d.pid);
      // The stream sent over 200 MB; the daemon holds a few MiB of a
      // snapshot's text (its 1 MiB piece, and up to 2 MiB waiting for the
      // store before it stops reading the target's socket), so its peak
      // RSS grows by far less than 64 MiB.
      const sent = fake.snapshotBytes;
      assert.ok(sent > 200e6, `the endless stream sent ${sent} bytes`);
      if (!sanitized(d.pid)) assert.ok(hwm - hwm0 < 64 * 1024, `VmHWM grew from ${hwm0} to ${hwm} KiB`);
      assert.deepStrictEqual(d.lines.filter(is('window stored', 'endless')).filter((l) => l.type === 'snapshot' || l.type === 'retained'), []);
      assert.strictEqual(d.count(is('heap snapshot stored')), 0);
      // The reattached session, with its heap still near the limit, is not
      // given the same endless snapshot again: ten memory polls of it, the
      // first 2 s after its return, and still the one snapshot (when the
      // daemon loops, a new one starts within a second of the reattach).
      // Its new episode's snapshot is skipped: the endpoint is held for an
      // hour.
      await L.waitFor(() => polls() >= p0 + 10 || fake.snapshots > 1, 30000, 'ten memory polls of the reattached session');
      const again = d.lines.filter((l) => l.seq > back.seq && (is('heap snapshot started', 'endless')(l) || flagged('memory_near_limit')(l)));
      assert.ok(fake.snapshots === 1 && d.count(is('heap snapshot started')) === 1,
        `the endless target was snapshotted again after its reattach (${fake.snapshots} takeHeapSnapshot calls, ${fake.snapshotBytes} bytes): ` +
        `the reattached session is a new isolate with a new memory_near_limit episode, so the stream that was cut is asked for again, and again at each reattach:\n${again.map((l) => l.raw).join('\n')}`);
      const held = await d.waitLog((l) => l.seq > back.seq && is('heap snapshot skipped', 'endless')(l), 30000, 'the new episode\'s snapshot skipped');
      assert.match(held.why, /past its limit or never answered/, held.raw);
      snapshotCounters(store, { discarded: 1, skipped_held: 1 });
      const stop = await L.stopDaemon(d);
      assert.strictEqual(stop.code, 0, d.tail());
      assert.deepStrictEqual(L.windows(store, ['--type', 'snapshot']), []);
      assert.deepStrictEqual(fake.violations, []);
      L.storeCheck(store);
      ctx.diagnostic(`endless stream: started at ${started.used} bytes used, ${sent} bytes sent before the cut, VmHWM ${hwm0} -> ${hwm} KiB; ${Date.now() - t0} ms`);
    } finally {
      // When the daemon asks for the stream again at each reattach, it would
      // load the machine until the file ends: it stops with its test.
      await L.stop(d, 'SIGINT');
    }
  });
});

describe('heap snapshots: real runtimes', { concurrency: true }, () => {
  test('real leak: one snapshot per episode, pinned with its retained window (and by the oom_suspected of its death); the registry Map holds >= 50 % cum; the raw snapshot parses and its reachable total is the profile total', { timeout: 270000 }, async (ctx) => {
    const t0 = Date.now();
    // node-leak.js starts near 5 MiB of used heap and grows by several MiB a
    // second: 90 % of a 24 MiB memory_limit is passed within seconds, far
    // from the 1 GiB V8 allows it (it does not die during the test, even
    // one that waits minutes beside a CPU hog).
    const node = await L.startNode(path.join(L.WORKLOADS, 'node-leak.js'),
      { args: ['--max-old-space-size=1024'], env: { LEAK_PER_TICK: '100' } });
    const dir = L.tmpdir();
    const store = path.join(dir, 'store');
    const d = await L.startDaemon(L.yamlConfig({
      store, targets: [{ port: node.port, worker: 'checkout', version: 'v7', memory_limit: '24MiB' }],
      duration: '500ms', period: '5s', interval: '10ms', heap: '{period: 30s}', memoryPoll: '200ms',
      anomaly: '{memory: {heap_period: 1s, snapshot: true}, latency: {listen: ""}}',
    }), { dir });
    const near = await d.waitLog(flagged('memory_near_limit'), 60000, 'memory_near_limit');
    const started = await d.waitLog(is('heap snapshot started'), 60000, 'heap snapshot started');
    assert.strictEqual(started.worker, 'checkout');
    assert.strictEqual(started.version, 'v7');
    assert.strictEqual(started.thread, 'main');
    assert.strictEqual(started.isolate, near.isolate);
    assert.strictEqual(Number(started.limit), 24 * MIB);
    assert.ok(Number(started.used) >= Number(near.threshold), started.raw);
    assert.ok(Number(started.anomaly) > 0, started.raw);
    const stored = await d.waitLog(is('heap snapshot stored'), 90000, 'heap snapshot stored');
    assert.strictEqual(stored.anomaly, started.anomaly);
    assert.ok(Number(stored.bytes) > 4 * MIB, stored.raw);
    const retained = await d.waitLog((l) => l.msg === 'window stored' && l.type === 'retained', 60000, 'the retained window');
    assert.strictEqual(retained.anomaly, 'memory_near_limit');
    // Memory stays above the threshold (the leak goes on): the episode goes
    // on, with more pinned heap windows, and still the one snapshot. The
    // episode's heap windows back off (1 s, 2 s, 4 s ... up to the 30 s heap
    // period) and wait while they stalled the isolate for more than
    // max_share of the episode: by the time the snapshot and its retained
    // window are stored the step may be 16 s, and beside a CPU hog each
    // window of this growing heap stalls it for longer, so two more windows
    // may take a minute and more.
    const pinnedHeap = (l) => l.seq > retained.seq && l.msg === 'window stored' && l.type === 'heap' && l.anomaly === 'memory_near_limit';
    await L.waitFor(() => d.count(pinnedHeap) >= 2, 120000, 'two more pinned heap windows');
    assert.strictEqual(d.count(is('anomaly ended')), 0, 'the episode ended');
    assert.strictEqual(d.count(flagged('memory_near_limit')), 1);
    assert.strictEqual(d.count(is('heap snapshot started')), 1, 'one snapshot per episode');
    snapshotCounters(store, { stored: 1 });
    assert.strictEqual(metric(store, 'isoprof_snapshots_total{result="stored"}'), 1);
    assert.strictEqual(metric(store, 'isoprof_snapshots_total{result="retained_failed"}'), 0);
    assert.strictEqual(metric(store, 'isoprof_windows_stored_total{type="snapshot"}'), 1);
    assert.strictEqual(metric(store, 'isoprof_windows_stored_total{type="retained"}'), 1);
    // The isolate dies near its limit: the oom_suspected record pins its
    // latest retained and snapshot windows too.
    await L.stop(node, 'SIGKILL');
    await d.waitLog((l) => l.msg === 'anomaly recorded' && l.kind === 'oom_suspected', 30000, 'oom_suspected recorded');
    const stop = await L.stopDaemon(d);
    assert.strictEqual(stop.code, 0, d.tail());
    const c = await exitCounters(d);
    assert.strictEqual(c.snapshots_stored, '1', c.raw);
    assert.strictEqual(c.snapshots_discarded, '0', c.raw);
    assert.strictEqual(c.snapshots_retained_failed, '0', c.raw);
    assert.strictEqual(c.windows_stored_snapshot, '1', c.raw);
    assert.strictEqual(c.windows_stored_retained, '1', c.raw);

    const [oom] = L.anomalies(store, ['--kind', 'oom_suspected']);
    assert.ok(oom.windows.includes(stored.id) && oom.windows.includes(retained.id), JSON.stringify(oom));
    // Both windows pinned to the episode.
    const [a] = L.anomalies(store, ['--kind', 'memory_near_limit']);
    assert.strictEqual(String(a.id), stored.anomaly);
    const pinned = L.windows(store, ['--anomaly', String(a.id)]);
    const snap = pinned.filter((w) => w.type === 'snapshot');
    const ret = pinned.filter((w) => w.type === 'retained');
    assert.deepStrictEqual(snap.map((w) => w.id), [stored.id], JSON.stringify(pinned));
    assert.deepStrictEqual(ret.map((w) => w.id), [retained.id], JSON.stringify(pinned));
    for (const w of [snap[0], ret[0]]) {
      assert.strictEqual(w.anomaly, 'memory_near_limit');
      assert.ok(w.pinned.includes('memory_near_limit'), JSON.stringify(w));
      assert.ok(a.windows.includes(w.id), JSON.stringify(a));
      assert.strictEqual(w.worker, 'checkout');
    }
    assert.strictEqual(snap[0].raw_bytes, Number(stored.bytes));
    assert.strictEqual(L.windows(store, ['--type', 'snapshot']).length, 1);

    // What holds the memory: the registry's Map.
    const pb = L.exportTo(store, ['--id', retained.id], path.join(dir, 'retained.pb.gz'));
    const rows = L.pprofTop(pb, ['-cum', '-sample_index=retained_space']);
    const map = rows.find((r) => r.name === 'Map series' || r.name === 'MetricsRegistry registry');
    assert.ok(map && map.cumPct >= 50, `the registry's Map at ${map && map.cumPct} % cum: ${JSON.stringify(rows.slice(0, 10))}`);

    // The raw snapshot, exported as it was taken (both ways give the same bytes).
    const file = L.exportTo(store, ['--id', stored.id], path.join(dir, 'x.heapsnapshot'));
    const byAnomaly = L.exportTo(store, ['--anomaly', String(a.id), '--type', 'snapshot'], path.join(dir, 'a.heapsnapshot'));
    const text = fs.readFileSync(file);
    assert.strictEqual(text.length, Number(stored.bytes));
    assert.ok(fs.readFileSync(byAnomaly).equals(text), 'export --anomaly ID --type snapshot gives the same bytes as --id');
    const tot = snapshotTotals(JSON.parse(text.toString('utf8')));
    // "The same total": the retained profile counts the nodes the root
    // reaches over retaining edges, each once, with its self size; the
    // nodes it does not reach are left out. So its retained_objects and
    // retained_space sums are exactly the reachable nodes' count and self
    // size computed here from the raw snapshot, and the snapshot's whole
    // self size is that plus the unreachable nodes'.
    const raw = L.pprofRaw(pb);
    assert.deepStrictEqual(raw.sampleTypes.slice(0, 2), ['retained_objects/count', 'retained_space/bytes']);
    const objects = raw.samples.reduce((s, x) => s + x.values[0], 0);
    const space = raw.samples.reduce((s, x) => s + x.values[1], 0);
    assert.strictEqual(objects, tot.reached, 'retained_objects total == reachable nodes');
    assert.strictEqual(space, tot.reachedSize, 'retained_space total == reachable self size');
    assert.ok(tot.total >= space && tot.nodes >= objects);
    assert.ok(tot.total - space <= 0.05 * tot.total, `unreachable self size ${tot.total - space} of ${tot.total}`);
    L.storeCheck(store);
    ctx.diagnostic(`real leak: snapshot of ${stored.bytes} bytes (${tot.nodes} nodes), pause ${stored.pause_ms} ms, registry at ${map.cumPct} % cum; ${Date.now() - t0} ms`);
  });

  test('target SIGKILLed mid-snapshot: discarded and counted, no snapshot window, store clean, the episode keeps its heap and CPU windows, oom_suspected recorded', { timeout: 120000 }, async (ctx) => {
    const t0 = Date.now();
    // About 65 MiB of used heap in 1.2 million snapshot nodes: V8 takes
    // seconds to build its snapshot and seconds more to write it (9 s in
    // all, measured on an idle machine).
    const node = await L.startNode(path.join(L.WORKLOADS, 'node-big-heap.js'));
    await L.waitFor(() => /heap built/.test(node.stderrText), 60000, 'the heap built');
    const dir = L.tmpdir();
    const store = path.join(dir, 'store');
    const d = await L.startDaemon(L.yamlConfig({
      store, targets: [{ port: node.port, worker: 'catalogue', version: 'v3', memory_limit: '32MiB' }],
      duration: '500ms', period: '5s', interval: '10ms', heap: '{period: 30s}', memoryPoll: '200ms',
      anomaly: '{memory: {heap_period: 1s, snapshot: true}, latency: {listen: ""}}',
    }), { dir });
    await d.waitLog(flagged('memory_near_limit'), 60000, 'memory_near_limit');
    const started = await d.waitLog(is('heap snapshot started'), 60000, 'heap snapshot started');
    // Killed once its text has begun to come (a stream begun in the store),
    // seconds before its end.
    const chunk = (l) => l.seq > started.seq && l.msg === 'cdp event' && l.method === 'HeapProfiler.addHeapSnapshotChunk';
    await d.waitLog(chunk, 60000, 'the first snapshot chunk');
    const pid = node.pid;
    await L.stop(node, 'SIGKILL');
    const disc = await d.waitLog(is('heap snapshot discarded'), 30000, 'heap snapshot discarded');
    assert.strictEqual(disc.worker, 'catalogue');
    assert.strictEqual(disc.isolate, started.isolate);
    assert.match(disc.why, /session ended|went away/, disc.raw);
    assert.ok(Number(disc.bytes) > 0, disc.raw);
    assert.strictEqual(d.count(is('heap snapshot stored')), 0, `the snapshot of the killed node ${pid} was stored`);
    await d.waitLog((l) => l.msg === 'anomaly recorded' && l.kind === 'oom_suspected', 30000, 'oom_suspected recorded');
    snapshotCounters(store, { discarded: 1 });
    assert.strictEqual(metric(store, 'isoprof_snapshots_total{result="discarded"}'), 1);
    assert.strictEqual(metric(store, 'isoprof_windows_stored_total{type="snapshot"}'), 0);
    assert.ok(d.alive());
    const stop = await L.stopDaemon(d);
    assert.strictEqual(stop.code, 0, d.tail());
    const c = await exitCounters(d);
    assert.strictEqual(c.snapshots_discarded, '1', c.raw);
    assert.strictEqual(c.snapshots_stored, '0', c.raw);
    assert.deepStrictEqual(L.windows(store, ['--type', 'snapshot']), []);
    assert.deepStrictEqual(L.windows(store, ['--type', 'retained']), []);
    L.storeCheck(store);
    const all = L.anomalies(store);
    assert.deepStrictEqual(all.map((x) => x.kind), ['memory_near_limit', 'oom_suspected'], JSON.stringify(all));
    for (const x of all) {
      const types = L.windows(store, ['--anomaly', String(x.id)]).map((w) => w.type);
      assert.ok(types.includes('heap') && types.includes('cpu'), `${x.kind} keeps ${JSON.stringify(types)}`);
      assert.ok(!types.includes('snapshot') && !types.includes('retained'), `${x.kind} keeps ${JSON.stringify(types)}`);
    }
    ctx.diagnostic(`killed mid-snapshot: discarded after ${disc.bytes} bytes; ${Date.now() - t0} ms`);
  });

  test('on demand (isoprof profile --type snapshot) on Node, workerd and Deno (whose V8 writes 1 MiB chunks, too big to parse on the loop): the answer is the retained profile, the raw snapshot is stored flagged on_demand; usage errors refused', { timeout: 150000 }, async (ctx) => {
    const t0 = Date.now();
    const node = await L.startNode(path.join(L.WORKLOADS, 'node-leak.js'), { args: ['--max-old-space-size=512'], env: { LEAK_PER_TICK: '20' } });
    const services = [{ name: 'edge', port: await L.freePort() }];
    const wd = await L.startWorkerd(path.join(L.WORKLOADS, 'worker-hot.js'), services);
    const deno = await L.startDeno(path.join(L.WORKLOADS, 'deno-hot.js'));
    const dir = L.tmpdir();
    const store = path.join(dir, 'store');
    const d = await L.startDaemon(L.yamlConfig({
      store, targets: [{ port: node.port, worker: 'leaky' }, { port: wd.port, version: 'w1' }, { port: deno.port, worker: 'dino' }],
      memoryPoll: '200ms',
    }), { dir });
    try {
      await L.waitFor(() => ['leaky', 'edge', 'dino'].every((w) => d.count((l) => l.msg === 'target attached' && l.worker === w) >= 1),
        60000, 'the three targets attached');
      // A snapshot waits for the memory poll that finds nothing of its
      // isolate in flight: give each a poll first.
      await L.waitFor(() => ['leaky', 'edge', 'dino'].every((w) => d.count((l) => l.msg === 'memory' && l.worker === w) >= 1),
        30000, 'a memory poll of each');
      const expect = { leaky: 'node', edge: 'workerd', dino: 'deno' };
      for (const w of ['leaky', 'edge', 'dino']) {
        const out = path.join(dir, `${w}.pb.gz`);
        const r = await L.cliAsync(['profile', '--store', store, '--worker', w, '--type', 'snapshot', '-o', out], { timeout: 120000 });
        assert.strictEqual(r.status, 0, `${w}: ${r.stderr}\n${d.tail()}`);
        assert.match(r.stderr, /retained profile; the raw snapshot is stored/);
        const rows = L.pprofTop(out, ['-cum', '-sample_index=retained_space']);
        assert.ok(rows.length > 0, `${w}: an empty retained profile`);
        if (w === 'leaky') {
          const reg = rows.find((x) => /MetricsRegistry registry|Map series/.test(x.name));
          assert.ok(reg, `leaky: the registry is not in the retained profile: ${JSON.stringify(rows.slice(0, 8))}`);
        }
        const snaps = L.windows(store, ['--type', 'snapshot', '--worker', w]);
        assert.strictEqual(snaps.length, 1, `${w}: ${JSON.stringify(snaps)}`);
        assert.strictEqual(snaps[0].on_demand, true, JSON.stringify(snaps[0]));
        assert.strictEqual(snaps[0].runtime, expect[w], JSON.stringify(snaps[0]));
        const ret = L.windows(store, ['--type', 'retained', '--worker', w]);
        assert.strictEqual(ret.length, 1, `${w}: ${JSON.stringify(ret)}`);
        assert.strictEqual(ret[0].on_demand, true, JSON.stringify(ret[0]));
        // The raw snapshot reads back whole: JSON with consistent counts.
        const file = path.join(dir, `${w}.heapsnapshot`);
        const x = L.cli(['export', '--store', store, '--id', snaps[0].id, '-o', file]);
        assert.strictEqual(x.status, 0, x.stderr);
        snapshotTotals(JSON.parse(fs.readFileSync(file, 'utf8')));
      }
      // Deno's chunks came as events over the loop's parse limit, each
      // unescaped off the loop: none was dropped.
      const dino = await d.waitLog(is('heap snapshot stored', 'dino'), 10000, 'the log line of dino\'s snapshot');
      assert.ok(Number(dino.bytes) > 1 * MIB, dino.raw);
      // Usage errors, before any request is sent.
      const bad = [
        [['--type', 'snapshot', '--seconds', '3'], /--seconds and --interval are for --type cpu/],
        [['--type', 'snapshot', '--all'], /a heap snapshot is of one isolate/],
      ];
      for (const [args, re] of bad) {
        const r = L.cli(['profile', '--store', store, '--worker', 'leaky', ...args, '-o', path.join(dir, 'x')]);
        assert.strictEqual(r.status, 2, r.stderr);
        assert.match(r.stderr, re);
      }
      snapshotCounters(store, { stored: 3 });
      const stop = await L.stopDaemon(d);
      assert.strictEqual(stop.code, 0, d.tail());
      L.storeCheck(store);
      ctx.diagnostic(`on demand on three runtimes: ${Date.now() - t0} ms`);
    } finally {
      await L.stop(d, 'SIGINT');
    }
  });
});
