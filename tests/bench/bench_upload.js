#!/usr/bin/env node
// Measures the upload: profiles/s drained from a backlog to the loopback
// test ingest server, request bytes per profile (the body, and the request
// line and headers on top), and the daemon's RSS while it drains a large
// backlog.
//
//   node tests/bench/bench_upload.js [--build build] [--windows 3000]
//        [--batches 1,8,32] [--reps 3] [--backlog 100000] [--json out.json]
//   (--reps 0: the backlog measurement only)
//
// Throughput: for each repetition the batch sizes run interleaved
// (1 8 32 1 8 32 ...), each on a fresh store of --windows windows made by
// outbox_fill from the Node 20 CPU fixture, with a daemon that profiles
// nothing (targets: []) and uploads with max_delay 10ms. Reported: medians
// and ranges, and each batch size's throughput as a ratio to batch 1 from
// the same repetitions.
// Backlog: a store of --backlog windows; the daemon's VmRSS is sampled
// every 250 ms while it drains, next to an idle daemon on an empty store
// measured the same way in the same run.
// It measures; it asserts nothing. Every child is started here on
// 127.0.0.1 and stopped by its PID.
'use strict';
const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { startIngestServer } = require('../integration/ingest-server');

function arg(name, def) {
  const i = process.argv.indexOf('--' + name);
  return i > 0 ? process.argv[i + 1] : def;
}
const root = path.resolve(__dirname, '..', '..');
const build = path.resolve(arg('build', path.join(root, 'build')));
const WINDOWS = parseInt(arg('windows', '3000'), 10);
const BATCHES = arg('batches', '1,8,32').split(',').map(Number);
const REPS = parseInt(arg('reps', '3'), 10);
const BACKLOG = parseInt(arg('backlog', '100000'), 10);
const jsonOut = arg('json', null);
const ISOPROFD = path.join(build, 'agent', 'isoprofd');
const FILL = path.join(build, 'tests', 'bench', 'outbox_fill');
const FIXTURE = path.join(root, 'tests', 'fixtures', 'cdp', 'node20-cpu.json');

const children = new Set();
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'isoprof-bench-upload-'));
process.on('exit', () => {
  for (const c of children) { try { process.kill(c.pid, 'SIGKILL'); } catch (_) { /* gone */ } }
  fs.rmSync(tmp, { recursive: true, force: true });
});
process.on('SIGINT', () => process.exit(130));

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const median = (a) => { const s = [...a].sort((x, y) => x - y); return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };

function fill(dir, n) {
  const r = spawnSync(FILL, [dir, String(n), FIXTURE], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`outbox_fill failed: ${r.stderr}`);
  return Object.fromEntries(r.stdout.trim().split(' ').map((kv) => kv.split('=')));
}

// VmRSS counts the store's pages the daemon read through LMDB's map
// (RssFile: page cache, given back under pressure); RssAnon is the
// daemon's own memory, the figure that must not grow with the backlog.
function vm(pid) {
  const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const get = (k) => parseInt(new RegExp(`${k}:\\s+(\\d+)`).exec(s)[1], 10);
  return { rss: get('VmRSS'), hwm: get('VmHWM'), anon: get('RssAnon'), file: get('RssFile') };
}

function startDaemon(dir, store, srv, batch) {
  const cfg = path.join(dir, 'isoprof.yaml');
  fs.writeFileSync(cfg, [
    `store: {path: "${store}", max_size: 4GiB}`,
    'targets: []',
    'anomaly: {latency: {listen: ""}}',
    'log: {level: info}',
    srv ? `upload: {url: "${srv.url}", host: bench, batch: {max_profiles: ${batch}, max_bytes: 16MiB, max_delay: 10ms}, max_rate: 0B}` : '',
  ].join('\n') + '\n');
  const d = spawn(ISOPROFD, ['--config', cfg], { stdio: ['ignore', 'ignore', 'pipe'] });
  children.add(d);
  d.err = '';
  d.stderr.on('data', (x) => { d.err += x; if (d.err.length > 1 << 20) d.err = d.err.slice(-(1 << 19)); });
  d.done = new Promise((r) => d.on('exit', (code) => { children.delete(d); r(code); }));
  return d;
}

async function stopDaemon(d) {
  try { process.kill(d.pid, 'SIGTERM'); } catch (_) { /* gone */ }
  const t = setTimeout(() => { try { process.kill(d.pid, 'SIGKILL'); } catch (_) { /* gone */ } }, 10000);
  await d.done;
  clearTimeout(t);
}

async function drainOnce(batch, rep) {
  const dir = fs.mkdtempSync(path.join(tmp, `b${batch}-`));
  const store = path.join(dir, 'store');
  const f = fill(store, WINDOWS);
  const srv = await startIngestServer({ dir: path.join(dir, 'ingest'), record: false });
  const t0 = process.hrtime.bigint();
  const d = startDaemon(dir, store, srv, batch);
  let hwm = 0;
  while (srv.profiles.length < WINDOWS) {
    if (d.exitCode !== null) throw new Error(`isoprofd exited: ${d.err}`);
    hwm = Math.max(hwm, vm(d.pid).hwm);
    await sleep(20);
  }
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  const ok = srv.requests.filter((q) => q.status === 200);
  const bytes = ok.reduce((a, q) => a + q.bodyBytes, 0);
  // The request line and headers as sent ("Name: value\r\n" each).
  const head = ok.reduce((a, q) => a + 60 + Object.entries(q.headers).reduce((h, [k, v]) => h + k.length + String(v).length + 4, 0), 0);
  await stopDaemon(d);
  await srv.close();
  fs.rmSync(dir, { recursive: true, force: true });
  const r = { batch, rep, seconds: secs, profilesPerSec: WINDOWS / secs, requestBytesPerProfile: bytes / WINDOWS, headerBytesPerProfile: head / WINDOWS, pprofBytes: Number(f.pprof_bytes), hwmKiB: hwm };
  process.stderr.write(`  batch ${batch} rep ${rep}: ${r.profilesPerSec.toFixed(0)} profiles/s, ${r.requestBytesPerProfile.toFixed(0)} B/profile\n`);
  return r;
}

