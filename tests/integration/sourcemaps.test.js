'use strict';
// Source maps: frames of bundled and compiled TypeScript read back with
// their original names, files and lines (esbuild's linked, inline and hidden
// maps, tsc's per-module maps, a workerd module through source_maps:, Deno's
// emit cache, a runtime in its own mount namespace through root:); a map
// replaced on disk between two windows; every kind of bad map and path
// escape refused once, counted, and the daemon unharmed.
//
// One daemon profiles every runtime at once; one Node process loads all the
// builds (each a script with its own map), another the bad ones. The hot
// functions are large (loops and branches), so V8 does not inline them
// into their callers, and the allocating ones are timer callbacks (called
// from native code).
const { test, before, after } = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync, spawn } = require('node:child_process');
const L = require('./lib');

after(L.cleanup);

const VARIANTS = ['linked', 'inline', 'hidden', 'tsc', 'deploy'];

// Branches enough to make a function's bytecode larger than TurboFan's
// inlining limit (460 bytes in V8 11 and 12): such a function keeps its own
// frame in every profile.
const branches = (v) => [19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 101, 103, 107, 109, 113]
  .map((p, k) => `      ${k ? 'else ' : ''}if (${v} % ${p} === 0) ${v} = (${v} + ${k + 3} * i) % 1000003;`).join('\n');
const BRANCHES = branches('acc').replace(/^      if/, '      else if');

// The hot function of a variant: large enough that V8 never inlines it.
const hotTs = (v) => `// hot.ts (${v}): the CPU-heavy part
export type Weights = number[];

/**
 * A checksum over the batch, round by round.
 */
export function checksum_${v}(data: Weights, rounds: number): number {
  let acc = 0;
  for (let r = 0; r < rounds; r++) {
    for (let i = 0; i < data.length; i++) {
      acc = (acc * 31 + data[i] * (r + 1)) % 1000003;
      if (acc % 7 === 0) acc ^= i;
      else if (acc % 11 === 0) acc += r;
      else if (acc % 13 === 0) acc -= i & 3;
      else if (acc % 17 === 0) acc = (acc << 1) % 1000003;
${BRANCHES}
    }
  }
  return acc;
}
`;

const mainTs = (v) => `// main.ts (${v})
import { checksum_${v} } from "./hot";

interface Record_${v} {
  id: number;
  payload: number[];
}

const data: number[] = [];
for (let i = 0; i < 2000; i++) data.push(i * 7);
const kept: Record_${v}[] = [];
let total = 0;

export function run(): number {
  const t = Date.now();
  while (Date.now() - t < 2) total += checksum_${v}(data, 10);
  return total;
}

// Allocations for the heap windows, in a timer callback too large to be
// inlined into listOnTimeout, which calls it. A declaration, not a named
// function expression: esbuild --minify drops an expression's unused name,
// and the map then has no name for the frame.
function keepRecords_${v}() {
  let acc = total;
  for (let i = 0; i < 40; i++) {
    kept.push({ id: total + i, payload: new Array(48).fill(i) });
    acc = (acc * 31 + i) % 1000003;
${branches('acc')}
  }
  if (kept.length > 4000) kept.splice(0, 2000);
  total += acc & 1;
}
setInterval(keepRecords_${v}, 25);
`;

// 1-based line of the first line of text containing s.
function lineOf(text, s) {
  const i = text.split('\n').findIndex((l) => l.includes(s));
  assert.ok(i >= 0, `${s} is in the source`);
  return i + 1;
}

function run(bin, args, opts = {}) {
  const r = spawnSync(bin, args, { encoding: 'utf8', timeout: 60000, ...opts });
  if (r.error || r.status !== 0) throw new Error(`${bin} ${args.join(' ')}: ${r.error ? r.error.message : r.stderr}`);
  return r.stdout;
}

