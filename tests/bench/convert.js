// Section "convert" of tests/bench/bench.js: V8 CPU profile JSON (a CDP
// Profiler.stop reply) to a stored window, MB/s of input and peak RSS, for
// ~1 MB and ~20 MB profiles, with a JavaScript conversion of the same bytes
// through pprof-format (npm) as the reference point.
//
// bench_convert --write makes the synthetic profiles once; then every
// repetition runs, for each size, one C child (bench_convert --file) and
// one Node child (convert_ref.js --file) on the identical file, the order
// alternating between repetitions so neither side always runs first on a
// warm cache. Each child converts the file 1 + iters times in one process:
// the first conversion warms caches, allocator and JIT and is kept apart;
// the child's figure is the median of the others. Across repetitions the
// section reports the median and the range of the per-child figures.
//
// Stages. C: pprof_from_cpu_json (JSON -> pprof bytes), then the zstd frame
// the store writes (level 3 + checksum, libzstd called directly with the
// store's parameters); "stored" is their sum. The upload gzip (pprof_gzip)
// is timed too. JS: JSON.parse, building the pprof-format Profile, encode
// ("encode" = the three), then zlib.gzipSync at the default level (what a
// JS agent uploads). Peak RSS is each child's ru_maxrss (maxRSS in Node),
// reported whole and less the level after the input was read (the
// conversion's own growth).
//
// Fairness: in the first repetition both children write their pprof; the
// two are decoded here and compared on total samples, distinct stacks,
// locations, functions and a digest of every stack (function names, files,
// lines, columns) with its values. The section says whether they agree.
//
// Instruction counts (full mode, or --callgrind 1): valgrind's callgrind on
// the C conversion of the 1 MB profile, collecting only inside
// pprof_from_cpu_json and then only inside ZSTD_compress2. Unlike the MB/s
// the count does not depend on what else the machine runs; it moves by
// ~0.01 % with the environment (the pprof builder seeds its hashes from an
// address), so only larger changes mean something.
//
// The daemon (full mode, or --convert-daemon 1): isoprofd against a fake
// inspector that answers every Profiler.stop with the same profile
// (bench_bigprofile.js daemonPeak), its VmHWM once attached and after three
// windows: the receive buffer, conversion and store together, once per size.
//
// Options (each takes a value): --convert-sizes 1,20  --convert-reps N
// (default 7, quick 2)  --callgrind 1|0  --convert-daemon 1|0 (default: on in
// full mode, off in quick mode).
'use strict';
const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const common = require('./common');
const { daemonPeak } = require('./bench_bigprofile');

const MB = 1e6;
const MIB = 1024; // KiB per MiB

function benchConvertPath(bin) {
  // CMake builds it from tests/CMakeLists.txt (convert.cmake), so it lands in
  // build/tests/, not build/tests/bench/ where bin.bench() looks.
  for (const p of [bin.bench('bench_convert'), path.join(bin.build, 'tests', 'bench_convert')]) {
    if (fs.existsSync(p)) return p;
  }
  throw new Error(`bench_convert not found under ${bin.build}/tests: build it (cmake --build ${bin.build} --target bench_convert)`);
}

async function runChild(cmd, args, what) {
  const c = common.start(cmd, args);
  const r = await c.exited;
  if (r.code !== 0) throw new Error(`${what} failed (${r.code ?? r.signal}): ${c.err.slice(-2000)}`);
  const line = c.out.trim().split('\n').pop();
  try {
    return JSON.parse(line);
  } catch (e) {
    throw new Error(`${what} printed no result: ${c.out.slice(-500)} ${c.err.slice(-500)}`);
  }
}

// The per-iteration sums of the named stages, less the warm-up iteration.
function warm(r, stages) {
  const n = r[stages[0]].length;
  const out = [];
  for (let i = n > 1 ? 1 : 0; i < n; i++) out.push(stages.reduce((s, k) => s + r[k][i], 0));
  return out;
}

// One C child: per-stage median seconds of its warm iterations, RSS in KiB.
function cFigures(r) {
  return {
    pprof_s: common.median(warm(r, ['pprof_s'])),
    stored_s: common.median(warm(r, ['pprof_s', 'zstd_s'])),
    gzip_s: common.median(warm(r, ['pprof_s', 'gzip_s'])),
    first_stored_s: r.pprof_s[0] + r.zstd_s[0],
    rss_peak: r.rss_peak_kib, rss_conv: r.rss_peak_kib - r.rss_input_kib, rss_start: r.rss_start_kib,
  };
}
function jsFigures(r) {
  return {
    parse_s: common.median(warm(r, ['parse_s'])),
    encode_s: common.median(warm(r, ['parse_s', 'build_s', 'encode_s'])),
    gzip_s: common.median(warm(r, ['parse_s', 'build_s', 'encode_s', 'gzip_s'])),
    first_gzip_s: r.parse_s[0] + r.build_s[0] + r.encode_s[0] + r.gzip_s[0],
    rss_peak: r.rss_peak_kib, rss_conv: r.rss_peak_kib - r.rss_input_kib, rss_start: r.rss_start_kib,
  };
}