async function backlogRss() {
  const out = {};
  for (const which of ['idle', 'backlog']) {
    const dir = fs.mkdtempSync(path.join(tmp, `${which}-`));
    const store = path.join(dir, 'store');
    let srv = null;
    if (which === 'backlog') {
      const f = fill(store, BACKLOG);
      process.stderr.write(`  filled ${BACKLOG} windows in ${f.seconds} s\n`);
      srv = await startIngestServer({ dir: path.join(dir, 'ingest'), record: false });
    }
    const d = startDaemon(dir, store, srv, 32);
    const samples = [];
    const t0 = Date.now();
    const limit = which === 'idle' ? 5000 : 600000;
    while (Date.now() - t0 < limit && (!srv || srv.profiles.length < BACKLOG)) {
      if (d.exitCode !== null) throw new Error(`isoprofd exited: ${d.err}`);
      await sleep(250);
      samples.push(vm(d.pid));
    }
    const secs = (Date.now() - t0) / 1000;
    const hwm = vm(d.pid).hwm;
    const pick = (k) => samples.map((x) => x[k]);
    out[which] = {
      rssMedianKiB: median(pick('rss')), rssMaxKiB: Math.max(...pick('rss')), hwmKiB: hwm,
      anonMedianKiB: median(pick('anon')), anonMaxKiB: Math.max(...pick('anon')), fileMaxKiB: Math.max(...pick('file')),
      seconds: secs, uploaded: srv ? srv.profiles.length : 0,
    };
    await stopDaemon(d);
    if (srv) await srv.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
  return out;
}

(async () => {
  for (const f of [ISOPROFD, FILL]) if (!fs.existsSync(f)) throw new Error(`${f} not found: build the tree first`);
  const runs = [];
  if (REPS > 0) process.stderr.write(`throughput: ${WINDOWS} windows, batches ${BATCHES.join(',')}, ${REPS} interleaved repetitions\n`);
  for (let rep = 0; rep < REPS; rep++) for (const b of BATCHES) runs.push(await drainOnce(b, rep));
  const base = BATCHES[0];
  const rows = REPS === 0 ? [] : BATCHES.map((b) => {
    const rs = runs.filter((r) => r.batch === b);
    const ratios = rs.map((r) => r.profilesPerSec / runs.find((x) => x.batch === base && x.rep === r.rep).profilesPerSec);
    return {
      batch: b,
      profilesPerSec: median(rs.map((r) => r.profilesPerSec)),
      min: Math.min(...rs.map((r) => r.profilesPerSec)),
      max: Math.max(...rs.map((r) => r.profilesPerSec)),
      ratio: median(ratios),
      requestBytesPerProfile: median(rs.map((r) => r.requestBytesPerProfile)),
      headerBytesPerProfile: median(rs.map((r) => r.headerBytesPerProfile)),
      pprofBytes: rs[0].pprofBytes,
      hwmKiB: Math.max(...rs.map((r) => r.hwmKiB)),
    };
  });
  process.stderr.write(`backlog RSS: ${BACKLOG} windows against an idle daemon\n`);
  const rss = await backlogRss();
  if (rows.length) console.log(`\nupload throughput to the loopback ingest server (${WINDOWS} windows, ${os.cpus().length} CPUs, medians of ${REPS})`);
  if (rows.length) console.log('batch  profiles/s (range)        x batch ' + base + '  body B/profile  +headers  pprof B  peak RSS');
  for (const r of rows) {
    console.log(`${String(r.batch).padStart(5)}  ${r.profilesPerSec.toFixed(0).padStart(10)} (${r.min.toFixed(0)}-${r.max.toFixed(0)})`.padEnd(35) +
      `${r.ratio.toFixed(2).padStart(7)}  ${r.requestBytesPerProfile.toFixed(0).padStart(14)}  ${r.headerBytesPerProfile.toFixed(0).padStart(8)}  ${String(r.pprofBytes).padStart(7)}  ${(r.hwmKiB / 1024).toFixed(1)} MiB`);
  }
  console.log(`\ndaemon RSS draining a ${BACKLOG}-window backlog (batch 32) vs idle on an empty store`);
  for (const [k, v] of Object.entries(rss)) {
    const mib = (x) => `${(x / 1024).toFixed(1)} MiB`;
    console.log(`${k.padEnd(8)} RssAnon median ${mib(v.anonMedianKiB)}, max ${mib(v.anonMaxKiB)}; VmRSS median ${mib(v.rssMedianKiB)}, max ${mib(v.rssMaxKiB)} (of which store pages read through the map, RssFile, up to ${mib(v.fileMaxKiB)}); VmHWM ${mib(v.hwmKiB)}` +
      (v.uploaded ? `, ${v.uploaded} uploaded in ${v.seconds.toFixed(1)} s (${(v.uploaded / v.seconds).toFixed(0)}/s)` : ''));
  }
  if (jsonOut) fs.writeFileSync(jsonOut, JSON.stringify({ rows, runs, rss }, null, 2));
})().catch((e) => { console.error(e); process.exit(1); });