// Builds every variant under dir: out/<v>/main.js (+ its map as the
// variant has it). Returns {host: the script loading them all}.
function buildApp(dir) {
  const esbuild = L.runtimeBinary('esbuild');
  const tsc = L.runtimeBinary('tsc');
  for (const v of VARIANTS) {
    const src = path.join(dir, 'src', v);
    fs.mkdirSync(src, { recursive: true });
    fs.writeFileSync(path.join(src, 'hot.ts'), hotTs(v));
    fs.writeFileSync(path.join(src, 'main.ts'), mainTs(v));
    const out = path.join(dir, 'out', v);
    if (v === 'tsc') {
      fs.writeFileSync(path.join(dir, `tsconfig.${v}.json`), JSON.stringify({
        compilerOptions: { target: 'es2020', module: 'commonjs', sourceMap: true, outDir: out, rootDir: src, strict: true },
        files: [path.join(src, 'main.ts'), path.join(src, 'hot.ts')],
      }));
      run(process.execPath, [tsc, '-p', path.join(dir, `tsconfig.${v}.json`)]);
    } else {
      const sm = { linked: 'linked', inline: 'inline', hidden: 'external', deploy: 'linked' }[v];
      run(esbuild, [path.join(src, 'main.ts'), '--bundle', '--minify', `--sourcemap=${sm}`, '--platform=node',
        '--format=cjs', `--outfile=${path.join(out, 'main.js')}`, '--log-level=warning']);
    }
  }
  const host = path.join(dir, 'host.js');
  fs.writeFileSync(host, `'use strict';
const mods = ${JSON.stringify(VARIANTS)}.map((v) => require(${JSON.stringify(path.join(dir, 'out'))} + '/' + v + '/main.js'));
setInterval(() => { for (const m of mods) m.run(); }, 25);
`);
  return { host };
}

// The bad maps: one script each, in one Node process, and one good script
// beside them. A frame of a bad script keeps its V8 name.
const BAD = [
  // [name, what the script's comment names, how the map is made, reason]
  ['notjson', 'notjson.js.map', (f) => fs.writeFileSync(f, 'this is { not JSON'), 'json'],
  ['cut', 'cut.js.map', (f) => fs.writeFileSync(f, '{"version":3,"sources":["a.ts"],"names":[],"mapp'), 'json'],
  ['v2', 'v2.js.map', (f) => fs.writeFileSync(f, '{"version":2,"sources":["a.ts"],"names":[],"mappings":"AAAA"}'), 'version'],
  ['vlq', 'vlq.js.map', (f) => fs.writeFileSync(f, '{"version":3,"sources":["a.ts"],"names":[],"mappings":"AAAA,!!!!"}'), 'vlq'],
  ['index', 'index.js.map', (f) => fs.writeFileSync(f, '{"version":3,"sources":["a.ts"],"names":[],"mappings":"AKAA"}'), 'index'],
  ['sections', 'sections.js.map', (f) => fs.writeFileSync(f, '{"version":3,"sections":[{"offset":{"line":0,"column":0},"map":{}}]}'), 'sections'],
  ['big', 'big.js.map', (f) => fs.writeFileSync(f, `{"version":3,"sources":["a.ts"],"names":[],"mappings":"${'AAAA,'.repeat(420000)}AAAA"}`), 'file_too_big'],
  ['isdir', 'isdir.js.map', (f) => fs.mkdirSync(f), 'not_a_file'],
  ['dataurl', 'data:application/json;base64,e30*!', null, 'data_url'],
  ['up', '../../../../../../../../etc/shadow', null, 'outside'],
  ['abs', '/etc/passwd', null, 'outside'],
  ['link', 'link.js.map', (f) => fs.symlinkSync('/etc/hostname', f), 'outside'],
];

// A script of its own: a timer callback (called from native code, so it
// keeps its frame) spending a millisecond in its hot function.
function badScript(name, comment) {
  return `'use strict';
function hot_${name}(n) {
  let acc = 0;
  for (let r = 0; r < 10; r++) {
    for (let i = 0; i < n; i++) {
      acc = (acc * 31 + i * (r + 1)) % 1000003;
      if (acc % 7 === 0) acc ^= i;
      else if (acc % 11 === 0) acc += r;
      else if (acc % 13 === 0) acc -= i & 3;
    }
  }
  return acc;
}
let sum = 0;
setInterval(function tick_${name}() { const t = Date.now(); while (Date.now() - t < 1) sum += hot_${name}(500); }, 40);
//# sourceMappingURL=${comment}
`;
}

