// Hostile inspector endpoints, each against a daemon of its own, all at
// once: whoever can answer on a configured port (any local user can bind it
// while the runtime restarts) may send anything. Each case failed on the
// build before the hardening: the daemon crashed (nested JSON), wrote a
// quadratic pprof (a deep call chain), grew past its memory budget (huge
// messages and profiles), starved healthy targets (a target that never
// answers Profiler.stop) or drowned in sessions and log lines (a /json/list
// of 10,000 targets). Now each costs a clear error or a cut, and the
// daemon and its healthy targets carry on.
'use strict';
const { describe, test, after } = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const L = require('./lib');
const F = require('./fake-inspector');

after(async () => { await F.closeAll(); await L.cleanup(); });

// The budget the caps add up to (agent/daemon/budget.h, AGENT_MEMORY_BUDGET).
const BUDGET_MIB = 192;

const is = (msg, worker) => (l) => l.msg === msg && (worker === undefined || l.worker === worker);
const stored = (d, worker) => d.count(is('window stored', worker));

function status(pid, key) {
  const m = new RegExp(`${key}:\\s+(\\d+)`).exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : 0;
}
// ASan keeps shadow memory and a quarantine: its RSS says nothing of ours.
const sanitized = L.sanitized;

async function daemon(targets, opts = {}) {
  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  const d = await L.startDaemon(L.yamlConfig({ store, targets, duration: '1s', period: '2s', jitter: '10%', ...opts }), { dir });
  d.store = store;
  return d;
}

async function finish(d) {
  assert.ok(d.alive(), `the daemon died:\n${d.tail()}`);
  const r = await L.stopDaemon(d);
  assert.strictEqual(r.code, 0, `exit ${r.code} ${r.signal}\n${d.tail()}`);
  L.storeCheck(d.store);
}

// A CPU profile whose nodes form one call chain n deep, one hit each.
function chainProfile(n) {
  const nodes = [];
  for (let i = 1; i <= n; i++) {
    nodes.push({ id: i, callFrame: { functionName: `f${i}`, scriptId: '1', url: 'file:///srv/deep.js', lineNumber: i, columnNumber: 0 },
      hitCount: i === 1 ? 0 : 1, children: i < n ? [i + 1] : [] });
  }
  const now = Math.floor(Number(process.hrtime.bigint() / 1000n));
  return { nodes, startTime: now - 1000000, endTime: now, samples: [], timeDeltas: [] };
}