// A decoded pprof's content, independent of id numbering and table order.
function digest(pf, file) {
  const p = pf.Profile.decode(fs.readFileSync(file));
  const s = p.stringTable.strings;
  const fns = new Map(p.function.map((f) => [Number(f.id), `${s[Number(f.name)]}|${s[Number(f.filename)]}|${f.startLine}`]));
  const locs = new Map(p.location.map((l) => [Number(l.id), l.line.map((x) => `${fns.get(Number(x.functionId))}:${x.line}:${x.column}`).join('/')]));
  const keys = [];
  let total = 0;
  for (const sm of p.sample) {
    keys.push(crypto.createHash('sha1').update(sm.locationId.map((id) => locs.get(Number(id))).join(';') + '=' + sm.value.join(',')).digest('base64'));
    total += Number(sm.value[0]);
  }
  keys.sort();
  const h = crypto.createHash('sha256');
  for (const k of keys) h.update(k);
  const vt = (v) => `${s[Number(v.type)]}/${s[Number(v.unit)]}`;
  return {
    samples: total, stacks: p.sample.length, locations: p.location.length, functions: p.function.length,
    types: p.sampleType.map(vt).join(','), period: `${p.periodType ? vt(p.periodType) : ''} ${p.period}`,
    time_nanos: String(p.timeNanos), duration_nanos: String(p.durationNanos),
    stacks_sha256: h.digest('hex').slice(0, 16),
  };
}

// Instructions executed inside fn for one conversion of file.
function callgrind(exe, file, fn, dir) {
  const out = path.join(dir, `callgrind.${fn}`);
  const r = spawnSync('valgrind', ['--tool=callgrind', `--callgrind-out-file=${out}`, `--toggle-collect=${fn}`,
    exe, '--file', file, '--iters', '1'], { encoding: 'utf8', timeout: 300000 });
  if (r.error) throw r.error;
  if (r.status !== 0) throw new Error(`callgrind ${fn}: ${r.stderr.slice(-1000)}`);
  const m = /^totals:\s+(\d+)/m.exec(fs.readFileSync(out, 'utf8')) || /^summary:\s+(\d+)/m.exec(fs.readFileSync(out, 'utf8'));
  if (!m) throw new Error(`callgrind ${fn}: no totals in ${out}`);
  return parseInt(m[1], 10);
}

const mbs = (bytes, s) => bytes / MB / s;
// "105 [98-110]" of a list of per-child values.
function spread(xs, d = 0) {
  const f = (x) => x.toFixed(d);
  return `${f(common.median(xs))} [${f(Math.min(...xs))}-${f(Math.max(...xs))}]`;
}

