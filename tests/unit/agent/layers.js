#!/usr/bin/env node
// The agent's layering, checked on the built objects (nm), not on what the
// headers say:
//  - no cycle between libraries: a library that uses another's symbols
//    sits above it, and none is above itself through others (control is a
//    client of the daemon, never the other way round as well);
//  - within each library --cycles names, no call cycle spans more than
//    --max-cycle files: the files that call each other round, directly or
//    through others (a strongly connected set of the file-level call
//    graph), are at most that many. The other libraries' cycles are listed,
//    not held to it.
// A symbol counts where it is defined (T, D, B, R, C) and where it is used
// (U); static functions are not seen, so only calls between files count.
//
//   node layers.js [--max-cycle N] [--cycles NAME,...] NAME=LIBRARY.a ...
'use strict';
const { execFileSync } = require('node:child_process');

const args = process.argv.slice(2);
let maxCycle = 3;
let held = null; // libraries held to maxCycle (null: all)
const libs = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === '--max-cycle') maxCycle = Number(args[++i]);
  else if (args[i] === '--cycles') held = new Set(args[++i].split(','));
  else {
    const eq = args[i].indexOf('=');
    if (eq <= 0) throw new Error(`not NAME=LIBRARY: ${args[i]}`);
    libs.push({ name: args[i].slice(0, eq), path: args[i].slice(eq + 1) });
  }
}
if (libs.length === 0) throw new Error('no libraries named');

// lib -> file -> { def: Set, use: Set }
const files = new Map(); // "lib:file" -> { lib, file, def, use }
const definer = new Map(); // symbol -> "lib:file"
for (const lib of libs) {
  const out = execFileSync(process.env.NM || 'nm', ['-A', lib.path], { encoding: 'utf8', maxBuffer: 64 << 20 });
  for (const line of out.split('\n')) {
    // "path.a:file.c.o:0000000000000000 T name" or "path.a:file.c.o:                 U name"
    const m = line.match(/^.*?\.a:([^:]+):\s*(?:[0-9a-fA-F]+)?\s+([A-Za-z])\s+(\S+)$/);
    if (!m) continue;
    const key = `${lib.name}:${m[1].replace(/\.c\.o$|\.o$/, '')}`;
    if (!files.has(key)) files.set(key, { lib: lib.name, file: key, def: new Set(), use: new Set() });
    const f = files.get(key);
    if (m[2] === 'U') f.use.add(m[3]);
    else if ('TDBRCV'.includes(m[2])) {
      f.def.add(m[3]);
      definer.set(m[3], key);
    }
  }
}
if (files.size === 0) throw new Error('nm listed no objects');

// Tarjan's strongly connected sets of a graph given as Map(node -> Set).
function scc(graph) {
  let index = 0;
  const stack = [], on = new Set(), idx = new Map(), low = new Map(), out = [];
  function visit(v) {
    idx.set(v, index); low.set(v, index); index++;
    stack.push(v); on.add(v);
    for (const w of graph.get(v) || []) {
      if (!idx.has(w)) { visit(w); low.set(v, Math.min(low.get(v), low.get(w))); }
      else if (on.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
    }
    if (low.get(v) === idx.get(v)) {
      const c = [];
      let w;
      do { w = stack.pop(); on.delete(w); c.push(w); } while (w !== v);
      out.push(c.sort());
    }
  }
  for (const v of graph.keys()) if (!idx.has(v)) visit(v);
  return out;
}

const libGraph = new Map(libs.map((l) => [l.name, new Set()]));
const fileGraph = new Map(); // within each library
const why = new Map(); // "a>b" -> a symbol that makes the edge
for (const f of files.values()) {
  if (!fileGraph.has(f.file)) fileGraph.set(f.file, new Set());
  for (const sym of f.use) {
    const d = definer.get(sym);
    if (!d || d === f.file) continue;
    const dlib = files.get(d).lib;
    if (dlib !== f.lib) {
      libGraph.get(f.lib).add(dlib);
      if (!why.has(`${f.lib}>${dlib}`)) why.set(`${f.lib}>${dlib}`, `${f.file} uses ${sym} of ${d}`);
    } else {
      fileGraph.get(f.file).add(d);
      if (!why.has(`${f.file}>${d}`)) why.set(`${f.file}>${d}`, sym);
    }
  }
}

let failed = 0;
for (const c of scc(libGraph)) {
  if (c.length < 2) continue;
  failed++;
  console.log(`FAIL libraries in a cycle: ${c.join(' ')}`);
  for (const a of c) for (const b of libGraph.get(a)) if (c.includes(b)) console.log(`  ${why.get(`${a}>${b}`)}`);
}
const sizes = [];
for (const c of scc(fileGraph)) {
  if (c.length < 2) continue;
  const lib = files.get(c[0]).lib;
  const holds = held === null || held.has(lib);
  if (holds) sizes.push(c.length);
  const bad = holds && c.length > maxCycle;
  if (bad) failed++;
  console.log(`${bad ? 'FAIL' : holds ? 'ok  ' : 'info'} ${c.length} files call each other round: ${c.join(' ')}`);
  if (bad)
    for (const a of c) for (const b of fileGraph.get(a)) if (c.includes(b)) console.log(`  ${a} -> ${b} (${why.get(`${a}>${b}`)})`);
}
console.log(`${libs.length} libraries, ${files.size} files; in ${held ? [...held].join(', ') : 'all'} the largest call cycle spans ${sizes.length ? Math.max(...sizes) : 1} file(s), at most ${maxCycle} allowed`);
if (failed) {
  console.log(`FAIL: ${failed} layering problem(s)`);
  process.exit(1);
}
console.log('PASS');