function buildBad(dir) {
  const b = path.join(dir, 'bad');
  fs.mkdirSync(b, { recursive: true });
  for (const [name, comment, make] of BAD) {
    fs.writeFileSync(path.join(b, `${name}.js`), badScript(name, comment));
    if (make) make(path.join(b, comment));
  }
  // the good one: its map names hot_good "goodOriginal" in good.ts
  fs.writeFileSync(path.join(b, 'good.js'), badScript('good', 'good.js.map'));
  // hot_good starts at line 2 (0-based 1): "function hot_good(n) {", and
  // tick_good on line 15 (0-based 14); V8 gives a function's start at its
  // '(', so one segment at column 0 of each line covers it: [1, 0] ->
  // good.ts [4, 2] "goodOriginal", [14, 0] -> good.ts [19, 2] "goodTick".
  fs.writeFileSync(path.join(b, 'good.js.map'), JSON.stringify({
    version: 3, file: 'good.js', sources: ['good.ts'], names: ['goodOriginal', 'goodTick'],
    mappings: `;AAIEA${';'.repeat(13)}AAeAC`,
  }));
  const host = path.join(b, 'host.js');
  fs.writeFileSync(host, `'use strict';
for (const n of ${JSON.stringify([...BAD.map((x) => x[0]), 'good'])}) require('./' + n + '.js');
`);
  return { host };
}

// A Deno service in TypeScript: Deno's emit moves lines (the interface and
// the enum go, the enum becomes code), so only its map gives app.ts's lines.
const DENO_TS = `// app.ts
interface Order {
  id: number;
  items: number[];
}

enum Mode { Fast, Slow }

function priceOrder(order: Order, mode: Mode): number {
  let total = 0;
  for (let r = 0; r < 10; r++) {
    for (let i = 0; i < order.items.length; i++) {
      total = (total * 31 + order.items[i] * (r + 1)) % 1000003;
      if (total % 7 === 0) total ^= i;
      else if (total % 11 === 0) total += r;
      else if (mode === Mode.Slow && total % 13 === 0) total -= i & 3;
${branches('total')}
    }
  }
  return total;
}

const items: number[] = [];
for (let i = 0; i < 2000; i++) items.push(i * 3);
let acc = 0;
setInterval(() => {
  const t = Date.now();
  while (Date.now() - t < 5) acc += priceOrder({ id: acc, items }, Mode.Slow);
}, 30);
`;

// A workerd module bundled from TypeScript; its map is shipped apart from
// the code (workerd embeds the module: nothing on disk to find it beside).
const WORKER_TS = `// worker.ts
function renderPage(n: number): string {
  let s = "";
  let acc = 0;
  for (let r = 0; r < 10; r++) {
    for (let i = 0; i < n; i++) {
      s += String.fromCharCode(65 + ((i * 7 + r) % 26));
      if (s.length > 5000) s = s.slice(2500);
      acc = (acc * 31 + i) % 1000003;
${branches('acc')}
    }
  }
  return s + acc;
}

export default {
  async fetch(req: Request): Promise<Response> {
    const t = Date.now();
    let out = "";
    while (Date.now() - t < 5) out = renderPage(2000);
    return new Response(out.slice(0, 10));
  },
};
`;

const S = {}; // the shared set-up

before(async () => {
  const dir = L.tmpdir();
  S.dir = dir;
  S.store = path.join(dir, 'store');
  const app = buildApp(dir);
  const bad = buildBad(dir);
  S.main = await L.startNode(app.host);
  S.bad = await L.startNode(bad.host);

  const denoDir = path.join(dir, 'deno-app');
  fs.mkdirSync(denoDir);
  fs.writeFileSync(path.join(denoDir, 'app.ts'), DENO_TS);
  S.deno = await L.startDeno(path.join(denoDir, 'app.ts'));
  S.denoTs = path.join(denoDir, 'app.ts');

  const wdir = path.join(dir, 'wd');
  const maps = path.join(dir, 'wd-maps');
  fs.mkdirSync(wdir);
  fs.mkdirSync(maps);
  fs.writeFileSync(path.join(wdir, 'worker.ts'), WORKER_TS);
  run(L.runtimeBinary('esbuild'), [path.join(wdir, 'worker.ts'), '--bundle', '--minify', '--sourcemap=external',
    '--format=esm', `--outfile=${path.join(wdir, 'worker.js')}`, '--log-level=warning']);
  fs.renameSync(path.join(wdir, 'worker.js.map'), path.join(maps, 'worker.js.map'));
  S.workerTs = path.join(maps, 'worker.ts'); // sources are relative to the map
  const http = await L.freePort();
  S.workerd = await L.startWorkerd(path.join(wdir, 'worker.js'), [{ name: 'shop', port: http }]);
  S.load = L.loadLoop(http);

  // A runtime in its own mount namespace: it runs /mnt/ns-host.js, which
  // exists only there (a bind mount of a directory of ours), as in a
  // container. Host discovery finds it (by its executable's name, in a
  // /proc that holds only this process: $ISOPROFD_PROC, L.procRoot) and
  // reads its files through /proc/<pid>/root.
  S.ns = await startInNamespace(dir);

  const targets = [
    { port: S.main.port, worker: 'app' },
    { port: S.bad.port, worker: 'bad' },
    { port: S.deno.port, worker: 'deno-app' },
    { port: S.workerd.port, worker: 'shop', source_maps: [maps] },
  ];
  S.d = await L.startDaemon(L.yamlConfig({
    store: S.store, targets, duration: '1s', period: '1500ms', interval: '1ms', heap: '{period: 2s}', level: 'info',
    discovery: S.ns.node ? `500ms, processes: {enabled: true, executables: [${NS_EXE}]}` : '500ms',
    extra: 'source_maps_max_file: 1MiB',
  }), { dir, env: S.ns.node ? L.procRoot([S.ns.pid]).env : {} });
});

