#!/usr/bin/env node
// The JavaScript reference point for the conversion benchmark: the same V8
// CPU profile JSON that bench_convert converts, turned into a pprof Profile
// with pprof-format (npm), the library JavaScript agents encode with, then
// encoded and gzipped (default level, what an agent uploads; the C side's
// upload gzip uses the same level).
//
// The Profile has the content pprof_from_cpu_json produces (agent/pprof/pprof.h),
// so that both sides do the same work and can be compared byte for byte of
// input: sample types samples/count and cpu/nanoseconds, period type
// cpu/nanoseconds; one Function per (url, name) whose start_line is the
// first line seen; one Location per (function, line, column), lines and
// columns 1-based (V8's -1 becomes 0); one Sample per distinct stack of
// locations (leaf first, the (root) node left out), valued [hits,
// hits * period]; file:// urls become percent-decoded paths and an empty
// name "(anonymous)". As in C, every samples[] entry must name a known node
// and timeDeltas must have the same length; nothing else reads them. Not
// reproduced: the 4096-byte cut of long names and the U+FFFD repair of
// invalid UTF-8 (the synthetic input has neither).
//
//   node tests/bench/convert_ref.js --file F [--iters N] [--out P]
//
// Prints one JSON object: each iteration's seconds per stage (parse, build,
// encode, gzip), output sizes, counts, and maxRSS (KiB) at start, after
// reading F (the input string held) and at the end. --out writes the last
// encoded Profile (not compressed) to P. Times start from the JSON text as
// a string, the form a WebSocket text message arrives in.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const zlib = require('node:zlib');
const { performance } = require('node:perf_hooks');

function arg(name, def) {
  const i = process.argv.indexOf('--' + name);
  return i > 0 ? process.argv[i + 1] : def;
}

const maxRss = () => process.resourceUsage().maxRSS; // KiB

function modulesDir() {
  return arg('modules') || require('./common').npmModules();
}

function fileUrlToPath(url) {
  if (!url.startsWith('file://')) return url;
  const s = url.slice(7);
  if (!s.includes('%')) return s;
  // Percent-decoded byte by byte, as pprof.c does: %XX becomes the byte XX.
  const b = Buffer.from(s, 'utf8');
  const out = Buffer.alloc(b.length);
  let o = 0;
  const hex = (c) => (c >= 48 && c <= 57 ? c - 48 : c >= 65 && c <= 70 ? c - 55 : c >= 97 && c <= 102 ? c - 87 : -1);
  for (let i = 0; i < b.length; i++) {
    let hi, lo;
    if (b[i] === 37 && i + 2 < b.length && (hi = hex(b[i + 1])) >= 0 && (lo = hex(b[i + 2])) >= 0) {
      out[o++] = (hi << 4) | lo;
      i += 2;
    } else {
      out[o++] = b[i];
    }
  }
  return out.subarray(0, o).toString('utf8');
}

