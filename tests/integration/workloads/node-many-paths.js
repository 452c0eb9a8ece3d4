// A Node app whose CPU frames name many script paths that all lead to one
// big file without a newline, so that every path, looked up on disk, is
// that file.
//
//   node node-many-paths.js DIR COUNT MIB [FILL]
//
// Makes DIR/big.js (MIB MiB on one line, valid JavaScript: a comment body
// and a small function) and COUNT hard links to it, DIR/s/p<i>.js, once
// (an existing DIR/big.js of the right size is kept). FILL "b64" makes it
// base64 letters ending like an inline map's data instead ("fQ==", a
// JSON object's "}"), which the daemon follows back as far as
// source_maps_max_file: every path then costs it real work. Node never reads
// them: each path is the filename of a small script compiled with
// vm.Script, so that V8 names the path in its frames while the process
// holds only a few KiB of source a path. Then it runs the COUNT functions
// round robin, about 1 ms each, for ever. Prints "ready" and makes
// DIR/ready when the scripts are compiled.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const vm = require('node:vm');

const [dir, countArg, mibArg, fill] = process.argv.slice(2);
const count = Number(countArg || 2000);
const size = Number(mibArg || 60) * 1024 * 1024;
const b64 = fill === 'b64';

const big = path.join(dir, 'big.js');
const head = b64 ? '' : '/*';
const tailCode = b64 ? 'fQ==' : '*/function bigFile(){return 1}';
let ok = false;
try { ok = fs.statSync(big).size === size; } catch (_) { /* not made yet */ }
if (!ok) {
  const fd = fs.openSync(big, 'w');
  fs.writeSync(fd, head);
  const chunk = Buffer.alloc(1 << 20, b64 ? 'A' : 'x');
  let left = size - head.length - tailCode.length;
  while (left > 0) {
    const n = Math.min(left, chunk.length);
    fs.writeSync(fd, chunk, 0, n);
    left -= n;
  }
  fs.writeSync(fd, tailCode);
  fs.closeSync(fd);
}
fs.mkdirSync(path.join(dir, 's'), { recursive: true });
const fns = [];
for (let i = 0; i < count; i++) {
  const p = path.join(dir, 's', `p${i}.js`);
  try { fs.linkSync(big, p); } catch (e) { if (e.code !== 'EEXIST') throw e; }
  // A function large enough that V8 does not inline it into the loop.
  const code = `(function work_${i}(n) {
  let acc = ${i};
  const t = Date.now();
  while (Date.now() - t < n) {
    for (let k = 0; k < 200; k++) {
      acc = (acc * 31 + k) % 1000003;
      if (acc % 7 === 0) acc ^= k;
      else if (acc % 11 === 0) acc += 3;
      else if (acc % 13 === 0) acc -= k & 3;
    }
  }
  return acc;
})`;
  fns.push(new vm.Script(code, { filename: p }).runInThisContext());
}
fs.writeFileSync(path.join(dir, 'ready'), '');
process.stdout.write('ready\n');

let i = 0;
let sink = 0;
function round() {
  const t = Date.now();
  // ~20 ms of work a turn, then the event loop (the inspector's messages)
  while (Date.now() - t < 20) {
    sink += fns[i](1);
    i = (i + 1) % fns.length;
  }
  setImmediate(round);
}
round();
process.on('SIGTERM', () => process.exit(sink === -1 ? 1 : 0));