// Node in a private mount namespace (unshare, as root), run as
// NS_EXE (a hard link to node, or a copy): {node, pid} or {skip: why}.
const NS_EXE = 'isoprof-ns-node';
async function startInNamespace(dir) {
  const src = path.join(dir, 'out', 'linked');
  const probe = spawnSync('unshare', ['--mount', '--propagation', 'private', 'true'], { encoding: 'utf8' });
  if (probe.status !== 0 || !fs.existsSync('/mnt')) return { skip: `unshare --mount refused here (${(probe.stderr || '').trim() || probe.status})` };
  const exe = path.join(dir, NS_EXE);
  try { fs.linkSync(fs.realpathSync(process.execPath), exe); } catch (_) { fs.copyFileSync(fs.realpathSync(process.execPath), exe); fs.chmodSync(exe, 0o755); }
  fs.writeFileSync(path.join(src, 'ns-host.js'), "const m = require('/mnt/main.js');\nsetInterval(() => m.run(), 25);\n");
  const port = await L.freePort();
  const pidFile = path.join(dir, 'ns.pid');
  const script = `mount --bind ${JSON.stringify(src)} /mnt && echo $$ > ${JSON.stringify(pidFile)} && ` +
    `exec ${JSON.stringify(exe)} --inspect=127.0.0.1:${port} --require ${JSON.stringify(path.join(__dirname, 'parent-guard.js'))} /mnt/ns-host.js`;
  const c = L.track(spawn('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', script],
    { stdio: ['ignore', 'ignore', 'pipe'] }), 'node-ns');
  c.port = port;
  await L.waitInspector(port, { child: c });
  const pid = Number(fs.readFileSync(pidFile, 'utf8').trim());
  assert.ok(!fs.existsSync('/mnt/ns-host.js'), 'the bind mount is not visible outside the namespace');
  return { node: c, pid };
}

// `go tool pprof -top -lines` of the merged windows matching args.
function topLines(args, file) {
  L.exportTo(S.store, args, path.join(S.dir, file));
  return L.pprofTop(path.join(S.dir, file), ['-lines']).map((r) => r.name);
}

// The windows of a store that may not exist yet (or is being made: its
// directory is there before its first transaction).
const windowsOf = (args) => {
  try {
    return fs.existsSync(S.store) ? L.windows(S.store, args) : [];
  } catch (e) {
    if (/not initialised yet/.test(e.message)) return [];
    throw e;
  }
};
const cpuWindows = (worker) => windowsOf(['--worker', worker, '--type', 'cpu']);
// Waits for n windows of worker (args: more filters); on a time-out says
// what the daemon did.
const waitWindows = (worker, n, ms, args = ['--type', 'cpu']) =>
  L.waitFor(() => windowsOf(['--worker', worker, ...args]).length >= n, ms, `${n} windows of ${worker} (${args.join(' ')})`)
    .catch((e) => { throw new Error(`${e.message}\n--- isoprofd ---\n${S.d.story()}`); });

