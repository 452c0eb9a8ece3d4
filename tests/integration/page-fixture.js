// The flame graph page assembled the way agent/cli/flamegraph.c does it,
// for tests of the page on its own: the template agent/cli/page/
// flamegraph.html with its three marker lines replaced by the stylesheet,
// the data (JSON with '<', '>', '&', U+2028 and U+2029 escaped, so no name
// can end the script element) and the script. It refuses what page.cmake
// refuses: a marker missing or there twice, a stylesheet or script that
// holds the closing tag of its own element.
//
// treeData() makes the page's data (version 1) from a nested tree, so a
// test can say what it draws without counting flat integers:
//   { name, file, line, self, baseSelf, children: [...] }
// Totals are the sums of self over each subtree (as pprof_tree_add makes
// them); children are sorted by (name, file) as the C side sorts them.
'use strict';
const fs = require('node:fs');
const path = require('node:path');

const PAGE_DIR = path.resolve(__dirname, '..', '..', 'agent', 'cli', 'page');
const MARKS = ['style', 'data', 'script'];

// The three files of the page, checked as page.cmake checks them.
function readPage(dir = PAGE_DIR) {
  const html = fs.readFileSync(path.join(dir, 'flamegraph.html'), 'utf8');
  const css = fs.readFileSync(path.join(dir, 'flamegraph.css'), 'utf8');
  const js = fs.readFileSync(path.join(dir, 'flamegraph.js'), 'utf8');
  for (const m of MARKS) {
    const mark = `<!--isoprof:${m}-->`;
    const first = html.indexOf(mark);
    if (first === -1 || first !== html.lastIndexOf(mark)) {
      throw new Error(`page-fixture: flamegraph.html must hold ${mark} exactly once`);
    }
  }
  if (css.toLowerCase().includes('</style')) throw new Error('page-fixture: flamegraph.css holds </style');
  if (js.toLowerCase().includes('</script')) throw new Error('page-fixture: flamegraph.js holds </script');
  return { html, css, js };
}

// JSON text that cannot end (or open) an element of the page it sits in.
function htmlSafeJson(data) {
  return JSON.stringify(data).replace(/[<>&\u2028\u2029]/g,
    (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'));
}

// The page for data (an object, or JSON text used as is but escaped).
function assemble(data, dir = PAGE_DIR) {
  const { html, css, js } = readPage(dir);
  const json = typeof data === 'string'
    ? data.replace(/[<>&\u2028\u2029]/g, (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'))
    : htmlSafeJson(data);
  const parts = {
    style: `<style>\n${css}\n</style>`,
    data: `<script type="application/json" id="isoprof-data">${json}</script>`,
    script: `<script>\n${js}\n</script>`,
  };
  // A function replacer: '$' in the parts must stay literal.
  return html.replace(/<!--isoprof:(style|data|script)-->/g, (_, m) => parts[m]);
}

// Writes the page for data to file; returns file.
function writePage(file, data, dir = PAGE_DIR) {
  fs.writeFileSync(file, assemble(data, dir));
  return file;
}

// The data object of a nested tree. opts: kind ('flame' | 'diff'), type
// ('cpu' | 'heap'), period, title, header, baseHeader, folded. Node fields
// self and baseSelf default to 0, file to '', line to 0.
function treeData(root, opts = {}) {
  const diff = opts.kind === 'diff';
  const type = opts.type || 'cpu';
  const frames = [['all', '', 0]];
  const frameIds = new Map();
  const nodes = [];
  const frameOf = (n) => {
    const key = `${n.name}\u0000${n.file || ''}`;
    if (!frameIds.has(key)) {
      frameIds.set(key, frames.length);
      frames.push([n.name, n.file || '', n.line || 0]);
    }
    return frameIds.get(key);
  };
  const byName = (a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1
    : (a.file || '') < (b.file || '') ? -1 : (a.file || '') > (b.file || '') ? 1 : 0);
  // Totals bottom-up, iteratively (deep trees).
  const order = [];
  const stack = [root];
  while (stack.length) {
    const n = stack.pop();
    order.push(n);
    for (const c of n.children || []) stack.push(c);
  }
  for (let i = order.length - 1; i >= 0; i--) {
    const n = order[i];
    n._total = (n.self || 0) + (n.children || []).reduce((s, c) => s + c._total, 0);
    n._base = (n.baseSelf || 0) + (n.children || []).reduce((s, c) => s + c._base, 0);
  }
  // Records in pre-order.
  const pre = [root];
  while (pre.length) {
    const n = pre.pop();
    const kids = (n.children || []).slice().sort(byName);
    const f = n === root ? 0 : frameOf(n);
    if (diff) nodes.push(f, n._total, n.self || 0, n._base, n.baseSelf || 0, kids.length);
    else nodes.push(f, n._total, n.self || 0, kids.length);
    for (let i = kids.length - 1; i >= 0; i--) pre.push(kids[i]);
  }
  for (const n of order) { delete n._total; delete n._base; }
  const data = {
    v: 1,
    kind: diff ? 'diff' : 'flame',
    type,
    unit: type === 'cpu' ? 'nanoseconds' : 'bytes',
    period: type === 'cpu' ? (opts.period === undefined ? 10000000 : opts.period) : 0,
    title: opts.title || 'isoprof flame graph: test',
    header: opts.header || [['worker', 'test'], ['windows', '1']],
    total: nodes[1],
    folded: opts.folded || { nodes: 0, share: 0 },
    frames,
    nodes,
  };
  if (diff) {
    data.base_header = opts.baseHeader || [['worker', 'test'], ['windows', '1']];
    data.base_total = nodes[3];
  }
  return data;
}

module.exports = { PAGE_DIR, readPage, htmlSafeJson, assemble, writePage, treeData };
