// The benchmark harness keeps working: tests/bench/bench.js runs every
// section in its quick mode against this build (real Node and workerd
// isolates, isoprofd, wrk, @pyroscope/nodejs, pprof-format, the C bench
// tools) and writes a JSON file whose figures are real measurements. It
// asserts that each section measured something, never how fast: the
// figures of a quick run on a busy CI machine mean nothing.
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const lib = require('./lib');

const BUILD = process.env.ISOPROF_BUILD_DIR || path.join(lib.ROOT, 'build');
const BENCH = path.join(lib.ROOT, 'tests', 'bench', 'bench.js');

function run(args, timeoutMs) {
  return new Promise((resolve) => {
    const c = lib.track(spawn(process.execPath, [BENCH, ...args], { stdio: ['ignore', 'pipe', 'pipe'] }), 'bench.js');
    let out = '';
    c.stdout.on('data', (d) => { out += d; });
    const t = setTimeout(() => { try { process.kill(c.pid, 'SIGTERM'); } catch (_) { /* gone */ } }, timeoutMs);
    c.on('exit', (code, signal) => { clearTimeout(t); resolve({ code, signal, out, err: c.stderrText }); });
  });
}

test('bench.js rejects a bad command line with a clear message', async () => {
  const r = await run(['--only', 'overhead,nope', '--no-setup', '--no-build'], 10000);
  assert.strictEqual(r.code, 2);
  assert.match(r.err, /unknown section 'nope'/);
  const h = await run(['--help'], 10000);
  assert.strictEqual(h.code, 0);
  assert.match(h.out, /--only LIST/);
});

test('every section measures in quick mode and writes its JSON', { timeout: 420000 }, async () => {
  const dir = lib.tmpdir();
  const json = path.join(dir, 'results.json');
  const r = await run(['--quick', '--no-setup', '--no-build', '--build', BUILD, '--json', json,
    // Smaller still than --quick, to keep the suite short: one interval,
    // fewer functions, fewer agent configs.
    '--pauses-intervals', '10ms', '--pauses-funcs', '5000', '--agent-configs', 'node-1,node-10,workerd-10',
    '--pauses-budget-funcs', '200', '--pauses-budget-seconds', '8',
    '--overhead-seconds', '1', '--overhead-warmup', '1', '--pauses-reps', '1',
    '--agent-seconds', '8', '--storage-windows', '5000', '--storage-capture', '8'], 400000);
  assert.strictEqual(r.code, 0, `bench.js exited ${r.code ?? r.signal}\n${r.err.slice(-4000)}`);
  const res = JSON.parse(fs.readFileSync(json, 'utf8'));
  assert.strictEqual(res.quick, true);
  assert.strictEqual(res.machine.cpus > 0, true);
  for (const name of ['overhead', 'pauses', 'agent', 'convert', 'storage']) {
    const s = res.sections[name];
    assert.ok(s, `section ${name} missing from the JSON`);
    assert.strictEqual(s.error, undefined, `section ${name} failed: ${s.error}`);
    assert.ok(s.rows.length > 0, `section ${name} reported no rows`);
    for (const row of s.rows) {
      assert.strictEqual(row.length, 4, `${name}: a row is [what, figure, goal, verdict]: ${JSON.stringify(row)}`);
      assert.ok(row[1] !== '' && !/NaN|undefined/.test(row[1]), `${name}: "${row[0]}" has no figure: ${row[1]}`);
    }
  }
  // The quick run's figures mean nothing, but they must be measurements.
  const ov = res.sections.overhead.data;
  assert.ok(ov.variants['isoprofd-always-on'].windows.cpu >= 1, 'the always-on daemon stored no CPU window');
  assert.ok(ov.absolute.none.a.rps.median > 0, 'no request rate measured');
  for (const row of res.sections.convert.rows) assert.strictEqual(row[3], 'same content', row[1]);
  for (const a of res.sections.agent.data.results) assert.ok(a.attached >= 1, `${a.config}: nothing attached`);
  assert.match(r.out, /== summary/);
});
