#!/usr/bin/env node
// What source maps cost the real daemon in memory: isoprofd profiling a
// Node process that runs a minified bundle whose linked map is ~20 MB,
// against the same bundle with its map removed, side by side.
//
//   node tests/bench/bench_srcmap.js [--build DIR] [--map-mb 20] [--seconds 30]
//        [--rounds 2] [--small-budgets 8MiB,4MiB] [--interval 1ms] [--json FILE]
//
// The bundle and its map come from `bench_srcmap --write` (tests/bench/
// bench_srcmap.c): one line of ~31,000 small functions and a hot one,
// HOT (original name checksumHot in src/core/checksum.ts), large enough
// (a loop of ~27 branches) that V8 never inlines it; the script spends
// 3 ms of every 10 in HOT and in calls to the small functions through a
// table. The map has names, ~1,500 sources and sourcesContent; parsed,
// it holds ~6 MiB (srcmap_bytes).
//
// Each phase is a fresh daemon and a fresh target (node --inspect on
// 127.0.0.1), CPU windows of 1 s every 1.5 s for --seconds, heap windows
// out of the way (one a day). The phases alternate map / no map --rounds
// times (ABAB...), then run the map under each of --small-budgets
// (source_maps_cache). For each: the daemon's VmHWM and VmRSS (from
// /proc/PID/status, VmRSS sampled every second), its CPU, the windows it
// stored, and its /status source_maps (maps, bytes against budget, loads,
// hits, evictions, frames mapped and unmapped, refusals); and the stored
// profile's top functions, which name checksumHot only when the map was
// used. It measures; it asserts nothing. Every process it starts is
// stopped by PID, every temp dir removed (common.js).
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const common = require('./common');

const HELP = `usage: node tests/bench/bench_srcmap.js [options]

  --build DIR           the build tree (DIR/agent/isoprofd, DIR/tests/bench/bench_srcmap; default build)
  --map-mb N            the map file's size (default 20)
  --seconds S           each phase's measured run (default 30)
  --rounds N            map / no-map pairs, interleaved (default 2)
  --small-budgets LIST  source_maps_cache values for the last phases (default 8MiB,4MiB)
  --interval D          sampling.cpu.interval (default 1ms)
  --json FILE           write the figures
`;

const MIB = 1024;

function status(bin, sock) {
  const r = spawnSync(bin.isoprof, ['status', '--socket', sock, '--json'], { encoding: 'utf8', timeout: 10000 });
  if (r.status !== 0) return null;
  try { return JSON.parse(r.stdout); } catch (_) { return null; }
}

const ready = (st) => !!(st && Array.isArray(st.targets) && st.targets.some((t) => t.state === 'ready'));

