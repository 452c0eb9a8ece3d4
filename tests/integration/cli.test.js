// The command lines: isoprofd --check-config (positions, exit 2),
// --help/--version/--print-config, usage errors; isoprof's commands and
// exit codes (0 ok, 1 nothing matched, 2 usage or store error) on a store
// the daemon filled from a fake inspector whose profile is known exactly,
// and on a store holding a heap snapshot and its retained profile.
'use strict';
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const zlib = require('node:zlib');
const L = require('./lib');
const F = require('./fake-inspector');

after(L.cleanup);

const VERSION = /project\(isoprof VERSION ([\d.]+)/.exec(fs.readFileSync(path.join(L.ROOT, 'CMakeLists.txt'), 'utf8'))[1];
const OPTIONS = ['store.path', 'store.max_size', 'targets[].inspector', 'targets[].worker', 'targets[].version',
  'targets[].memory_limit', 'discovery.interval', 'sampling.cpu.duration', 'sampling.cpu.period',
  'sampling.cpu.interval', 'sampling.cpu.jitter', 'sampling.cpu.max_concurrent', 'log.level'];
const daemon = (args) => L.cli(args, { bin: L.ISOPROFD });

test('isoprofd and isoprof: --version, --help', () => {
  for (const [bin, name] of [[L.ISOPROFD, 'isoprofd'], [L.ISOPROF, 'isoprof']]) {
    for (const flag of ['--version', '-V']) {
      if (name === 'isoprof' && flag === '-V') continue;
      const r = L.cli([flag], { bin });
      assert.strictEqual(r.status, 0, `${name} ${flag}: ${r.stderr}`);
      assert.strictEqual(r.stdout, `${name} ${VERSION}\n`);
    }
    const h = L.cli(['--help'], { bin });
    assert.strictEqual(h.status, 0, h.stderr);
    assert.match(h.stdout, new RegExp(`^usage: ${name} `));
  }
  const h = daemon(['--help']).stdout;
  for (const o of OPTIONS) assert.ok(h.includes(o), `--help lists ${o}`);
  for (const f of ['--config', '--check-config', '--print-config', '--version']) assert.ok(h.includes(f), `--help names ${f}`);
  const c = L.cli(['--help']).stdout;
  for (const cmd of ['windows', 'export', 'top', 'store']) assert.match(c, new RegExp(`isoprof ${cmd}`));
  assert.match(c, /0 ok, 1 nothing matched, 2 usage or store error/);
});

test('isoprofd --check-config: valid files exit 0, --print-config is valid', () => {
  const dir = L.tmpdir();
  const ok = path.join(dir, 'ok.yaml');
  fs.writeFileSync(ok, L.yamlConfig({ store: path.join(dir, 's'), targets: [{ port: 9229, worker: 'w', version: 'v1', memory_limit: '64MiB' }], jitter: '20%' }));
  const r = daemon(['--check-config', ok]);
  assert.strictEqual(r.status, 0, r.stderr);
  assert.strictEqual(r.stderr, '');
  const pc = daemon(['--print-config']);
  assert.strictEqual(pc.status, 0);
  for (const o of OPTIONS) assert.ok(pc.stdout.includes(`${o.split('.').pop()}:`), `--print-config shows ${o}`);
  const printed = path.join(dir, 'printed.yaml');
  fs.writeFileSync(printed, pc.stdout);
  assert.strictEqual(daemon(['--check-config', printed]).status, 0, 'the printed example config is valid');
  const empty = path.join(dir, 'empty.yaml');
  fs.writeFileSync(empty, '');
  assert.strictEqual(daemon(['--check-config', empty]).status, 0, 'an empty file is the defaults');
});

test('isoprofd --check-config: every problem with file:line:col, exit 2', () => {
  const dir = L.tmpdir();
  const cases = [
    {
      text: 'store:\n  path: /tmp/x\n  bogus: 1\nsampling:\n  cpu:\n    duration: 20s\n    period: 5s\n    interval: 10us\n    max_concurrent: many\ntargets:\n  - inspector: nohost\n  - worker: x\nlog: {level: loud}\n',
      want: [[3, 3, /store\.bogus/], [7, 13, /period/], [8, 15, /interval/], [9, 21, /max_concurrent/], [11, 16, /nohost/], [12, 5, /inspector/], [13, 14, /level/]],
    },
    { text: 'store: 5\nwhat: 1\n', want: [[1, 8, /store/], [2, 1, /what/]] },
    { text: 'store:\n  path: a\n  path: b\n', want: [[3, 3, /duplicate key 'path'/]] },
    { text: 'store: [\n', want: [[2, 1, /YAML/]] },
    { text: 'discovery:\n\tinterval: 1s\n', want: [[2, 1, /./]] },
    { text: 'sampling:\n  cpu:\n    jitter: 90%\n    duration: -1s\n', want: [[3, 13, /jitter/], [4, 15, /duration/]] },
    { text: 'targets:\n  - inspector: 127.0.0.1:0\n  - inspector: 127.0.0.1:70000\n', want: [[2, 16, /inspector/], [3, 16, /inspector/]] },
  ];
  cases.forEach((c, i) => {
    const file = path.join(dir, `bad${i}.yaml`);
    fs.writeFileSync(file, c.text);
    const r = daemon(['--check-config', file]);
    assert.strictEqual(r.status, 2, `case ${i}: exit 2\n${r.stderr}`);
    const lines = r.stderr.split('\n').filter(Boolean);
    for (const l of lines) assert.ok(l.startsWith(`${file}:`), `case ${i}: every line is file:line:col: message: ${l}`);
    const got = lines.map((l) => /^.*?:(\d+):(\d+): (.*)$/.exec(l.slice(file.length))).filter(Boolean)
      .map((m) => [Number(m[1]), Number(m[2]), m[3]]);
    for (const [line, col, re] of c.want) {
      assert.ok(got.some((g) => g[0] === line && g[1] === col && re.test(g[2])),
        `case ${i}: expected ${line}:${col} ${re} in\n${r.stderr}`);
    }
    // A config that does not check does not start either.
    if (i === 0) {
      const s = daemon(['--config', file]);
      assert.strictEqual(s.status, 2);
      assert.ok(s.stderr.includes(`${file}:3:3:`), s.stderr);
    }
  });
  const missing = daemon(['--check-config', path.join(dir, 'nope.yaml')]);
  assert.strictEqual(missing.status, 2);
  assert.match(missing.stderr, /nope\.yaml: .*No such file/);
});

test('isoprofd and isoprof: usage errors exit 2', () => {
  for (const args of [['--bogus'], ['extra-argument'], ['--check-config'], ['--config']]) {
    const r = daemon(args);
    assert.strictEqual(r.status, 2, `isoprofd ${args.join(' ')}: ${r.stderr}`);
    assert.ok(r.stderr.length > 0);
  }
  const dir = L.tmpdir();
  for (const args of [[], ['nope'], ['windows'], ['windows', '--store', path.join(dir, 'missing')],
    ['store'], ['store', 'frob', '--store', dir], ['top', '--store', dir, '-n', 'x']]) {
    const r = L.cli(args);
    assert.strictEqual(r.status, 2, `isoprof ${args.join(' ')}: ${r.stdout}${r.stderr}`);
    assert.ok(r.stderr.length > 0, `isoprof ${args.join(' ')} says why`);
  }
});

// One daemon run against the fake inspector fills the store for the rest.
describe('on a store the daemon filled', () => {
  let store; let dir;
  before(async () => {
    dir = L.tmpdir();
    store = path.join(dir, 'store');
    const fake = await F.startFakeInspector({ url: 'file:///fake/service.js' });
    const d = await L.startDaemon(L.yamlConfig({ store, targets: [{ port: fake.port, version: 'v3' }], duration: '1s', period: '1500ms', jitter: '0%' }), { dir });
    await L.waitFor(() => d.count((l) => l.msg === 'window stored') >= 3, 30000, 'three windows stored');
    const r = await L.stopDaemon(d, { signal: 'SIGTERM' });
    assert.strictEqual(r.code, 0, d.tail());
    assert.ok(r.ms < 2000, `SIGTERM to exit took ${r.ms} ms`);
    assert.deepStrictEqual(fake.violations, [], 'the daemon speaks valid WebSocket');
    await fake.close();
  });

  test('the store found as isoprofd finds it: --store, $ISOPROF_STORE, --config, ./isoprof-data', () => {
    const n = L.windows(store).length;
    const count = (args, opts = {}) => {
      const r = L.cli(['windows', '--json', ...args], { ...opts, env: { ISOPROF_STORE: '', ...(opts.env || {}) } });
      assert.strictEqual(r.status, 0, r.stderr);
      return r.stdout.split('\n').filter(Boolean).length;
    };
    const empty = L.tmpdir(); // no isoprof-data here
    assert.strictEqual(count([], { env: { ISOPROF_STORE: store }, cwd: empty }), n);
    assert.strictEqual(count(['--store', store], { env: { ISOPROF_STORE: path.join(empty, 'nope') } }), n, '--store first');
    const cfg = path.join(dir, 'isoprof.yaml'); // the daemon's config (store.path: store)
    assert.strictEqual(count(['--config', cfg], { cwd: empty }), n);
    // the daemon's default, ./isoprof-data, from where it ran
    const here = L.tmpdir();
    fs.symlinkSync(store, path.join(here, 'isoprof-data'));
    assert.strictEqual(count([], { cwd: here }), n);
    assert.strictEqual(L.cli(['store', 'stat'], { cwd: here, env: { ISOPROF_STORE: '' } }).status, 0);
    // what is not there says where its name came from, or what was tried
    const env = L.cli(['windows'], { env: { ISOPROF_STORE: path.join(empty, 'nope') } });
    assert.strictEqual(env.status, 2);
    assert.match(env.stderr, /no store at .*nope \(from \$ISOPROF_STORE\)/);
    const badCfg = path.join(empty, 'other.yaml');
    fs.writeFileSync(badCfg, `store: {path: ${JSON.stringify(path.join(empty, 'gone'))}}\n`);
    const c = L.cli(['top', '--config', badCfg], { env: { ISOPROF_STORE: '' } });
    assert.strictEqual(c.status, 2);
    assert.match(c.stderr, /no store at .*gone \(store\.path of .*other\.yaml\)/);
    const broken = path.join(empty, 'broken.yaml');
    fs.writeFileSync(broken, 'store: {path: [1, 2]}\n');
    const b = L.cli(['windows', '--config', broken], { env: { ISOPROF_STORE: '' } });
    assert.strictEqual(b.status, 2);
    assert.match(b.stderr, /cannot read the store's path from .*broken\.yaml/);
    // The harness's $ISOPROF_CONFIG names no file, whatever the host's /etc holds.
    const none = L.cli(['windows'], { cwd: empty, env: { ISOPROF_STORE: '' } });
    assert.strictEqual(none.status, 2);
    assert.strictEqual(none.stderr, `isoprof: no store found: no --store, $ISOPROF_STORE unset, no --config and no ${L.NO_SYSTEM_CONFIG} ($ISOPROF_CONFIG), and no ./isoprof-data here\n`);
  });

  // The installed config (/etc/isoprof/isoprof.yaml for the prefix /usr) is
  // found through one path, which $ISOPROF_CONFIG replaces: a config there
  // is read as the installed one would be, so the harness's setting (a path
  // that does not exist, in every child) keeps a host's config out.
  test('$ISOPROF_CONFIG replaces the installed config; the harness sets it for every child', async () => {
    assert.strictEqual(process.env.ISOPROF_CONFIG, L.NO_SYSTEM_CONFIG);
    assert.ok(!fs.existsSync(L.NO_SYSTEM_CONFIG), `${L.NO_SYSTEM_CONFIG} does not exist`);
    assert.ok(!L.NO_SYSTEM_CONFIG.startsWith('/etc/'));
    const empty = L.tmpdir();
    // A hostile config where the installed one would be: the store it names
    // does not exist (as /var/lib/isoprof on a host without the service).
    const hostile = path.join(empty, 'host.yaml');
    fs.writeFileSync(hostile, `store: {path: ${JSON.stringify(path.join(empty, 'var-lib-isoprof'))}}\n` +
      'upload: {url: "http://127.0.0.1:1"}\n');
    const env = { ISOPROF_STORE: '', ISOPROF_CONFIG: hostile };
    const h = L.cli(['windows'], { cwd: empty, env });
    assert.strictEqual(h.status, 2);
    assert.strictEqual(h.stderr, `isoprof: no store at ${path.join(empty, 'var-lib-isoprof')} (store.path of ${hostile} ($ISOPROF_CONFIG))\n`);
    // --store, $ISOPROF_STORE and --config still come first.
    const n = L.windows(store).length;
    assert.strictEqual(L.cli(['windows', '--json', '--store', store], { cwd: empty, env }).stdout.split('\n').filter(Boolean).length, n);
    assert.strictEqual(L.cli(['windows', '--json'], { cwd: empty, env: { ...env, ISOPROF_STORE: store } }).status, 0);
    assert.strictEqual(L.cli(['windows', '--json', '--config', path.join(dir, 'isoprof.yaml')], { cwd: empty, env }).status, 0);
    // One naming the real store is used as the store's path.
    const good = path.join(empty, 'good.yaml');
    fs.writeFileSync(good, `store: {path: ${JSON.stringify(store)}}\n`);
    const g = L.cli(['windows', '--json'], { cwd: empty, env: { ...env, ISOPROF_CONFIG: good } });
    assert.strictEqual(g.status, 0, g.stderr);
    assert.strictEqual(g.stdout.split('\n').filter(Boolean).length, n);
    // upload without --config reads the same file, and says which it tried.
    const u = L.cli(['upload', '--store', store, '--since', '-1h'], { cwd: empty });
    assert.strictEqual(u.status, 2);
    assert.match(u.stderr, new RegExp(`no --config FILE and no ${L.NO_SYSTEM_CONFIG.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} \\(\\$ISOPROF_CONFIG\\)`));
    // --help names the variable.
    assert.match(L.cli(['--help']).stdout, /\$ISOPROF_CONFIG if set, else \/\S+\/isoprof\/isoprof\.yaml\./);
    // Every child the harness starts has it: the CLI (above, in its
    // messages) and a daemon, seen in its /proc/PID/environ.
    const d = await L.startDaemon(L.yamlConfig({ store: path.join(empty, 'store'), targets: [] }), { dir: empty });
    const envOf = (pid) => fs.readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
    assert.ok(envOf(d.pid).includes(`ISOPROF_CONFIG=${L.NO_SYSTEM_CONFIG}`), 'isoprofd from startDaemon');
    await d.waitLog((l) => l.msg === 'isoprofd started', 10000, 'isoprofd started');
    const r = await L.stopDaemon(d, { signal: 'SIGTERM' });
    assert.strictEqual(r.code, 0, d.tail());
  });

  test('isoprof windows: --json fields, table, filters and exit 1 when nothing matches', () => {
    const ws = L.windows(store);
    assert.ok(ws.length >= 3, `windows: ${ws.length}`);
    for (const w of ws) {
      for (const k of ['id', 'worker', 'version', 'isolate', 'runtime', 'type', 'start', 'end', 'samples', 'bytes']) assert.ok(k in w, `${k} in ${JSON.stringify(w)}`);
      assert.strictEqual(w.worker, 'service.js');
      assert.strictEqual(w.version, 'v3');
      assert.strictEqual(w.runtime, 'node');
      assert.strictEqual(w.type, 'cpu');
      assert.ok(w.samples === 100 || w.samples === 101, `samples ${w.samples}`);
      assert.ok(Number.isInteger(w.isolate) && w.isolate > 0);
      assert.ok(w.bytes > 0);
      assert.ok(Date.parse(w.end) > Date.parse(w.start), `${w.start} < ${w.end}`);
    }
    assert.strictEqual(new Set(ws.map((w) => w.id)).size, ws.length, 'ids are unique');
    const sorted = [...ws].sort((a, b) => Date.parse(a.start) - Date.parse(b.start));
    assert.deepStrictEqual(ws.map((w) => w.id), sorted.map((w) => w.id), 'in time order');

    const table = L.cli(['windows', '--store', store]);
    assert.strictEqual(table.status, 0);
    const rows = table.stdout.split('\n').filter(Boolean);
    assert.match(rows[0], /^ID\s+WORKER/);
    assert.strictEqual(rows.length, ws.length + 1);
    for (const w of ws) assert.ok(table.stdout.includes(w.id));

    assert.strictEqual(L.windows(store, ['--worker', 'service.js']).length, ws.length);
    assert.strictEqual(L.windows(store, ['--version', 'v3', '--type', 'cpu']).length, ws.length);
    assert.strictEqual(L.windows(store, ['--since', '-1h']).length, ws.length);
    assert.strictEqual(L.windows(store, ['--since', sorted[1].start]).length, ws.length - 1, '--since is inclusive');
    assert.strictEqual(L.windows(store, ['--until', sorted[1].start]).length, 1, '--until is exclusive');
    for (const f of [['--worker', 'nobody'], ['--version', 'v4'], ['--type', 'heap'], ['--since', '2099-01-01T00:00:00Z'], ['--until', '-1h']]) {
      const r = L.cli(['windows', '--store', store, ...f]);
      assert.strictEqual(r.status, 1, `${f.join(' ')}: exit 1`);
      assert.match(r.stderr, /no window matched/);
    }
    for (const f of [['--type', 'wall'], ['--since', 'yesterday'], ['--until', '2026-13-45T00:00:00Z']]) {
      assert.strictEqual(L.cli(['windows', '--store', store, ...f]).status, 2, `${f.join(' ')}: exit 2`);
    }
  });

  test('isoprof export: one window exact, merged windows, stdout, go tool pprof reads them', () => {
    const ws = L.windows(store);
    const one = L.exportTo(store, ['--id', ws[0].id], path.join(dir, 'one.pb.gz'));
    const buf = fs.readFileSync(one);
    assert.deepStrictEqual([...buf.subarray(0, 2)], [0x1f, 0x8b], 'gzip');
    assert.ok(zlib.gunzipSync(buf).length > 0);
    // The fake's profile: fakeHot 90 samples at pprof line 10 (0-based 9), fakeCold 10.
    const raw = L.pprofRaw(one);
    assert.deepStrictEqual(raw.sampleTypes.slice(0, 2), ['samples/count', 'cpu/nanoseconds']);
    const byFn = {};
    for (const s of raw.samples) {
      const leaf = raw.locations.get(s.locs[0])[0];
      byFn[leaf.fn] = (byFn[leaf.fn] || 0) + s.values[0];
      if (leaf.fn === 'fakeHot') assert.deepStrictEqual([leaf.file, leaf.start], ['/fake/app.js', 10]);
    }
    assert.strictEqual(byFn.fakeHot, 90, JSON.stringify(byFn));
    assert.strictEqual(byFn.fakeCold, 10, JSON.stringify(byFn));
    const top = L.pprofTop(one);
    assert.strictEqual(top[0].name, 'fakeHot');
    assert.ok(top[0].flatPct > 88 && top[0].flatPct <= 90, `flat ${top[0].flatPct}%`);

    const all = L.exportTo(store, ['--worker', 'service.js', '--type', 'cpu'], path.join(dir, 'all.pb.gz'));
    const rawAll = L.pprofRaw(all);
    const hot = rawAll.samples.filter((s) => rawAll.locations.get(s.locs[0])[0].fn === 'fakeHot').reduce((n, s) => n + s.values[0], 0);
    assert.strictEqual(hot, 90 * ws.length, 'merging adds the windows up');

    const out = L.cli(['export', '--store', store, '--id', ws[0].id], { encoding: 'buffer' });
    assert.strictEqual(out.status, 0, out.stderr);
    assert.deepStrictEqual([...out.stdout.subarray(0, 2)], [0x1f, 0x8b], 'export without -o writes gzip to stdout');

    const absent = ws[0].id.replace(/[0-9a-f]{4}$/, (h) => (h === 'ffff' ? '0000' : 'ffff'));
    assert.strictEqual(L.cli(['export', '--store', store, '--id', absent, '-o', path.join(dir, 'x.pb.gz')]).status, 1, 'an id that is not there');
    assert.strictEqual(L.cli(['export', '--store', store, '--id', 'not-an-id', '-o', path.join(dir, 'x.pb.gz')]).status, 2, 'a malformed id');
    assert.strictEqual(L.cli(['export', '--store', store, '--type', 'heap', '-o', path.join(dir, 'x.pb.gz')]).status, 1);
  });

  test('isoprof top: hot function first with file:line; -n; exit 1', () => {
    const r = L.cli(['top', '--store', store, '-n', '2']);
    assert.strictEqual(r.status, 0, r.stderr);
    const rows = r.stdout.split('\n').filter((l) => /%\s+\S/.test(l) && !/flat%/.test(l));
    assert.strictEqual(rows.length, 2, r.stdout);
    assert.match(rows[0], /fakeHot \/fake\/app\.js:10$/);
    assert.match(rows[1], /fakeCold \/fake\/app\.js:20$/);
    assert.match(r.stdout, /^Type: cpu$/m);
    assert.strictEqual(L.cli(['top', '--store', store, '--worker', 'nobody']).status, 1);
  });

  test('isoprof store stat and check', () => {
    const ws = L.windows(store);
    const st = L.cli(['store', 'stat', '--store', store]);
    assert.strictEqual(st.status, 0, st.stderr);
    assert.match(st.stdout, new RegExp(`^windows\\s+${ws.length} \\(cpu ${ws.length}, heap 0, retained 0, snapshot 0\\)$`, 'm'));
    assert.match(st.stdout, /^schema version\s+\d+$/m);
    assert.match(L.storeCheck(store), /: ok$/m);
    // A file that is not a store is a store error, not a crash.
    const junk = path.join(L.tmpdir(), 'junk');
    fs.mkdirSync(junk);
    fs.writeFileSync(path.join(junk, 'data.mdb'), Buffer.alloc(65536, 0x5a));
    for (const cmd of [['store', 'check'], ['store', 'stat'], ['windows']]) {
      const r = L.cli([...cmd, '--store', junk]);
      assert.strictEqual(r.status, 2, `${cmd.join(' ')} on junk: ${r.stdout}${r.stderr}`);
    }
  });
});

// A heap snapshot window and its retained window, pinned to one
// memory_near_limit anomaly, as the daemon will store them; until it does,
// store-blob-fill writes them (the snapshot streamed in, the retained
// profile built from it by the daemon's converter) from a real Node
// snapshot of a known leak: 10,000 Sessions in a Map held by a global.
const BLOB_FILL = process.env.ISOPROF_BLOB_FILL || path.join(L.ROOT, 'build', 'tests', 'integration', 'store-blob-fill');
const LEAK = `class Session { constructor(i) { this.id = i; this.payload = 'x'.repeat(64) + i; } }
globalThis.sessionRegistry = new Map();
for (let i = 0; i < 10000; i++) sessionRegistry.set(i, new Session(i));
require('v8').writeHeapSnapshot(process.argv[1]);`;

// Fill store from snapshot file; the ids store-blob-fill prints.
function blobFill(store, file) {
  const r = L.cli([store, file], { bin: BLOB_FILL });
  assert.strictEqual(r.status, 0, `store-blob-fill: ${r.stderr}`);
  const ids = Object.fromEntries(r.stdout.trim().split(' ').map((kv) => kv.split('=')));
  assert.ok(ids.anomaly && ids.snapshot && ids.retained, r.stdout);
  return ids;
}

describe('snapshot and retained windows', () => {
  let dir; let store; let snapFile; let snapBytes; let ids;
  before(() => {
    dir = L.tmpdir();
    store = path.join(dir, 'store');
    snapFile = path.join(dir, 'leak.heapsnapshot');
    const n = require('node:child_process').spawnSync(process.execPath, ['-e', LEAK, snapFile], { encoding: 'utf8', timeout: 60000 });
    assert.strictEqual(n.status, 0, n.stderr);
    snapBytes = fs.readFileSync(snapFile);
    ids = blobFill(store, snapFile);
  });

  test('windows lists both types, the snapshot with its JSON size; --anomaly ID lists both', () => {
    const ws = L.windows(store);
    assert.deepStrictEqual(ws.map((w) => w.type).sort(), ['retained', 'snapshot']);
    const snap = ws.find((w) => w.type === 'snapshot');
    assert.strictEqual(snap.id, ids.snapshot);
    assert.strictEqual(snap.raw_bytes, snapBytes.length, 'raw_bytes: the JSON export writes');
    assert.ok(snap.bytes > 0 && snap.bytes < snap.raw_bytes, `stored ${snap.bytes} of ${snap.raw_bytes}`);
    assert.deepStrictEqual(snap.pinned, ['memory_near_limit']);
    assert.strictEqual(ws.find((w) => w.type === 'retained').id, ids.retained);
    assert.deepStrictEqual(L.windows(store, ['--type', 'snapshot']).map((w) => w.id), [ids.snapshot]);
    assert.deepStrictEqual(L.windows(store, ['--type', 'retained']).map((w) => w.id), [ids.retained]);

    const table = L.cli(['windows', '--store', store]);
    assert.strictEqual(table.status, 0, table.stderr);
    const row = table.stdout.split('\n').find((l) => l.startsWith(ids.snapshot));
    assert.match(row, /\bsnapshot\b/);
    assert.ok(row.split(/\s+/).includes(String(snapBytes.length)), `the table shows the raw size: ${row}`);
    assert.match(table.stdout.split('\n').find((l) => l.startsWith(ids.retained)), /\bretained\b/);

    const pinned = L.windows(store, ['--anomaly', ids.anomaly]);
    assert.deepStrictEqual(pinned.map((w) => w.id).sort(), [ids.retained, ids.snapshot].sort());
    assert.deepStrictEqual(L.windows(store, ['--anomaly', ids.anomaly, '--type', 'snapshot']).map((w) => w.id), [ids.snapshot]);
    assert.strictEqual(L.windows(store, ['--anomaly', 'memory_near_limit']).length, 2, '--anomaly KIND as before');
    const none = L.cli(['windows', '--store', store, '--anomaly', '99']);
    assert.strictEqual(none.status, 1);
    assert.match(none.stderr, /no anomaly 99/);

    const st = L.cli(['store', 'stat', '--store', store]);
    assert.match(st.stdout, /^windows\s+2 \(cpu 0, heap 0, retained 1, snapshot 1\)$/m);
  });

  test('export --type snapshot writes back the exact bytes: --id, --anomaly ID, one match, stdout', () => {
    const byId = L.exportTo(store, ['--id', ids.snapshot], path.join(dir, 'id.heapsnapshot'));
    assert.ok(fs.readFileSync(byId).equals(snapBytes), '--id: the bytes stored');
    const byAnomaly = L.exportTo(store, ['--anomaly', ids.anomaly, '--type', 'snapshot', '--format', 'raw'], path.join(dir, 'an.heapsnapshot'));
    assert.ok(fs.readFileSync(byAnomaly).equals(snapBytes), '--anomaly ID --type snapshot');
    const out = L.cli(['export', '--store', store, '--type', 'snapshot', '--worker', 'svc'], { encoding: 'buffer' });
    assert.strictEqual(out.status, 0, out.stderr);
    assert.ok(out.stdout.equals(snapBytes), 'the one matching snapshot, to stdout');
    // What DevTools reads first: the meta that names the fields.
    assert.ok(JSON.parse(out.stdout.toString('utf8')).snapshot.meta.node_fields.includes('self_size'));
  });

  test('export --anomaly ID --type retained: a pprof of what holds the memory', () => {
    const file = L.exportTo(store, ['--anomaly', ids.anomaly, '--type', 'retained'], path.join(dir, 'retained.pb.gz'));
    const top = L.goPprof(['-top', '-cum', '-nodecount=20', file]);
    assert.match(top, /^Type: retained_space$/m);
    const rows = L.parsePprofTop(top);
    assert.ok(rows.some((r) => r.name === 'Map sessionRegistry' && r.cumPct > 20), `the Map holds the Sessions:\n${top}`);
    assert.ok(rows.some((r) => r.name === 'Session []'), top);
    const raw = L.pprofRaw(file);
    assert.deepStrictEqual(raw.sampleTypes.slice(0, 2), ['retained_objects/count', 'retained_space/bytes']);
    const own = L.cli(['top', '--store', store, '--type', 'retained', '-n', '50']);
    assert.strictEqual(own.status, 0, own.stderr);
    assert.match(own.stdout, /^Type: retained_space$/m);
    assert.match(own.stdout, /% {2}Session \[\]$/m, 'isoprof top reads it too');
  });

  test('refusals: top and flamegraph of a snapshot, a snapshot as pprof, several types, several snapshots', () => {
    for (const cmd of ['top', 'flamegraph']) {
      const r = L.cli([cmd, '--store', store, '--type', 'snapshot', ...(cmd === 'flamegraph' ? ['-o', path.join(dir, 'f.html')] : [])]);
      assert.strictEqual(r.status, 2, `${cmd}: ${r.stderr}`);
      assert.match(r.stderr, new RegExp(`${cmd} reads profiles.*isoprof export --type snapshot`));
      assert.ok(!fs.existsSync(path.join(dir, 'f.html')));
    }
    for (const fmt of ['pprof', 'folded', 'cpuprofile']) {
      const r = L.cli(['export', '--store', store, '--id', ids.snapshot, '--format', fmt, '-o', path.join(dir, 'x')]);
      assert.strictEqual(r.status, 2, `--format ${fmt}: ${r.stderr}`);
      assert.match(r.stderr, /snapshot window is exported as it was taken.*--format raw/);
      assert.ok(!fs.existsSync(path.join(dir, 'x')));
    }
    const rawRetained = L.cli(['export', '--store', store, '--type', 'retained', '--format', 'raw']);
    assert.strictEqual(rawRetained.status, 2);
    assert.match(rawRetained.stderr, /--format raw is the format of snapshot windows/);
    const mixed = L.cli(['export', '--store', store, '-o', path.join(dir, 'x')]);
    assert.strictEqual(mixed.status, 2);
    assert.match(mixed.stderr, /several types matched; add --type T \(cpu, heap, retained or snapshot\)/);
    assert.match(L.cli(['windows', '--store', store, '--type', 'wall']).stderr, /cpu, heap, retained or snapshot/);
    assert.match(L.cli(['export', '--store', store, '--anomaly', ids.anomaly]).stderr, /--anomaly ID needs --type/);

    // Two snapshots of one worker: never merged, and --id picks one.
    const two = path.join(L.tmpdir(), 'two');
    const a = blobFill(two, snapFile);
    const b = blobFill(two, snapFile);
    const r = L.cli(['export', '--store', two, '--type', 'snapshot', '-o', path.join(dir, 'y')]);
    assert.strictEqual(r.status, 2, r.stderr);
    assert.match(r.stderr, /2 snapshot windows matched: a heap snapshot is exported alone, never merged; pick one with --id/);
    assert.ok(!fs.existsSync(path.join(dir, 'y')));
    for (const id of [a.snapshot, b.snapshot]) {
      assert.ok(fs.readFileSync(L.exportTo(two, ['--id', id], path.join(dir, 'y'))).equals(snapBytes));
    }
  });

  test('a snapshot export that fails part way says why, exits 2 and leaves no partial file', () => {
    const sh = (limitKiB, file) => require('node:child_process').spawnSync('/bin/sh',
      ['-c', `ulimit -f ${limitKiB}; trap '' XFSZ; exec "$0" "$@"`, L.ISOPROF, 'export', '--store', store, '--id', ids.snapshot, '-o', file],
      { encoding: 'utf8', timeout: 30000 });
    // a directory that is not there
    const gone = L.cli(['export', '--store', store, '--id', ids.snapshot, '-o', path.join(dir, 'nope', 'x.heapsnapshot')]);
    assert.strictEqual(gone.status, 2);
    assert.match(gone.stderr, /nope\/x\.heapsnapshot: No such file or directory/);
    // a file size limit reached after the first pieces: the partial file goes
    const big = path.join(dir, 'big.heapsnapshot');
    const r = sh(256, big);
    assert.strictEqual(r.status, 2, `${r.status} ${r.signal} ${r.stderr}`);
    assert.match(r.stderr, /writing .*big\.heapsnapshot: File too large/);
    assert.ok(!fs.existsSync(big), 'the partial file is removed');
    // a full disk: the device is not "removed"
    if (fs.existsSync('/dev/full')) {
      const full = L.cli(['export', '--store', store, '--id', ids.snapshot, '-o', '/dev/full']);
      assert.strictEqual(full.status, 2);
      assert.match(full.stderr, /writing \/dev\/full: No space left on device/);
      assert.ok(fs.statSync('/dev/full').isCharacterDevice());
    }
    // a damaged chunk (found by zstd or the checksum at the end): one byte
    // flipped in the middle of a zstd frame of a copy of the store (between
    // a frame's magic and the next one), frame by frame, largest first,
    // until it is the snapshot's. (A fixed offset from a magic missed every
    // frame once: where the frames fall and how long they are depends on
    // the snapshot taken.)
    const mdb = fs.readFileSync(path.join(store, 'data.mdb'));
    const magic = Buffer.from([0x28, 0xb5, 0x2f, 0xfd]);
    const starts = [];
    for (let at = mdb.indexOf(magic); at >= 0; at = mdb.indexOf(magic, at + 1)) starts.push(at);
    const frames = starts.map((at, i) => ({ at, len: (i + 1 < starts.length ? starts[i + 1] : mdb.length) - at }))
      .filter((f) => f.len >= 1024).sort((a, b) => b.len - a.len).slice(0, 32);
    let found = false;
    for (const f of frames) {
      if (found) break;
      const copy = path.join(L.tmpdir(), 'damaged');
      fs.cpSync(store, copy, { recursive: true });
      const bytes = Buffer.from(mdb);
      bytes[f.at + Math.floor(f.len / 2)] ^= 0x5a;
      fs.writeFileSync(path.join(copy, 'data.mdb'), bytes);
      const out = path.join(dir, 'damaged.heapsnapshot');
      const d = L.cli(['export', '--store', copy, '--id', ids.snapshot, '-o', out]);
      if (d.status === 0) continue; // that frame was the retained window's
      assert.strictEqual(d.status, 2, d.stderr);
      assert.match(d.stderr, new RegExp(`reading snapshot window ${ids.snapshot}: `));
      assert.ok(!fs.existsSync(out), 'the partial file is removed');
      found = true;
    }
    assert.ok(found, `a damaged snapshot frame was found and refused (${frames.length} frames tried of ${starts.length} magics)`);
  });
});