module.exports = {
  name: 'convert',
  title: 'Conversion: CDP JSON -> stored window, against pprof-format (JS)',

  async run(ctx) {
    const { bin, quick, opt, log } = ctx;
    const exe = benchConvertPath(bin);
    const modules = common.npmModules();
    const pf = require(path.join(modules, 'pprof-format'));
    const ref = path.join(__dirname, 'convert_ref.js');
    const sizes = String(opt('convert-sizes', '1,20')).split(',').map(Number).filter((x) => x > 0);
    const reps = parseInt(opt('convert-reps', quick ? '2' : '7'), 10);
    // Warm conversions per child: enough for a stable median within the
    // 4-minute budget (a 20 MB JS conversion takes about half a second).
    const itersFor = (bytes) => (bytes < 4 * MB ? (quick ? 3 : 10) : (quick ? 1 : 3));
    const cgOpt = opt('callgrind', undefined);
    // "--callgrind 1" / "--callgrind 0" force it on or off; default: full mode only.
    const flag = (v) => (v == null ? !quick : v !== 'false' && v !== '0' && v !== 'no');
    const doCallgrind = flag(cgOpt);
    const doDaemon = flag(opt('convert-daemon', undefined));
    const dir = common.tmpdir('convert');
    const t0 = Date.now();

    log(`writing synthetic profiles of ${sizes.join(', ')} MB`);
    const w = spawnSync(exe, ['--write', dir, ...sizes.map(String)], { encoding: 'utf8' });
    if (w.status !== 0) throw new Error(`bench_convert --write: ${w.stderr}`);
    const inputs = w.stdout.trim().split('\n').map((l, i) => {
      const [file, bytes, nodes, samples] = l.split(' ');
      return { mb: sizes[i], file, bytes: +bytes, nodes: +nodes, samples: +samples };
    });

    const runs = inputs.map(() => ({ c: [], js: [] }));
    for (let rep = 0; rep < reps; rep++) {
      for (const [k, inp] of inputs.entries()) {
        const iters = String(itersFor(inp.bytes) + 1);
        const outC = rep === 0 ? ['--out', path.join(dir, `c-${inp.mb}.pb`)] : [];
        const outJ = rep === 0 ? ['--out', path.join(dir, `js-${inp.mb}.pb`)] : [];
        const c = () => runChild(exe, ['--file', inp.file, '--iters', iters, ...outC], 'bench_convert --file');
        const j = () => runChild(process.execPath, [ref, '--file', inp.file, '--iters', iters, '--modules', modules, ...outJ], 'convert_ref.js');
        log(`rep ${rep + 1}/${reps}, ${inp.mb} MB`);
        if (rep % 2 === 0) {
          runs[k].c.push(await c());
          runs[k].js.push(await j());
        } else {
          runs[k].js.push(await j());
          runs[k].c.push(await c());
        }
      }
    }

    // Content agreement, from the first repetition's outputs.
    const agree = inputs.map((inp) => {
      const c = digest(pf, path.join(dir, `c-${inp.mb}.pb`));
      const js = digest(pf, path.join(dir, `js-${inp.mb}.pb`));
      const diff = Object.keys(c).filter((k) => c[k] !== js[k]);
      return { c, js, same: diff.length === 0, differs_in: diff };
    });

    let cg = null;
    if (doCallgrind) {
      const small = inputs.reduce((a, b) => (Math.abs(a.mb - 1) <= Math.abs(b.mb - 1) ? a : b));
      log(`callgrind on the ${small.mb} MB profile`);
      const pprofIr = callgrind(exe, small.file, 'pprof_from_cpu_json', dir);
      const zstdIr = callgrind(exe, small.file, 'ZSTD_compress2', dir);
      cg = { input_mb: small.mb, input_bytes: small.bytes, pprof_ir: pprofIr, zstd_ir: zstdIr,
        total_ir: pprofIr + zstdIr, ir_per_byte: (pprofIr + zstdIr) / small.bytes,
        valgrind: (spawnSync('valgrind', ['--version'], { encoding: 'utf8' }).stdout || '').trim() };
    }

    const daemon = [];
    if (doDaemon) {
      for (const inp of inputs) {
        log(`isoprofd on the ${inp.mb} MB profile`);
        const profile = JSON.parse(fs.readFileSync(inp.file, 'utf8')).result.profile;
        daemon.push({ mb: inp.mb, ...(await daemonPeak({ isoprofd: bin.isoprofd, isoprof: bin.isoprof, profile, windows: 3 })) });
      }
    }

    // Tables.
    const detail = [];
    const rows = [];
    const label = (inp) => `${inp.mb} MB (${(inp.bytes / MB).toFixed(1)})`;
    const perSize = inputs.map((inp, k) => {
      const cf = runs[k].c.map(cFigures);
      const jf = runs[k].js.map(jsFigures);
      const c0 = runs[k].c[0], j0 = runs[k].js[0];
      const rate = (fs_, key) => fs_.map((f) => mbs(inp.bytes, f[key]));
      const mib = (fs_, key) => fs_.map((f) => f[key] / MIB);
      const lines = [
        ['C', 'pprof_from_cpu_json', rate(cf, 'pprof_s'), c0.pprof_bytes, mib(cf, 'rss_peak'), mib(cf, 'rss_conv')],
        ['C', '+ zstd 3 (stored)', rate(cf, 'stored_s'), c0.stored_bytes, null, null],
        ['C', '+ gzip 6 (upload)', rate(cf, 'gzip_s'), c0.gzip_bytes, null, null],
        ['JS', 'JSON.parse', rate(jf, 'parse_s'), null, mib(jf, 'rss_peak'), mib(jf, 'rss_conv')],
        ['JS', '+ Profile + encode', rate(jf, 'encode_s'), j0.pprof_bytes, null, null],
        ['JS', '+ gzip 6 (upload)', rate(jf, 'gzip_s'), j0.gzip_bytes, null, null],
      ];
      for (const [side, stage, r, bytes, peak, conv] of lines) {
        detail.push([label(inp), side, stage, spread(r, 1), bytes === null ? '' : (bytes / MB).toFixed(3),
          peak ? spread(peak, 1) : '', conv ? spread(conv, 1) : '']);
      }
      const cStored = common.median(rate(cf, 'stored_s'));
      const jGzip = common.median(rate(jf, 'gzip_s'));
      const jEnc = common.median(rate(jf, 'encode_s'));
      const cPprof = common.median(rate(cf, 'pprof_s'));
      const cPeak = common.median(mib(cf, 'rss_peak'));
      const jPeak = common.median(mib(jf, 'rss_peak'));
      const a = agree[k];
      rows.push([`convert ${label(inp)} CPU profile -> stored, median of ${reps}`,
        `C ${cStored.toFixed(0)} MB/s, ${cPeak.toFixed(1)} MiB | pprof-format ${jGzip.toFixed(0)} MB/s, ` +
        `${jPeak.toFixed(0)} MiB (${(cStored / jGzip).toFixed(1)}x, 1/${(jPeak / cPeak).toFixed(0)} RSS; ` +
        `encode only ${(cPprof / jEnc).toFixed(1)}x)`,
        '', a.same ? 'same content' : `content differs: ${a.differs_in.join(',')}`]);
      return {
        mb: inp.mb, input_bytes: inp.bytes, nodes: inp.nodes, samples_entries: inp.samples,
        iters_per_child: itersFor(inp.bytes), warmup_per_child: 1,
        c: { figures: cf, raw: runs[k].c,
          median: { pprof_mbs: cPprof, stored_mbs: cStored, gzip_mbs: common.median(rate(cf, 'gzip_s')), rss_peak_mib: cPeak,
            rss_conv_mib: common.median(mib(cf, 'rss_conv')) } },
        js: { figures: jf, raw: runs[k].js,
          median: { parse_mbs: common.median(rate(jf, 'parse_s')), encode_mbs: jEnc, gzip_mbs: jGzip, rss_peak_mib: jPeak,
            rss_conv_mib: common.median(mib(jf, 'rss_conv')) } },
        ratio: { stored_vs_gzip: cStored / jGzip, pprof_vs_encode: cPprof / jEnc, rss_peak: jPeak / cPeak },
        content: a,
      };
    });
    for (const dm of daemon) {
      rows.push([`isoprofd peak RSS, ${dm.mb} MB profiles`, `VmHWM ${(dm.hwm_kib / MIB).toFixed(1)} MiB ` +
        `(${(dm.hwm_attached_kib / MIB).toFixed(1)} MiB attached), ${dm.stored} windows of ${(dm.stored_bytes / 1e3).toFixed(0)} KB`,
      '', dm.store_check === 'ok' ? 'store check ok' : `store check: ${dm.store_check}`]);
    }
    if (cg) {
      rows.push([`convert ${cg.input_mb} MB, instructions (callgrind)`,
        `${(cg.total_ir / 1e6).toFixed(1)} M Ir, ${cg.ir_per_byte.toFixed(1)} Ir/byte (pprof ${(cg.pprof_ir / 1e6).toFixed(1)} M + zstd ${(cg.zstd_ir / 1e6).toFixed(1)} M)`,
        '', '']);
    }

    process.stdout.write(`MB/s of input JSON and peak RSS (MiB): median [min-max] of ${reps} interleaved runs per side, ` +
      'each the median of one child\'s warm conversions; "conv" = peak less the level after reading the input.\n');
    common.printTable(['input', 'side', 'stage', 'MB/s', 'out MB', 'peak RSS', 'conv RSS'], detail);
    process.stdout.write('\nContent check (first run\'s pprof of each side, decoded):\n');
    common.printTable(['input', 'side', 'samples', 'stacks', 'locations', 'functions', 'stacks sha256'],
      perSize.flatMap((p, k) => ['c', 'js'].map((s) => [label(inputs[k]), s === 'c' ? 'C' : 'JS',
        p.content[s].samples, p.content[s].stacks, p.content[s].locations, p.content[s].functions, p.content[s].stacks_sha256])));
    if (cg) {
      process.stdout.write(`\ncallgrind, ${cg.input_mb} MB profile (${cg.input_bytes} bytes): pprof_from_cpu_json ${cg.pprof_ir} Ir, ` +
        `ZSTD_compress2 ${cg.zstd_ir} Ir, ${cg.ir_per_byte.toFixed(2)} Ir per input byte\n`);
    }

    const data = {
      reps, quick: !!quick, order: 'C then JS in even repetitions, JS then C in odd ones',
      sizes: perSize, callgrind: cg, daemon,
      versions: { node: process.version, pprof_format: common.npmVersion('pprof-format'), zstd: runs[0].c[0].zstd_version },
      seconds: (Date.now() - t0) / 1e3,
    };
    return { rows, data };
  },
};