// One phase: a fresh target running script, a fresh daemon with the given
// source_maps_cache, measured for seconds.
async function phase(bin, { config, script, budget, seconds, interval, log }) {
  const dir = common.tmpdir('srcmap-phase');
  const store = path.join(dir, 'store');
  const sock = path.join(dir, 'control.sock');
  const target = await common.startNode(script);
  const cfg = [
    `store: {path: ${JSON.stringify(store)}}`,
    'targets:',
    `  - {inspector: "127.0.0.1:${target.port}", worker: "bundle"}`,
    `sampling: {cpu: {duration: 1s, period: 1500ms, interval: ${interval}}, heap: {period: 24h}, budget: {pause_share: 100%}}`,
    `source_maps_cache: ${budget}`,
    `control: {socket: ${JSON.stringify(sock)}}`,
    'anomaly: {latency: {listen: ""}}',
    'log: {level: warn}',
    '',
  ].join('\n');
  fs.writeFileSync(path.join(dir, 'isoprof.yaml'), cfg);
  const d = common.start(bin.isoprofd, ['--config', path.join(dir, 'isoprof.yaml')], { stdio: ['ignore', 'ignore', 'pipe'] });
  await common.waitFor(() => {
    if (d.exitCode !== null) throw new Error(`isoprofd exited: ${d.err.slice(-1500)}`);
    return ready(status(bin, sock));
  }, 30000, 'isoprofd to attach the target');
  const atAttach = common.procMem(d.pid);
  log(`${config}, source_maps_cache ${budget}: attached; measuring ${seconds} s`);
  const cpu0 = common.procCpu(d.pid);
  const t0 = Date.now();
  const rss = [];
  const anon = [];
  while (Date.now() - t0 < seconds * 1000) {
    await common.sleep(1000);
    const m = common.procMem(d.pid);
    rss.push(m.rss);
    anon.push(m.anon);
  }
  const wall = (Date.now() - t0) / 1000;
  const cpu = common.procCpu(d.pid) - cpu0;
  const mem = common.procMem(d.pid);
  const st = status(bin, sock);
  await common.stop(d, 'SIGTERM', 15000);
  await common.stop(target, 'SIGKILL');
  const w = spawnSync(bin.isoprof, ['windows', '--store', store, '--json'], { encoding: 'utf8' });
  const wins = (w.stdout || '').split('\n').filter(Boolean).map((l) => { try { return JSON.parse(l); } catch (_) { return {}; } })
    .filter((x) => x.type === 'cpu');
  const top = spawnSync(bin.isoprof, ['top', '--store', store, '--type', 'cpu', '-n', '6'], { encoding: 'utf8' });
  fs.rmSync(dir, { recursive: true, force: true });
  const sm = (st && st.source_maps) || {};
  return {
    config, budget, seconds: +wall.toFixed(1),
    windows: wins.length,
    frames_mapped_windows: wins.reduce((a, x) => a + (x.frames_mapped || 0), 0),
    frames_unmapped_windows: wins.reduce((a, x) => a + (x.frames_unmapped || 0), 0),
    vmhwm_kib: mem.hwm, vmrss_end_kib: mem.rss, rss_anon_end_kib: mem.anon,
    vmrss_median_kib: common.median(rss), vmrss_max_kib: Math.max(...rss), rss_anon_median_kib: common.median(anon),
    vmhwm_at_attach_kib: atAttach.hwm, vmrss_at_attach_kib: atAttach.rss,
    cpu_s: +cpu.toFixed(2),
    source_maps: sm,
    top: (top.stdout || '').split('\n').filter(Boolean).slice(0, 8),
    checksumHot_in_top: /checksumHot/.test(top.stdout || ''),
    daemon_warnings: d.err.split('\n').filter(Boolean).slice(-10),
  };
}

