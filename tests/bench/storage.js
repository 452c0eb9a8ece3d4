// Section 5 of the benchmark: the store. Windows/s inserted at the batch
// sizes the daemon's writer uses, query latency (one worker over 7 days,
// anomaly lookups) with 1M windows stored, and stored bytes per window
// against the same pprof gzip'd.
//
// The windows are real: isoprofd profiles six Node workloads (the
// integration workloads node-hot, node-light, node-leak, node-table, and
// two instances of a larger HTTP app written below) for ~45 s into a store
// of its own: CPU windows of 10 s at the default 10 ms interval, and heap
// windows. That store is the corpus (nothing is committed). Then
//   store_codec   sizes every corpus window as gzip (zlib level 6, gzip
//                 wrapper: what Go and Node agents upload), zstd 1/3/6/9/19,
//                 long mode, and zstd 3 with a per-worker dictionary
//                 (trained, or raw window bytes) built from the first 60 %
//                 of each worker's windows and scored on the rest; compress
//                 cost in us/window (wall, noisy) and, under callgrind,
//                 instructions/window (stable);
//   callgrind     instructions per window inside store_put, and the share
//                 spent compressing;
//   strace -c     fdatasync calls per commit;
//   bench_store   fills a store with N windows made from the corpus (50
//                 workers, 2 isolates each, 3 versions each rolled out over
//                 30 days, a heap window for every 6, an anomaly about
//                 every 500 windows recorded first and pinning the window
//                 taken for it), measures inserts at batch 1/16/64 on top
//                 of it, then one-thread query latencies (200 each).
// Options: --storage-windows N (default 1000000; quick 20000),
// --storage-capture SECONDS (45; quick 20), --storage-corpus DIR (reuse a
// store instead of capturing), --storage-callgrind 0|1 (1; quick 0).
// Full mode takes about 2.5 minutes on a 2-core VM.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');
const common = require('./common');

const WORKLOADS = path.join(common.ROOT, 'tests', 'integration', 'workloads');

// A "larger app": an HTTP API with a few routes (JSON, templating, hashing,
// gzip, URL parsing) driven by its own keep-alive client, so its profiles
// carry many more functions and modules than the micro workloads.
const APP_JS = `'use strict';
const http = require('node:http');
const crypto = require('node:crypto');
const zlib = require('node:zlib');
const { URL } = require('node:url');
const util = require('node:util');
const catalog = [];
for (let i = 0; i < 2000; i++) catalog.push({ sku: 'sku-' + i, name: 'Item ' + i, price: (i % 97) * 1.5, tags: ['a' + (i % 7), 'b' + (i % 11)] });
function renderItem(it) { return '<li class="item"><b>' + it.name + '</b> ' + util.format('%s EUR', it.price.toFixed(2)) + ' ' + it.tags.join(',') + '</li>'; }
function renderPage(items) { return '<html><body><ul>' + items.map(renderItem).join('') + '</ul></body></html>'; }
function search(q) { const re = new RegExp(q.replace(/[^a-z0-9]/gi, ''), 'i'); return catalog.filter((it) => re.test(it.name) || it.tags.some((t) => re.test(t))).slice(0, 50); }
function checkout(body) { const order = JSON.parse(body); let total = 0; for (const l of order.lines) total += catalog[l.i % catalog.length].price * l.q; const sig = crypto.createHash('sha256').update(JSON.stringify(order)).digest('hex'); return { total, sig }; }
const routes = {
  '/items': (u) => renderPage(catalog.slice(Number(u.searchParams.get('from') || 0), Number(u.searchParams.get('from') || 0) + 100)),
  '/search': (u) => JSON.stringify(search(u.searchParams.get('q') || 'a1')),
  '/report': () => zlib.gzipSync(JSON.stringify(catalog.slice(0, 300))),
  '/invoice': (u) => invoice(Number(u.searchParams.get('n') || 5)),
  '/token': () => token(),
  '/stats': () => stats(),
};
const money = new Intl.NumberFormat('de-DE', { style: 'currency', currency: 'EUR' });
function invoice(n) { const lines = []; for (let i = 0; i < n; i++) { const it = catalog[(i * 31) % catalog.length]; lines.push(it.sku.padEnd(12) + money.format(it.price * (i + 1))); } return Buffer.from(lines.join('\\n')).toString('base64'); }
const key = crypto.randomBytes(32);
function token() { const iv = crypto.randomBytes(16); const c = crypto.createCipheriv('aes-256-cbc', key, iv); return Buffer.concat([iv, c.update(JSON.stringify({ u: Math.random(), t: Date.now() })), c.final()]).toString('hex'); }
const seen = new Map();
function stats() { for (const it of catalog.slice(0, 200)) { for (const t of it.tags) seen.set(t, (seen.get(t) || 0) + 1); } return JSON.stringify([...seen.entries()].sort((a, b) => b[1] - a[1]).slice(0, 10)); }
const server = http.createServer((req, res) => {
  const u = new URL(req.url, 'http://localhost');
  let body = '';
  req.on('data', (d) => { body += d; });
  req.on('end', () => {
    if (u.pathname === '/checkout') { res.end(JSON.stringify(checkout(body))); return; }
    const h = routes[u.pathname];
    if (!h) { res.statusCode = 404; res.end(); return; }
    res.end(h(u));
  });
});
server.listen(0, '127.0.0.1', () => {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });
  const port = server.address().port;
  const paths = ['/items?from=100', '/search?q=item%201', '/report', '/invoice?n=20', '/items?from=900', '/token', '/search?q=b3', '/stats'];
  let n = 0;
  function one() {
    const post = n % 4 === 3;
    const p = post ? '/checkout' : paths[n % paths.length];
    n++;
    const req = http.request({ host: '127.0.0.1', port, path: p, method: post ? 'POST' : 'GET', agent }, (res) => { res.resume(); res.on('end', () => setTimeout(one, 4)); });
    req.on('error', () => setTimeout(one, 100));
    req.end(post ? JSON.stringify({ lines: [{ i: n, q: 2 }, { i: n * 7, q: 1 }] }) : undefined);
  }
  for (let i = 0; i < 3; i++) one();
});
`;