test('esbuild linked, inline and hidden maps and tsc maps: go tool pprof names the TypeScript', { timeout: 90000 }, async () => {
  await waitWindows('app', 3, 60000);
  const rows = topLines(['--worker', 'app', '--type', 'cpu'], 'app-cpu.pb.gz');
  for (const v of VARIANTS) {
    const file = path.join(S.dir, 'src', v, 'hot.ts');
    const line = lineOf(hotTs(v), `export function checksum_${v}`);
    const want = `checksum_${v} ${file}:${line}`;
    assert.ok(rows.some((r) => r.startsWith(want)), `${want} in:\n${rows.join('\n')}`);
  }
  // each window says how many of its frames were mapped
  const ws = cpuWindows('app');
  assert.ok(ws.every((w) => w.frames_mapped > 0), JSON.stringify(ws.map((w) => [w.frames_mapped, w.frames_unmapped])));
});

test('a heap window maps too', { timeout: 90000 }, async () => {
  await waitWindows('app', 1, 45000, ['--type', 'heap']);
  const rows = topLines(['--worker', 'app', '--type', 'heap'], 'app-heap.pb.gz');
  const ts = rows.filter((r) => /\/src\/\w+\/main\.ts:\d+/.test(r));
  assert.ok(ts.length > 0, `a heap frame in a main.ts:\n${rows.join('\n')}`);
  // every frame at the timer callback's line carries its variant's name
  const at = rows.map((r) => /^(\S+) \S*\/src\/(\w+)\/main\.ts:(\d+)/.exec(r))
    .filter((m) => m && +m[3] === lineOf(mainTs(m[2]), 'function keepRecords_'));
  assert.ok(at.length > 0, `the allocating timer callback:\n${rows.join('\n')}`);
  for (const m of at) assert.strictEqual(m[1], `keepRecords_${m[2]}`, `the frame at ${m[2]}/main.ts:${m[3]} by its name:\n${rows.join('\n')}`);
});

test('a map replaced on disk between two windows: the next window uses the new one', { timeout: 90000 }, async () => {
  const line = lineOf(hotTs('deploy'), 'export function checksum_deploy');
  const file = path.join(S.dir, 'src', 'deploy', 'hot.ts');
  await waitWindows('app', 2, 60000);
  // The deploy: the same code, a map whose names say v2 (and a size of its own).
  const mapFile = path.join(S.dir, 'out', 'deploy', 'main.js.map');
  const m = JSON.parse(fs.readFileSync(mapFile, 'utf8'));
  m.names = m.names.map((n) => (n === 'checksum_deploy' ? 'checksum_deploy_v2' : n));
  const tmp = `${mapFile}.new`;
  fs.writeFileSync(tmp, JSON.stringify(m));
  fs.renameSync(tmp, mapFile);
  const since = new Date(Date.now() + 50).toISOString();
  await L.waitFor(() => L.windows(S.store, ['--worker', 'app', '--type', 'cpu', '--since', since]).length >= 1,
    30000, 'a CPU window after the deploy');
  const rows = topLines(['--worker', 'app', '--type', 'cpu', '--since', since], 'deploy.pb.gz');
  assert.ok(rows.some((r) => r.startsWith(`checksum_deploy_v2 ${file}:${line}`)), `the new map's name:\n${rows.join('\n')}`);
  assert.ok(!rows.some((r) => r.startsWith('checksum_deploy ')), `not the old one:\n${rows.join('\n')}`);
});

test('workerd: a bundled module mapped through the target\'s source_maps directory', { timeout: 90000 }, async () => {
  await waitWindows('shop', 2, 60000);
  const rows = topLines(['--worker', 'shop', '--type', 'cpu'], 'shop.pb.gz');
  const want = `renderPage ${S.workerTs}:${lineOf(WORKER_TS, 'function renderPage')}`;
  assert.ok(rows.some((r) => r.startsWith(want)), `${want} in:\n${rows.join('\n')}`);
});

test('Deno: TypeScript lines through its emit cache', { timeout: 90000 }, async () => {
  await waitWindows('deno-app', 2, 60000);
  const rows = topLines(['--worker', 'deno-app', '--type', 'cpu'], 'deno.pb.gz');
  const want = `priceOrder ${S.denoTs}:${lineOf(DENO_TS, 'function priceOrder')}`;
  assert.ok(rows.some((r) => r.startsWith(want)), `${want} in:\n${rows.join('\n')}`);
});