// The parsed reply or bare profile -> a pprof-format Profile.
function buildProfile(pf, reply, periodNs) {
  const p = reply.result && reply.result.profile ? reply.result.profile : reply;
  if (!Array.isArray(p.nodes) || typeof p.startTime !== 'number' || typeof p.endTime !== 'number') {
    throw new Error('not a CPU profile');
  }
  const nodes = p.nodes;
  const n = nodes.length;
  const index = new Map();
  for (let i = 0; i < n; i++) {
    if (index.has(nodes[i].id)) throw new Error(`duplicate node id ${nodes[i].id}`);
    index.set(nodes[i].id, i);
  }
  const parent = new Int32Array(n).fill(-1);
  for (let i = 0; i < n; i++) {
    const kids = nodes[i].children;
    if (!kids) continue;
    for (const id of kids) {
      const k = index.get(id);
      if (k === undefined || parent[k] !== -1) throw new Error(`bad child ${id} of node ${nodes[i].id}`);
      parent[k] = i;
    }
  }
  const samples = p.samples || [];
  const deltas = p.timeDeltas || [];
  if (samples.length !== deltas.length) throw new Error('samples and timeDeltas differ in length');
  for (const id of samples) if (!index.has(id)) throw new Error(`sample names unknown node ${id}`);

  let root = -1;
  for (let i = 0; i < n; i++) {
    if (parent[i] === -1) {
      if (root !== -1) throw new Error('several roots');
      root = i;
    }
  }
  if (root === -1) throw new Error('no root');

  const st = new pf.StringTable();
  const anon = st.dedup('(anonymous)');
  const functions = [];
  const locations = [];
  const fnIds = new Map(); // "nameIdx,fileIdx" -> id
  const locIds = new Map(); // "fn,line,col" -> id
  // Stack trie: stack id -> parent stack id and location id; ids from 1,
  // 0 is the empty stack. Keyed by parent * 2^26 + location.
  const stParent = [0];
  const stLoc = [0];
  const stHits = [0];
  const trie = new Map();
  const nodeStack = new Int32Array(n);

  const locationOf = (cf) => {
    const name = cf.functionName ? st.dedup(cf.functionName) : anon;
    const file = st.dedup(fileUrlToPath(cf.url || ''));
    const line = cf.lineNumber >= 0 ? cf.lineNumber + 1 : 0;
    const col = cf.columnNumber >= 0 ? cf.columnNumber + 1 : 0;
    const fk = name * 4294967296 + file;
    let fn = fnIds.get(fk);
    if (fn === undefined) {
      fn = functions.length + 1;
      fnIds.set(fk, fn);
      functions.push(new pf.Function({ id: fn, name, filename: file, startLine: line }));
    }
    const lk = `${fn},${line},${col}`;
    let loc = locIds.get(lk);
    if (loc === undefined) {
      loc = locations.length + 1;
      locIds.set(lk, loc);
      locations.push(new pf.Location({ id: loc, line: [new pf.Line({ functionId: fn, line, column: col })] }));
    }
    return loc;
  };
  const stackOf = (par, loc) => {
    const k = par * 67108864 + loc;
    let s = trie.get(k);
    if (s === undefined) {
      s = stParent.length;
      trie.set(k, s);
      stParent.push(par);
      stLoc.push(loc);
      stHits.push(0);
    }
    return s;
  };

  // Parent before child, breadth first, as pprof.c walks the tree.
  const kidsOf = (i) => nodes[i].children || [];
  const queue = new Int32Array(n);
  let qh = 0, qt = 0;
  queue[qt++] = root;
  while (qh < qt) {
    const i = queue[qh++];
    const nd = nodes[i];
    const hits = nd.hitCount || 0;
    let s;
    if (i === root) {
      nodeStack[i] = 0;
      s = hits ? stackOf(0, locationOf(nd.callFrame)) : 0;
    } else {
      s = nodeStack[i] = stackOf(nodeStack[parent[i]], locationOf(nd.callFrame));
    }
    if (hits) stHits[s] += hits;
    for (const id of kidsOf(i)) queue[qt++] = index.get(id);
  }
  if (qt !== n) throw new Error('a cycle');

  const sample = [];
  let total = 0;
  for (let s = 1; s < stParent.length; s++) {
    const h = stHits[s];
    if (!h) continue;
    const ids = [];
    for (let t = s; t !== 0; t = stParent[t]) ids.push(stLoc[t]);
    sample.push(new pf.Sample({ locationId: ids, value: [h, h * periodNs] }));
    total += h;
  }
  const vt = (type, unit) => new pf.ValueType({ type: st.dedup(type), unit: st.dedup(unit) });
  const profile = new pf.Profile({
    sampleType: [vt('samples', 'count'), vt('cpu', 'nanoseconds')],
    sample,
    location: locations,
    function: functions,
    stringTable: st,
    timeNanos: p.startTime * 1000,
    durationNanos: (p.endTime - p.startTime) * 1000,
    periodType: vt('cpu', 'nanoseconds'),
    period: periodNs,
  });
  return { profile, total };
}

function main() {
  const file = arg('file');
  const iters = parseInt(arg('iters', '5'), 10);
  const out = arg('out');
  if (!file || !(iters >= 1)) {
    process.stderr.write('usage: node convert_ref.js --file F [--iters N] [--out P] [--modules DIR]\n');
    process.exit(2);
  }
  const dir = modulesDir();
  const pf = require(path.join(dir, 'pprof-format'));
  const pfVersion = JSON.parse(fs.readFileSync(path.join(dir, 'pprof-format', 'package.json'), 'utf8')).version;
  const rssStart = maxRss();
  const text = fs.readFileSync(file).toString('utf8');
  const rssInput = maxRss();
  const t = { parse_s: [], build_s: [], encode_s: [], gzip_s: [] };
  let enc, gz, counts;
  for (let i = 0; i < iters; i++) {
    const t0 = performance.now();
    const reply = JSON.parse(text);
    const t1 = performance.now();
    const { profile, total } = buildProfile(pf, reply, 1000000);
    const t2 = performance.now();
    enc = profile.encode();
    const t3 = performance.now();
    gz = zlib.gzipSync(enc);
    const t4 = performance.now();
    t.parse_s.push((t1 - t0) / 1e3);
    t.build_s.push((t2 - t1) / 1e3);
    t.encode_s.push((t3 - t2) / 1e3);
    t.gzip_s.push((t4 - t3) / 1e3);
    counts = { samples: total, stacks: profile.sample.length, locations: profile.location.length,
      functions: profile.function.length, strings: profile.stringTable.strings.length };
  }
  const rssPeak = maxRss();
  if (out) fs.writeFileSync(out, enc);
  process.stdout.write(JSON.stringify({
    bytes: Buffer.byteLength(text), iters, ...t, pprof_bytes: enc.length, gzip_bytes: gz.length, ...counts,
    node_version: process.version, pprof_format_version: pfVersion,
    rss_start_kib: rssStart, rss_input_kib: rssInput, rss_peak_kib: rssPeak,
  }) + '\n');
}

main();