function run(cmd, args, log, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20, ...opts });
  if (r.error) throw r.error;
  if (r.status !== 0) throw new Error(`${path.basename(cmd)} ${args.join(' ')}: exit ${r.status}: ${(r.stderr || '').slice(-2000)}`);
  return r;
}

// Profile the workloads with isoprofd for `seconds`; returns the store dir.
async function capture(ctx, seconds, dir) {
  const trigger = path.join(dir, 'table-trigger');
  fs.writeFileSync(trigger, '');
  fs.writeFileSync(path.join(dir, 'app.js'), APP_JS);
  const targets = [
    ['node-hot', path.join(WORKLOADS, 'node-hot.js'), {}],
    ['node-light', path.join(WORKLOADS, 'node-light.js'), {}],
    ['node-leak', path.join(WORKLOADS, 'node-leak.js'), { LEAK_PER_TICK: '5' }],
    ['node-table', path.join(WORKLOADS, 'node-table.js'), { TABLE_TRIGGER: trigger, TABLE_ROWS: '100000' }],
    ['shop-api', path.join(dir, 'app.js'), {}],
    ['shop-api-eu', path.join(dir, 'app.js'), {}],
  ];
  const nodes = [];
  try {
    for (const [worker, script, env] of targets) {
      const c = await common.startNode(script, { env });
      nodes.push({ worker, c });
    }
    const dur = seconds >= 40 ? '10s' : '5s';
    const cfg = [
      `store: {path: "${dir}/store"}`,
      `control: {socket: "${dir}/ctl.sock"}`,
      'targets:',
      ...nodes.map((n) => `  - {inspector: "127.0.0.1:${n.c.port}", worker: "${n.worker}", version: "v1"}`),
      `sampling: {cpu: {duration: ${dur}, period: ${dur}, interval: 10ms, jitter: 0%, max_concurrent: 8}, heap: {period: ${seconds >= 40 ? '10s' : '5s'}}, budget: {pause_share: 100%}}`,
      'log: {level: warn}',
    ].join('\n');
    fs.writeFileSync(path.join(dir, 'cfg.yaml'), cfg);
    ctx.log(`storage: profiling ${nodes.length} Node workloads for ${seconds} s (CPU windows of ${dur} at 10 ms, heap windows)`);
    const d = common.start(ctx.bin.isoprofd, ['--config', path.join(dir, 'cfg.yaml')]);
    await common.sleep(seconds * 1000);
    for (const n of nodes) {
      if (n.c.exitCode !== null) throw new Error(`workload ${n.worker} exited early: ${n.c.err.slice(-1500)}`);
    }
    const r = await common.stop(d, 'SIGTERM', 10000);
    if (r.code !== 0) throw new Error(`isoprofd exited ${r.code}/${r.signal}: ${d.err.slice(-2000)}`);
  } finally {
    for (const n of nodes) await common.stop(n.c, 'SIGKILL');
  }
  return path.join(dir, 'store');
}