test('a process in its own mount namespace, found on the host: its files read through /proc/PID/root', { timeout: 90000 }, async (t) => {
  if (S.ns.skip) return t.skip(S.ns.skip);
  await waitWindows('ns-host.js', 2, 60000);
  assert.ok(cpuWindows('ns-host.js').every((w) => w.pid === S.ns.pid), 'its windows carry its pid');
  const rows = topLines(['--worker', 'ns-host.js', '--type', 'cpu'], 'ns.pb.gz');
  // The map's sources are relative to /mnt inside the namespace.
  const want = `checksum_linked /src/linked/hot.ts:${lineOf(hotTs('linked'), 'export function checksum_linked')}`;
  assert.ok(rows.some((r) => r.startsWith(want)), `${want} in:\n${rows.join('\n')}`);
});

test('bad maps and path escapes: refused once each, counted by reason, frames keep their V8 names', { timeout: 90000 }, async () => {
  await waitWindows('bad', 4, 60000);
  const want = {};
  for (const [, , , reason] of BAD) want[reason] = (want[reason] || 0) + 1;
  const metrics = L.cli(['metrics', '--socket', path.join(S.store, 'control.sock')]).stdout;
  for (const [reason, n] of Object.entries(want)) {
    const m = new RegExp(`^isoprof_source_maps_refused_total\\{reason="${reason}"\\} (\\d+)$`, 'm').exec(metrics);
    assert.ok(m, `the counter for ${reason}:\n${metrics}`);
    assert.strictEqual(Number(m[1]), n, `refused for ${reason}`);
    const logged = S.d.count((l) => l.msg === 'source map not used: frames stay as V8 named them' && l.reason === reason);
    assert.strictEqual(logged, n, `${reason} logged once a map`);
  }
  // Each bad script's frames stay as V8 named them, in its .js file. Node's
  // timer callbacks are called from JavaScript (listOnTimeout), which
  // TurboFan may inline a few of into, so a script's frames are looked for
  // among the Locations of every window (each stored window keeps the
  // frames of its whole call tree), not only among the sampled ones: a
  // refusal counted above means the mapper saw a frame of that script.
  const frames = new Set();
  for (const w of cpuWindows('bad')) {
    const f = path.join(S.dir, `bad-${w.id}.pb.gz`);
    L.exportTo(S.store, ['--id', w.id], f);
    for (const lines of L.pprofRaw(f).locations.values())
      for (const l of lines) frames.add(`${l.fn} ${l.file}:${l.line}`);
  }
  const all = [...frames].sort().join('\n');
  for (const [name] of BAD) {
    const file = path.join(S.dir, 'bad', `${name}.js`);
    assert.ok(frames.has(`tick_${name} ${file}:15`) || frames.has(`hot_${name} ${file}:2`), `${name}.js unmapped:\n${all}`);
  }
  assert.ok(![...frames].some((f) => f.includes(path.join(S.dir, 'bad')) && /\.ts:/.test(f) && !f.includes('good.ts')),
    `no bad script mapped:\n${all}`);
  // while the good map beside them is used
  const good = path.join(S.dir, 'bad', 'good.ts');
  assert.ok(frames.has(`goodTick ${good}:20`) || frames.has(`goodOriginal ${good}:5`), `the good map is used:\n${all}`);
  // the escapes read nothing outside: no log line carries a byte of what they named
  assert.ok(!/root:x:0:0/.test(S.d.raw), 'nothing of /etc/passwd in the log');
  const st = L.status(S.store).source_maps;
  assert.ok(st.frames_mapped > 0 && st.frames_unmapped > 0 && st.maps > 0 && st.bytes <= st.budget, JSON.stringify(st));
  assert.ok(cpuWindows('bad').some((w) => w.frames_unmapped > 0), 'the bad scripts\' frames are counted unmapped');
  const text = L.cli(['status', '--socket', path.join(S.store, 'control.sock')]).stdout;
  assert.match(text, /^srcmaps\s+\d+ maps? cached, .* of 32\.0MiB; frames \d+ mapped, \d+ not; refused: .*outside 3/m);
  assert.ok(S.d.alive(), 'the daemon is still running');
});

test('the daemon stops cleanly and the store checks clean', { timeout: 60000 }, async () => {
  await S.load.stop();
  const r = await L.stopDaemon(S.d);
  assert.strictEqual(r.code, 0, S.d.tail());
  L.storeCheck(S.store);
  const errors = S.d.lines.filter((l) => l.level === 'error');
  assert.deepStrictEqual(errors.map((l) => l.raw), []);
});
