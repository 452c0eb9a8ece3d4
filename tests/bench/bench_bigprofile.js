#!/usr/bin/env node
// The daemon's peak RSS while it receives, converts and stores big CPU
// profiles: a fake inspector (tests/integration/fake-inspector.js) answers
// every Profiler.stop with the same synthetic profile, bench_convert's
// (bench_convert --write, so the bytes are those the conversion benchmark
// measures), and the daemon takes a few windows of it. Prints one row per
// size: profile MB, windows stored, stored bytes per window, the daemon's
// VmHWM once attached (before any window) and after the windows, and
// `isoprof store check`. tests/bench/convert.js runs the same measurement
// through daemonPeak().
//
//   node tests/bench/bench_bigprofile.js [--build build] [--sizes 1,20] [--windows 3]
//
// It measures; it asserts nothing.
'use strict';
const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { startFakeInspector } = require('../integration/fake-inspector');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function hwmKiB(pid) {
  const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return parseInt(/VmHWM:\s+(\d+)/.exec(s)[1], 10);
}

// Runs isoprofd against a fake inspector that answers Profiler.stop with
// `profile` (the object) until `windows` windows are stored or timeoutMs
// passes. Returns {stored, stored_bytes (per window, from the log),
// hwm_attached_kib, hwm_kib, store_check}. The daemon and the fake are
// stopped and the temp dir removed before it returns or throws.
async function daemonPeak({ isoprofd, isoprof, profile, windows = 3, timeoutMs = 120000 }) {
  const fake = await startFakeInspector({ mode: 'normal', profile });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'isoprof-bigprof-'));
  let d = null;
  try {
    fs.writeFileSync(path.join(dir, 'cfg.yaml'), [
      `store: {path: "${dir}/store"}`,
      `targets: [{inspector: "127.0.0.1:${fake.port}", worker: big}]`,
      'discovery: {interval: 1s}',
      'sampling: {cpu: {duration: 1s, period: 2s, interval: 1ms, jitter: 0}, budget: {pause_share: 100%}}',
    ].join('\n'));
    d = spawn(isoprofd, ['--config', path.join(dir, 'cfg.yaml')], { stdio: ['ignore', 'ignore', 'pipe'] });
    const exited = new Promise((r) => d.on('exit', r));
    let log = '';
    d.stderr.on('data', (c) => { log += c; if (log.length > 4 << 20) log = log.slice(-(1 << 20)); });
    const count = (re) => (log.match(re) || []).length;
    const t0 = Date.now();
    let hwmAttached = 0;
    while (count(/msg="window stored"/g) < windows && Date.now() - t0 < timeoutMs && d.exitCode === null) {
      // Attached but no window stored yet: the level the windows start from.
      if (!hwmAttached && /msg="target attached"/.test(log) && count(/msg="window stored"/g) === 0) hwmAttached = hwmKiB(d.pid);
      await sleep(50);
    }
    if (d.exitCode !== null) throw new Error(`isoprofd exited: ${log.slice(-2000)}`);
    const hwm = hwmKiB(d.pid);
    d.kill('SIGINT');
    await exited;
    d = null;
    const bytes = [...log.matchAll(/msg="window stored".* bytes=(\d+)/g)].map((m) => parseInt(m[1], 10));
    const r = spawnSync(isoprof, ['store', 'check', '--store', `${dir}/store`], { encoding: 'utf8' });
    return {
      stored: bytes.length, stored_bytes: bytes.length ? bytes[bytes.length - 1] : 0,
      hwm_attached_kib: hwmAttached, hwm_kib: hwm, store_check: r.status === 0 ? 'ok' : (r.stderr || '').trim(),
    };
  } finally {
    if (d) d.kill('SIGKILL');
    await fake.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// bench_convert's profiles of the given sizes, parsed: [{mb, bytes, profile}].
function convertProfiles(build, sizes) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'isoprof-bigprof-in-'));
  try {
    const exe = [path.join(build, 'tests', 'bench', 'bench_convert'), path.join(build, 'tests', 'bench_convert')].find((p) => fs.existsSync(p));
    if (!exe) throw new Error(`bench_convert not found under ${build}/tests: build first`);
    const w = spawnSync(exe, ['--write', dir, ...sizes.map(String)], { encoding: 'utf8' });
    if (w.status !== 0) throw new Error(`bench_convert --write: ${w.stderr}`);
    return w.stdout.trim().split('\n').map((l, i) => {
      const [file, bytes] = l.split(' ');
      const reply = JSON.parse(fs.readFileSync(file, 'utf8'));
      return { mb: sizes[i], bytes: +bytes, profile: reply.result.profile };
    });
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

module.exports = { daemonPeak };

if (require.main === module) {
  const arg = (name, def) => {
    const i = process.argv.indexOf('--' + name);
    return i > 0 ? process.argv[i + 1] : def;
  };
  const root = path.resolve(__dirname, '..', '..');
  const build = path.resolve(arg('build', path.join(root, 'build')));
  const sizes = arg('sizes', '1,20').split(',').map(Number);
  const nwin = parseInt(arg('windows', '3'), 10);
  (async () => {
    const rows = [['profile_MB', 'windows_stored', 'stored_KB', 'VmHWM_attached_MiB', 'VmHWM_MiB', 'store_check']];
    for (const inp of convertProfiles(build, sizes)) {
      const r = await daemonPeak({
        isoprofd: path.join(build, 'agent', 'isoprofd'), isoprof: path.join(build, 'agent', 'isoprof'),
        profile: inp.profile, windows: nwin,
      });
      rows.push([(inp.bytes / 1e6).toFixed(1), r.stored, (r.stored_bytes / 1e3).toFixed(0),
        (r.hwm_attached_kib / 1024).toFixed(1), (r.hwm_kib / 1024).toFixed(1), r.store_check]);
    }
    const w = rows[0].map((_, i) => Math.max(...rows.map((r) => String(r[i]).length)));
    for (const r of rows) console.log(r.map((c, i) => String(c).padEnd(w[i])).join('  ').trimEnd());
    process.exit(0);
  })().catch((e) => { console.error(e); process.exit(1); });
}