const KB = (b) => `${(b / 1024).toFixed(2)} KiB`;
const ms = (ns) => (ns < 1e6 ? `${(ns / 1e3).toFixed(0)} us` : `${(ns / 1e6).toFixed(2)} ms`);

async function runSection(ctx) {
  const quick = !!ctx.quick;
  const N = parseInt(ctx.opt('storage-windows', quick ? '20000' : '1000000'), 10);
  const seconds = parseInt(ctx.opt('storage-capture', quick ? '20' : '45'), 10);
  const useCallgrind = ctx.opt('storage-callgrind', quick ? '0' : '1') !== '0';
  const t0 = Date.now();
  const dir = common.tmpdir('storage');
  let corpus = ctx.opt('storage-corpus', '');
  if (!corpus) corpus = await capture(ctx, seconds, dir);

  // Codec comparison on the corpus.
  ctx.log('storage: sizing corpus windows (gzip, zstd levels, dictionaries)');
  const codec = JSON.parse(run(ctx.bin.bench('store_codec'), [corpus], ctx.log).stdout);
  if (useCallgrind) {
    ctx.log('storage: counting compress instructions under callgrind');
    const out = path.join(dir, 'callgrind.out');
    const r = spawnSync('valgrind', ['--tool=callgrind', `--callgrind-out-file=${out}`, ctx.bin.bench('store_codec'), '--reps', '1', corpus],
      { encoding: 'utf8', maxBuffer: 64 << 20 });
    if (r.status === 0) {
      const ann = spawnSync('callgrind_annotate', ['--inclusive=yes', '--threshold=100', out], { encoding: 'utf8', maxBuffer: 64 << 20 });
      for (const c of codec.codecs) {
        const m = new RegExp(`^\\s*([\\d,]+)\\s.*\\b${c.fn}\\b`, 'm').exec(ann.stdout || '');
        if (m) c.instr_per_window = parseInt(m[1].replace(/,/g, ''), 10) / codec.eval_windows;
      }
    } else {
      ctx.log(`storage: callgrind failed (${r.status}); instruction counts left out`);
    }
  }

  // Where store_put's instructions go: callgrind on a small store (the
  // per-window count barely depends on the store's size).
  let putCost = null;
  if (useCallgrind) {
    ctx.log('storage: counting store_put instructions under callgrind');
    const out = path.join(dir, 'callgrind.put');
    const n = 4096, extra = 300 + 8192;
    const r = spawnSync('valgrind', ['--tool=callgrind', `--callgrind-out-file=${out}`, '--toggle-collect=store_put', ctx.bin.bench('bench_store'),
      '--corpus', corpus, '--windows', String(n), '--batches', '1,64', '--queries', '0', '--budget-mib', '256', '--dir', path.join(dir, 'cg'), '--json'],
    { encoding: 'utf8', maxBuffer: 64 << 20 });
    if (r.status === 0) {
      const ann = spawnSync('callgrind_annotate', ['--inclusive=yes', '--threshold=100', out], { encoding: 'utf8', maxBuffer: 64 << 20 }).stdout || '';
      const get = (fn) => { const m = new RegExp(`^\\s*([\\d,]+)\\s.*[:?]${fn} `, 'm').exec(ann); return m ? parseInt(m[1].replace(/,/g, ''), 10) : NaN; };
      const total = get('store_put'), zstd = get('ZSTD_compress2'), txn = get('put_txn'), commit = get('mdb_txn_commit');
      putCost = { windows: n + extra, instr_per_window: total / (n + extra), compress_share: zstd / total, txn_share: txn / total, commit_share: commit / total };
    } else {
      ctx.log(`storage: callgrind of store_put failed (${r.status})`);
    }
  }

  // fsync counts per commit, from a small store (syscalls do not depend on size).
  let fsyncs = null;
  const st = spawnSync('strace', ['-f', '-c', '-e', 'trace=fsync,fdatasync,msync,pwrite64,pwritev,write', ctx.bin.bench('bench_store'),
    '--corpus', corpus, '--windows', '2048', '--batches', '', '--fill-batch', '64', '--queries', '0', '--dir', path.join(dir, 'st'), '--json'],
  { encoding: 'utf8', maxBuffer: 64 << 20 });
  if (st.status === 0) {
    fsyncs = {};
    for (const line of st.stderr.split('\n')) {
      const m = /^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$/.exec(line);
      if (m) fsyncs[m[2]] = parseInt(m[1], 10);
    }
    fsyncs.commits = Math.ceil(2048 / 64);
  }

  ctx.log(`storage: filling a store with ${N} windows from the corpus, then timing inserts and queries`);
  const bench = JSON.parse(run(ctx.bin.bench('bench_store'), ['--corpus', corpus, '--windows', String(N), '--dir', path.join(dir, 'main'), '--json'], ctx.log).stdout);
  const elapsed = (Date.now() - t0) / 1000;

  // --- tables ---
  const gz = codec.summary.gzip6_mean;
  console.log(`\nCorpus: ${codec.windows} real windows (${codec.cpu} CPU, ${codec.heap} heap) from ${codec.workers} workers; pprof mean ${KB(codec.summary.raw_mean)}, median ${KB(codec.summary.raw_median)}, max ${KB(codec.summary.raw_max)}`);
  common.printTable(['codec (mean bytes per window)', 'all', 'cpu', 'heap', 'vs gzip', 'us/window (noisy)', 'instr/window'],
    codec.codecs.map((c) => [c.name + (c.no_dict ? ` (${c.no_dict} of ${codec.eval_windows} windows had no dictionary: zstd 3)` : ''), c.mean.toFixed(0), c.mean_cpu.toFixed(0), c.mean_heap.toFixed(0), common.fx(c.mean / gz, 3),
      common.fx(c.us_per_window, 1), c.instr_per_window ? Math.round(c.instr_per_window).toLocaleString('en') : '-']));
  console.log(`\nRecord = ${codec.header_bytes} B header + runtime + frame; stored_size adds the keys (windows, by_time, ids). Dictionary rows: trained on the worker's first ${codec.dict_train_share * 100}% of windows, measured on the rest (held out); dictionary bytes not counted per window.`);
  const bb = bench.bytes;
  common.printTable(['stored bytes per window (store of ' + bench.windows + ')', 'bytes', 'vs gzip (' + bb.gzip6_mean.toFixed(0) + ' B)'], [
    ['zstd frame', bb.frame_mean.toFixed(0), common.fx(bb.frame_mean / bb.gzip6_mean)],
    ['record (header + frame)', bb.record_mean.toFixed(0), common.fx(bb.record_mean / bb.gzip6_mean)],
    ['stored_size (record + keys, the budget)', bb.stored_mean.toFixed(0), common.fx(bb.stored_mean / bb.gzip6_mean)],
    [`dictionaries (${bb.dicts}, one per worker/version), spread per window`, bb.dict_mean.toFixed(0), common.fx(bb.dict_mean / bb.gzip6_mean)],
    ['record + its share of the dictionaries', (bb.record_mean + bb.dict_mean).toFixed(0), common.fx((bb.record_mean + bb.dict_mean) / bb.gzip6_mean)],
    ['LMDB pages, all DBs', bb.pages_mean.toFixed(0), common.fx(bb.pages_mean / bb.gzip6_mean)],
  ]);
  console.log('');
  common.printTable(['insert', 'windows', 'batch', 'windows/s (noisy)', 'ms/commit p50', 'p99'],
    bench.inserts.map((i) => [i.what, i.windows, i.batch, i.rate.toFixed(0), common.fx(i.commit_p50_ns / 1e6, 2), common.fx(i.commit_p99_ns / 1e6, 2)]));
  if (putCost) console.log(`callgrind, store_put: ${Math.round(putCost.instr_per_window).toLocaleString('en')} instructions/window (batches 64 and 1), ${(100 * putCost.compress_share).toFixed(1)}% in ZSTD_compress2, ${(100 * putCost.txn_share).toFixed(1)}% in the write txn (of which commit ${(100 * putCost.commit_share).toFixed(1)}%)`);
  if (fsyncs) console.log(`strace -c, 2048 windows at batch 64 (${fsyncs.commits} commits): ${Object.entries(fsyncs).filter(([k]) => k !== 'commits').map(([k, v]) => `${k} ${v}`).join(', ')}`);
  console.log('');
  common.printTable(['query (one thread, store of ' + bench.windows + ')', 'runs', 'rows avg', 'p50', 'p90', 'p99', 'max'],
    bench.queries.map((q) => [q.what, q.runs, q.rows_avg.toFixed(1), ms(q.p50_ns), ms(q.p90_ns), ms(q.p99_ns), ms(q.max_ns)]));
  console.log(`\nstorage section: ${elapsed.toFixed(0)} s`);

  // --- summary rows ---
  const rows = [];
  const ins = bench.inserts.find((i) => i.batch === 64 && i.what === 'on full store') || bench.inserts[0];
  const goalIns = 5000;
  rows.push([`store_put windows/s, batch 64 (the writer's largest; ${bench.windows} stored)`, `${ins.rate.toFixed(0)}/s`, '>= 5,000/s',
    ins.rate >= goalIns ? 'met' : `not met: ${(ins.rate / goalIns).toFixed(2)}x of the goal`]);
  for (const b of [16, 1]) {
    const i = bench.inserts.find((x) => x.batch === b && x.what === 'on full store');
    if (i) rows.push([`store_put windows/s, batch ${b}${b === 1 ? ' (steady state: one window waiting)' : ''}`, `${i.rate.toFixed(0)}/s`, '', '']);
  }
  for (const q of bench.queries.filter((x) => x.goal)) {
    rows.push([`${q.what}, ${bench.windows} stored`, `p50 ${ms(q.p50_ns)}, p99 ${ms(q.p99_ns)}`, '< 10 ms',
      q.p99_ns < 10e6 ? 'met' : q.p50_ns < 10e6 ? `not met at p99 (${(q.p99_ns / 10e6).toFixed(2)}x; p50 met)` : `not met: p50 ${(q.p50_ns / 10e6).toFixed(2)}x`]);
  }
  const rec = bb.record_mean / bb.gzip6_mean;
  const best = codec.codecs.filter((c) => c.dict && !c.no_dict).sort((a, b) => a.mean - b.mean)[0];
  const z3 = codec.codecs.find((c) => c.fn === 'codec_zstd3');
  const dictRec = best ? (best.mean + codec.header_bytes) / gz : NaN;
  const recDict = (bb.record_mean + bb.dict_mean) / bb.gzip6_mean;
  rows.push(['stored bytes/window vs the pprof gzip\'d (record: header + zstd-3 frame, with the worker/version dictionary once it has 8 windows)', `${bb.record_mean.toFixed(0)} B = ${rec.toFixed(2)}x`, '<= 0.7x',
    rec <= 0.7 ? 'met' : `not met: ${(rec / 0.7).toFixed(2)}x the goal; zstd-3 frames without a dictionary are ${(z3.mean / gz).toFixed(2)}x gzip on these small windows and the header adds ${codec.header_bytes} B`]);
  rows.push(['same, counting the dictionaries spread over the windows', `${(bb.record_mean + bb.dict_mean).toFixed(0)} B = ${recDict.toFixed(2)}x`, '<= 0.7x', recDict <= 0.7 ? 'met' : 'not met']);
  if (best) {
    rows.push([`for reference: ${best.name} (codec table, held out)`, `${(best.mean + codec.header_bytes).toFixed(0)} B = ${dictRec.toFixed(2)}x`, '', '']);
  }
  rows.push(['LMDB pages per window (all DBs) vs gzip', `${bb.pages_mean.toFixed(0)} B = ${(bb.pages_mean / bb.gzip6_mean).toFixed(2)}x`, '', '']);
  return { rows, data: { params: { windows: N, capture_s: seconds, corpus_given: !!ctx.opt('storage-corpus', ''), elapsed_s: elapsed }, codec, bench, fsyncs, put_cost: putCost } };
}

module.exports = {
  name: 'storage',
  title: 'Storage: inserts/s, query latency with 1M windows, bytes per window',
  run: runSection,
  capture, // for reusing a corpus: capture(ctx, seconds, dir) -> store dir
};