async function main() {
  if (process.argv.includes('-h') || process.argv.includes('--help')) {
    process.stdout.write(HELP);
    return 0;
  }
  const arg = common.arg;
  const bin = common.binaries(arg('build'));
  const mapMb = Number(arg('map-mb', 20));
  const seconds = Number(arg('seconds', 30));
  const rounds = Number(arg('rounds', 2));
  const small = String(arg('small-budgets', '8MiB,4MiB')).split(',').map((s) => s.trim()).filter(Boolean);
  const interval = arg('interval', '1ms');
  if (!(mapMb > 0 && seconds >= 5 && rounds >= 1)) {
    process.stderr.write(HELP);
    return 2;
  }
  const log = (m) => process.stderr.write(`${m}\n`);
  const gen = bin.bench('bench_srcmap');
  if (!fs.existsSync(gen)) throw new Error(`${gen} not found: build the tree first`);

  // The bundle with its map, and the same bundle alone (its comment names
  // a map that is not there).
  const dir = common.tmpdir('srcmap');
  const withMap = path.join(dir, 'map');
  const noMap = path.join(dir, 'nomap');
  fs.mkdirSync(withMap);
  fs.mkdirSync(noMap);
  const g = spawnSync(gen, ['--write', withMap, '--map-mb', String(mapMb)], { encoding: 'utf8' });
  if (g.status !== 0) throw new Error(`bench_srcmap --write: ${g.stderr}`);
  const info = JSON.parse(g.stdout);
  fs.copyFileSync(info.script, path.join(noMap, 'bundle.js'));
  log(`bundle ${(info.script_bytes / 1e6).toFixed(2)} MB, map ${(info.map_bytes / 1e6).toFixed(2)} MB ` +
    `(mappings ${(info.mappings_bytes / 1e6).toFixed(2)} MB, ${info.segments} segments, ${info.sources} sources, ${info.names} names)`);

  const plan = [];
  for (let r = 0; r < rounds; r++) {
    plan.push({ config: 'map', script: info.script, budget: '32MiB', round: r + 1 });
    plan.push({ config: 'no map', script: path.join(noMap, 'bundle.js'), budget: '32MiB', round: r + 1 });
  }
  for (const b of small) plan.push({ config: 'map', script: info.script, budget: b, round: '-' });
  const results = [];
  for (const p of plan) {
    const r = await phase(bin, { ...p, seconds, interval, log });
    r.round = p.round;
    results.push(r);
  }
  fs.rmSync(dir, { recursive: true, force: true });

  const fx = common.fx;
  const mib = (k) => fx(k / MIB, 1);
  console.log(`\nisoprofd, one Node target running a ${(info.script_bytes / 1e6).toFixed(1)} MB bundle; CPU windows 1 s every 1.5 s ` +
    `at ${interval} for ${seconds} s a phase; map ${(info.map_bytes / 1e6).toFixed(1)} MB (mappings ${(info.mappings_bytes / 1e6).toFixed(1)} MB)`);
  common.printTable(
    ['phase', 'cache budget', 'windows', 'VmHWM MiB', 'VmRSS med', 'VmRSS end', 'RssAnon end', 'maps', 'cache MiB', 'loads', 'hits',
      'evictions', 'too_big', 'frames mapped', 'unmapped', 'CPU s', 'checksumHot in top'],
    results.map((r) => {
      const sm = r.source_maps;
      return [`${r.config} (${r.round})`, r.budget, r.windows, mib(r.vmhwm_kib), mib(r.vmrss_median_kib), mib(r.vmrss_end_kib),
        mib(r.rss_anon_end_kib), sm.maps, fx((sm.bytes || 0) / 1048576, 2), sm.loads, sm.hits, sm.evictions,
        sm.refused ? sm.refused.too_big : '', sm.frames_mapped, sm.frames_unmapped, fx(r.cpu_s, 2), r.checksumHot_in_top ? 'yes' : 'no'];
    }));
  const hwm = (c) => results.filter((r) => r.config === c && r.budget === '32MiB').map((r) => r.vmhwm_kib);
  const rssMed = (c) => results.filter((r) => r.config === c && r.budget === '32MiB').map((r) => r.vmrss_median_kib);
  const cacheBytes = results.find((r) => r.config === 'map' && r.budget === '32MiB');
  const summary = {
    vmhwm_map_median_kib: common.median(hwm('map')),
    vmhwm_nomap_median_kib: common.median(hwm('no map')),
    vmrss_map_median_kib: common.median(rssMed('map')),
    vmrss_nomap_median_kib: common.median(rssMed('no map')),
    srcmap_bytes: cacheBytes ? cacheBytes.source_maps.bytes : null,
  };
  console.log(`\nmap - no map, medians over ${rounds} rounds: VmHWM +${mib(summary.vmhwm_map_median_kib - summary.vmhwm_nomap_median_kib)} MiB, ` +
    `VmRSS +${mib(summary.vmrss_map_median_kib - summary.vmrss_nomap_median_kib)} MiB; the parsed map holds ` +
    `${fx((summary.srcmap_bytes || 0) / 1048576, 2)} MiB (srcmap_bytes) of the 32 MiB budget`);
  const jf = arg('json');
  if (jf) fs.writeFileSync(jf, JSON.stringify({ map: info, interval, seconds, rounds, phases: results, summary }, null, 2));
  return 0;
}

main().then((c) => process.exit(c), (e) => { process.stderr.write(`${e.stack || e}\n`); process.exit(1); });