describe('hostile inspector endpoints', { concurrency: true }, () => {
  test('deeply nested JSON in /json/list, /json/version and CDP messages is refused, not a crash', async () => {
    const deep = '['.repeat(600 * 1000);
    const list = await F.startFakeInspector({ listBody: deep });
    const version = await F.startFakeInspector({ versionBody: `{"Browser":${deep}` });
    // A healthy session that also sends deep messages: unsolicited, and as
    // its Profiler.stop reply every other time.
    let stops = 0;
    const healthy = await F.startFakeInspector({
      onOpen: (sock) => {
        sock.write(F.frame(1, `{"method":"Runtime.consoleAPICalled","params":${'['.repeat(200 * 1000)}`));
        sock.write(F.frame(1, `{"id":99999,"result":${'{"a":'.repeat(50 * 1000)}`));
      },
      stopText: (id) => (stops++ % 2 === 0
        ? `{"id":${id},"result":{"profile":${'['.repeat(300 * 1000)}`
        : JSON.stringify({ id, result: { profile: F.defaultProfile() } })),
    });
    const d = await daemon([{ port: list.port, worker: 'nested-list' }, { port: version.port, worker: 'nested-version' },
      { port: healthy.port, worker: 'healthy' }]);
    const nested = (l) => /endpoint (still )?unreachable/.test(l.msg) && /nested deeper/.test(l.why || '');
    await L.waitFor(() => d.lines.filter(nested).filter((l) => l.inspector === list.inspector).length >= 3 &&
      d.lines.filter(nested).filter((l) => l.inspector === version.inspector).length >= 3, 60000, 'three refusals of each nested body');
    await d.waitLog(is('conversion failed', 'healthy'), 60000, 'the nested profile refused');
    const before = stored(d, 'healthy');
    await L.waitFor(() => stored(d, 'healthy') >= before + 2, 60000, 'the healthy target profiled on');
    await finish(d);
  });

  test('a call chain 22,000 deep is cut at 512 frames, not written 22,000 times', async () => {
    const fake = await F.startFakeInspector({ profile: chainProfile(22000) });
    const d = await daemon([{ port: fake.port, worker: 'deep' }], { period: '60s', duration: '1s', jitter: '1%' });
    const rec = await d.waitLog(is('window stored', 'deep'), 60000, 'the deep window stored');
    assert.strictEqual(Number(rec.truncated_frames) > 21000, true, `truncated_frames=${rec.truncated_frames}`);
    await finish(d);
    const file = path.join(path.dirname(d.store), 'deep.pb.gz');
    L.exportTo(d.store, ['--id', rec.id], file);
    // The quadratic form was 242 MB for a 1.9 MB profile.
    const raw = require('node:zlib').gunzipSync(fs.readFileSync(file));
    assert.ok(raw.length < 4 << 20, `pprof of ${raw.length} bytes`);
    const top = L.pprofTop(file, ['-sample_index=samples']);
    const cut = top.find((r) => r.name === '(truncated)');
    assert.ok(cut && Number(cut.flat) >= 21000, `the folded frames carry their hits: ${JSON.stringify(top.slice(0, 5))}`);
    const comments = L.goPprof(['-comments', file]);
    assert.match(comments, /stacks deeper than 512 frames were cut/);
    const t = L.cli(['top', '--store', d.store, '-n', '5']);
    assert.strictEqual(t.status, 0, t.stderr);
  });

  test('messages and profiles past the caps drop a session or a window, within the memory budget', async () => {
    const MiB = 1 << 20;
    // One reply over AGENT_MSG_MAX (48 MiB).
    const huge = await F.startFakeInspector({ stopText: (id) => Buffer.concat([Buffer.from(`{"id":${id},"result":{"profile":{"nodes":[`), Buffer.alloc(60 * MiB, 0x20), Buffer.from(']}}}')]) });
    // Three sessions each holding a 30 MiB partial message: together over
    // the 64 MiB message budget, so one is read and dropped as it comes;
    // none ever ends, and what follows it waits behind it, so each session
    // goes (a window's call that times out, or the message's deadline).
    const partial = [];
    for (let i = 0; i < 3; i++) {
      // Once attached (before, the stalled frame would hold back the
      // replies to the attach calls, which time out first).
      partial.push(await F.startFakeInspector({ onOpen: (sock) => setTimeout(() => {
        if (!sock.destroyed) sock.write(Buffer.concat([F.frameHeader(1, 40 * MiB), Buffer.from('{"method":"x","params":{"a":"'), Buffer.alloc(30 * MiB, 0x61)]));
      }, 2000) }));
    }
    // A profile over the node cap (262,144), and one with 1.5 million
    // samples before its nodes.
    const big = chainProfile(300000);
    big.nodes.forEach((n) => { n.children = []; });
    big.nodes[0].children = big.nodes.slice(1).map((n) => n.id);
    const nodesText = JSON.stringify(big);
    const manyNodes = await F.startFakeInspector({ stopText: (id) => `{"id":${id},"result":{"profile":${nodesText}}}` });
    const early = `{"samples":[${'1,'.repeat(1500000)}1],"timeDeltas":[${'1,'.repeat(1500000)}1],"nodes":[]}`;
    const earlySamples = await F.startFakeInspector({ stopText: (id) => `{"id":${id},"result":{"profile":${early}}}` });
    const d = await daemon([{ port: huge.port, worker: 'huge' }, ...partial.map((f, i) => ({ port: f.port, worker: `partial${i}` })),
      { port: manyNodes.port, worker: 'nodes' }, { port: earlySamples.port, worker: 'early' }], { maxConcurrent: 8 });
    const dropped = (w, re) => (l) => l.msg === 'session dropped' && l.worker === w && re.test(l.why || '');
    await d.waitLog(dropped('huge', /over the cap/), 90000, 'the 60 MiB reply refused');
    await L.waitFor(() => [0, 1, 2].every((i) => d.count(dropped(`partial${i}`, /./)) > 0), 120000, 'the stalled sessions dropped');
    await d.waitLog((l) => l.msg === 'conversion failed' && l.worker === 'nodes' && /more than 262144 nodes/.test(l.why), 90000, 'the node cap');
    await d.waitLog((l) => l.msg === 'conversion failed' && l.worker === 'early' && /samples before the nodes/.test(l.why), 90000, 'the kept-samples cap');
    const hwm = status(d.pid, 'VmHWM');
    if (!sanitized(d.pid)) assert.ok(hwm < BUDGET_MIB * 1024, `peak RSS ${hwm} KiB over the ${BUDGET_MIB} MiB budget`);
    await finish(d);
  });

  test('targets that never answer Profiler.stop lose their own turn, not the healthy target\'s', async () => {
    const stallers = [];
    for (let i = 0; i < 20; i++) stallers.push(await F.startFakeInspector({ mode: 'stall-stop' }));
    const healthy = await F.startFakeInspector({});
    const d = await daemon([...stallers.map((f, i) => ({ port: f.port, worker: `stall${i}` })), { port: healthy.port, worker: 'healthy' }],
      { maxConcurrent: 4 });
    // On the build before, 20 stallers held the 4 slots 31 s at a time and
    // the healthy target stored 0 windows in 60 s.
    await L.waitFor(() => stored(d, 'healthy') >= 8, 120000, 'eight healthy windows');
    assert.ok(d.count((l) => l.msg === 'target stalled') >= 1, 'stalled targets are named');
    await finish(d);
  });

  test('a /json/list of 10,000 targets attaches 256 and says so once, without a flood of log lines', async () => {
    const fake = await F.startFakeInspector({ list: (port, host) => Array.from({ length: 10000 }, (_, i) => ({
      id: `t${i}`, title: `t${i}`, type: 'node', url: 'file:///x.js', webSocketDebuggerUrl: `ws://${host}/t${i}` })) });
    const d = await daemon([{ port: fake.port, worker: 'many' }], { period: '60s', duration: '1s', level: 'info', discovery: '1s' });
    await d.waitLog((l) => l.msg === 'targets over the cap ignored' && l.listed === '10000' && l.cap === '256', 30000, 'the cap named');
    await L.waitFor(() => d.count(is('target attached')) >= 256, 90000, '256 sessions');
    // Several more polls of the same list.
    const polls = fake.httpRequests.length;
    await L.waitFor(() => fake.httpRequests.length >= polls + 3, 30000, 'three more polls');
    assert.strictEqual(d.count(is('targets over the cap ignored')), 1, 'said once, not at every poll');
    // The daemon's own descriptors: 256 sessions and its few others (the
    // fake may still count sockets the daemon has closed, on a busy host).
    const fds = fs.readdirSync(`/proc/${d.pid}/fd`).length;
    assert.ok(fds < 256 + 64, `${fds} descriptors open`);
    assert.ok(!/Too many open files/.test(d.raw), 'no descriptor exhaustion');
    assert.ok(d.lines.length < 2000, `${d.lines.length} log lines`);
    if (!sanitized(d.pid)) assert.ok(status(d.pid, 'VmHWM') < 64 * 1024, `peak RSS ${status(d.pid, 'VmHWM')} KiB`);
    await finish(d);
  });
});
