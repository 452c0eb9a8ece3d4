// flamegraph.js - the script of the page `isoprof flamegraph` writes
// (agent/cli/flamegraph.c puts it, the stylesheet and the data into
// flamegraph.html).
//
// SECURITY: every function name and file path shown here comes from the
// profiled code and may be hostile (`"><svg onload=...>`). This script puts
// them in the page as text only: textContent, createElement, setAttribute.
// Never innerHTML, outerHTML, insertAdjacentHTML or document.write with
// data; no eval, no Function(), no handler strings; listeners are
// functions. The data itself is JSON with '<', '>', '&', U+2028 and U+2029
// escaped by the C side, so it cannot end the element that holds it. This
// file must never contain the closing tag of a script element (the build
// refuses it). The page fetches nothing (see its CSP).
//
// DATA (JSON in #isoprof-data), version 1:
//   v: 1; kind: "flame" | "diff"; type: "cpu" | "heap";
//   unit: "nanoseconds" | "bytes" (of every value);
//   period: cpu ns per sample (value / period = samples), 0 unknown or heap;
//   title; header: [[key, value], ...] (what was merged); diff: base_header;
//   total: the root's total (a diff: of the compared set); diff: base_total;
//   folded: {nodes, share}: nodes folded into "(folded)" frames because
//     their total was under share x total (0 nodes: nothing folded);
//   frames: [[name, file, line], ...], frames[0] the root ["all", "", 0];
//     file "" and line 0 are unknown; a function is (name, file);
//   nodes: the call tree in pre-order, flat integers, root first. A flame
//     node is [frame, total, self, childCount], a diff node [frame, total,
//     self, baseTotal, baseSelf, childCount], each followed by its
//     children's records; children are sorted by name.
//
// DESIGN: the tree is decoded once into typed arrays. Pre-order makes a
// subtree the index range [k, end[k]), so walks are loops, never recursion
// (stacks are hundreds deep), and "skip this subtree" is k = end[k]. A
// render visits the zoomed node's subtree only as far as frames are at
// least half a pixel wide and reuses the frame divs of the last render.
'use strict';

(function () {
  const T0 = performance.now();
  const ROW = 18;            // px per flame graph row (CSS --row)
  const MIN_PX = 0.5;        // narrower frames are not drawn ...
  const FRAME_BUDGET = 8000;  // ... nor are more frames than this (see minPx)
  const TABLE_ROWS = 500;    // function rows shown at first, and added by "Show more"
  const CHANGE_ROWS = 100;   // rows of "Biggest changes"
  const DIFF_SATURATE = 0.05; // a delta of 5 percentage points is full colour
  const DIFF_GREY = 0.001;    // under 0.1 pp a frame is grey: no change
  const DIFF_EPS = 1e-12;     // shares closer than this are equal (float rounding)

  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  };

  // --- decoding ---------------------------------------------------------

  const isInt = (x) => Number.isSafeInteger(x) && x >= 0;

  // The data as typed arrays, or an Error saying what is wrong with it.
  function decode(d) {
    if (!d || typeof d !== 'object') throw new Error('no profile data');
    if (d.v !== 1) throw new Error('unsupported data version ' + String(d.v) + ' (this page reads 1)');
    const diff = d.kind === 'diff';
    const stride = diff ? 6 : 4;
    const raw = d.nodes;
    const frames = d.frames;
    if (!Array.isArray(frames) || frames.length === 0) throw new Error('no frames');
    if (!Array.isArray(raw) || raw.length === 0 || raw.length % stride !== 0) {
      throw new Error('nodes: length is not a multiple of ' + stride);
    }
    const n = raw.length / stride;
    const t = {
      n, diff,
      frame: new Int32Array(n),
      parent: new Int32Array(n),
      depth: new Int32Array(n),
      end: new Int32Array(n),
      total: new Float64Array(n),
      self: new Float64Array(n),
      baseTotal: diff ? new Float64Array(n) : null,
      baseSelf: diff ? new Float64Array(n) : null,
      maxDepth: 0,
    };
    // open[i]: the i-th open ancestor; left[i]: its children still to come.
    const open = new Int32Array(n);
    const left = new Float64Array(n);
    let sp = 0;
    for (let k = 0, p = 0; k < n; k++, p += stride) {
      if (k > 0 && sp === 0) throw new Error('nodes: record ' + k + ' is outside the root');
      const f = raw[p];
      const kids = raw[p + stride - 1];
      if (!isInt(f) || f >= frames.length) throw new Error('nodes: bad frame index at record ' + k);
      if (!isInt(kids)) throw new Error('nodes: bad child count at record ' + k);
      for (let i = 1; i < stride - 1; i++) {
        if (!isInt(raw[p + i])) throw new Error('nodes: bad value at record ' + k);
      }
      t.frame[k] = f;
      t.total[k] = raw[p + 1];
      t.self[k] = raw[p + 2];
      if (diff) {
        t.baseTotal[k] = raw[p + 3];
        t.baseSelf[k] = raw[p + 4];
      }
      if (sp > 0) {
        t.parent[k] = open[sp - 1];
        left[sp - 1]--;
      } else {
        t.parent[k] = -1;
      }
      t.depth[k] = sp;
      if (sp > t.maxDepth) t.maxDepth = sp;
      if (kids > 0) {
        open[sp] = k;
        left[sp] = kids;
        sp++;
      } else {
        t.end[k] = k + 1;
        while (sp > 0 && left[sp - 1] === 0) t.end[open[--sp]] = k + 1;
      }
    }
    if (sp !== 0) throw new Error('nodes: truncated (' + sp + ' nodes miss children)');

    // Frames and functions: a function is (name, file); frames may repeat one.
    const nf = frames.length;
    t.name = new Array(nf);
    t.file = new Array(nf);
    t.line = new Int32Array(nf);
    t.fnOf = new Int32Array(nf);
    t.fnFrame = [];              // function -> its first frame
    const fnIds = new Map();
    for (let f = 0; f < nf; f++) {
      const fr = frames[f];
      if (!Array.isArray(fr)) throw new Error('frames: bad frame ' + f);
      t.name[f] = String(fr[0]);
      t.file[f] = fr[1] ? String(fr[1]) : '';
      t.line[f] = isInt(fr[2]) ? Math.min(fr[2], 2147483647) : 0;
      const key = t.name[f] + '\u0000' + t.file[f];
      let id = fnIds.get(key);
      if (id === undefined) {
        id = t.fnFrame.length;
        fnIds.set(key, id);
        t.fnFrame.push(f);
      }
      t.fnOf[f] = id;
    }
    t.isFolded = (f) => t.name[f] === '(folded)' && t.file[f] === '';
    return t;
  }

  // Per function: self (sum over its nodes) and total (once per stack: a
  // node adds its total only when no ancestor is the same function), as
  // `isoprof top` counts flat and cum. The root is no function.
  function functionStats(t) {
    const nfn = t.fnFrame.length;
    const s = {
      self: new Float64Array(nfn), total: new Float64Array(nfn),
      baseSelf: t.diff ? new Float64Array(nfn) : null,
      baseTotal: t.diff ? new Float64Array(nfn) : null,
    };
    const onStack = new Int32Array(nfn);
    const stack = new Int32Array(t.maxDepth + 1);
    let sp = 0;
    for (let k = 1; k < t.n; k++) {
      while (sp > 0 && t.end[stack[sp - 1]] <= k) onStack[t.fnOf[t.frame[stack[--sp]]]]--;
      const fn = t.fnOf[t.frame[k]];
      s.self[fn] += t.self[k];
      if (t.diff) s.baseSelf[fn] += t.baseSelf[k];
      if (onStack[fn] === 0) {
        s.total[fn] += t.total[k];
        if (t.diff) s.baseTotal[fn] += t.baseTotal[k];
      }
      onStack[fn]++;
      stack[sp++] = k;
    }
    return s;
  }

  // --- formatting -------------------------------------------------------

  function fixed(x, unit) {
    return (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2)) + ' ' + unit;
  }

  function makeFormat(data) {
    if (data.unit === 'bytes') {
      return (v) => {
        if (v < 1024) return v + ' B';
        if (v < 1048576) return fixed(v / 1024, 'KiB');
        if (v < 1073741824) return fixed(v / 1048576, 'MiB');
        return fixed(v / 1073741824, 'GiB');
      };
    }
    if (data.unit === 'nanoseconds') {
      return (v) => {
        if (v >= 1e9) return fixed(v / 1e9, 's');
        if (v >= 1e6) return fixed(v / 1e6, 'ms');
        if (v >= 1e3) return fixed(v / 1e3, '\u00b5s');
        return v + ' ns';
      };
    }
    return (v) => v + ' ' + String(data.unit || '');
  }

  const pct = (x) => (Number.isFinite(x) ? (x * 100).toFixed(2) + '%' : '-');
  const pp = (x) => (x >= 0 ? '+' : '\u2212') + Math.abs(x * 100).toFixed(2) + ' pp';

  // A stable warm colour per name (FNV-1a of the name).
  function warm(name) {
    let h = 0x811c9dc5;
    for (let i = 0; i < name.length; i++) {
      h ^= name.charCodeAt(i);
      h = Math.imul(h, 0x01000193);
    }
    h >>>= 0;
    const hue = h % 50;                   // red .. orange-yellow
    const sat = 70 + ((h >>> 8) % 25);
    const light = 55 + ((h >>> 16) % 15);
    return 'hsl(' + hue + ',' + sat + '%,' + light + '%)';
  }

  // The colour of a change of share delta: red grows, blue shrinks.
  function diffColour(delta) {
    const a = Math.abs(delta);
    if (a < DIFF_GREY) return 'hsl(0,0%,80%)';
    const i = Math.min(1, a / DIFF_SATURATE);
    const light = Math.round(88 - 30 * i);
    return (delta > 0 ? 'hsl(0,80%,' : 'hsl(215,80%,') + light + '%)';
  }

  // --- the page ---------------------------------------------------------

  // Milliseconds each step of the first render took (for the benchmark).
  const timings = {};
  let mark = T0;
  const lap = (name) => {
    const now = performance.now();
    timings[name] = now - mark;
    mark = now;
  };

  let data;
  let t;
  try {
    data = JSON.parse($('isoprof-data').textContent);
    lap('parse');
    t = decode(data);
    lap('decode');
  } catch (e) {
    const err = $('error');
    err.textContent = 'Cannot show this profile: ' + (e && e.message ? e.message : String(e));
    err.hidden = false;
    window.isoprof = { ready: true, error: err.textContent, renderMs: performance.now() - T0 };
    return;
  }

  const fmt = makeFormat(data);
  const cpu = data.type === 'cpu' && data.period > 0;
  const rootTotal = t.total[0];
  const baseRoot = t.diff ? t.baseTotal[0] : 0;
  const share = (v) => (rootTotal > 0 ? v / rootTotal : 0);
  const baseShare = (v) => (baseRoot > 0 ? v / baseRoot : 0);
  const valueText = (v) => fmt(v) + (cpu ? ', ' + Math.round(v / data.period) + ' samples' : '');
  const frameColour = new Array(t.name.length);   // warm colours, made on first use

  const flame = $('flame');
  const tooltip = $('tooltip');
  const state = { zoom: 0, match: null }; // match: per frame, 1 if it matches the search

  // Header: title, what was merged, folded note.
  function renderHeader() {
    const title = typeof data.title === 'string' && data.title ? data.title : 'isoprof flame graph';
    document.title = title;
    $('title').textContent = title;
    const pairs = (h) => (Array.isArray(h) ? h.filter(Array.isArray).map((p) => [String(p[0]), String(p[1])]) : []);
    const table = el('table');
    const body = el('tbody');
    const row = (cells, head) => {
      const tr = el('tr');
      cells.forEach((c, i) => tr.appendChild(el(i === 0 || head ? 'th' : 'td', '', c)));
      return tr;
    };
    if (t.diff) {
      const cmp = pairs(data.header);
      const base = pairs(data.base_header);
      const keys = [];
      for (const [k] of base.concat(cmp)) if (!keys.includes(k)) keys.push(k);
      const get = (list, k) => list.filter((p) => p[0] === k).map((p) => p[1]).join(', ');
      const head = el('thead');
      head.appendChild(row(['', 'base', 'compared'], true));
      table.appendChild(head);
      for (const k of keys) body.appendChild(row([k, get(base, k), get(cmp, k)]));
      body.appendChild(row(['total', valueText(baseRoot), valueText(rootTotal)]));
    } else {
      for (const [k, v] of pairs(data.header)) body.appendChild(row([k, v]));
      body.appendChild(row(['total', valueText(rootTotal)]));
    }
    table.appendChild(body);
    $('header').appendChild(table);

    const folded = data.folded || {};
    const note = $('folded-note');
    if (folded.nodes > 0) {
      const x = Number(((folded.share || 0) * 100).toPrecision(3));
      note.textContent = folded.nodes + ' frames narrower than ' + x + '% are folded into (folded)';
      note.hidden = false;
    }
    if (t.diff) {
      const legend = $('legend');
      legend.appendChild(el('span', 'grown', '\u25a0 grew'));
      legend.appendChild(document.createTextNode(' '));
      legend.appendChild(el('span', 'shrunk', '\u25a0 shrank'));
      legend.appendChild(document.createTextNode(' (share of total; width: compared set)'));
      $('flame-heading').textContent = 'Differential flame graph';
    } else {
      $('changes-section').remove();
      $('changes-link').remove();
    }
  }

  // --- flame graph rendering --------------------------------------------

  const pool = [];   // frame divs; the first `live` are in #flame
  let live = 0;

  function frameDiv(i) {
    let d = pool[i];
    if (!d) {
      d = el('div', 'frame');
      d.node = -1;
      pool[i] = d;
    }
    return d;
  }

  // Node k's colour and class ("grown"/"shrunk" in a diff).
  function paint(d, k, ancestor) {
    const f = t.frame[k];
    let cls = ancestor ? 'frame ancestor' : 'frame';
    let colour;
    if (t.isFolded(f)) {
      cls += ' folded';
      colour = 'hsl(0,0%,75%)';
    } else if (t.diff) {
      const delta = share(t.total[k]) - baseShare(t.baseTotal[k]);
      // The class says the direction of any change (beyond rounding); the
      // colour says how much, grey under DIFF_GREY.
      if (delta > DIFF_EPS) cls += ' grown';
      else if (delta < -DIFF_EPS) cls += ' shrunk';
      colour = diffColour(delta);
    } else {
      colour = frameColour[f] || (frameColour[f] = warm(t.name[f]));
    }
    d.className = cls;
    d.style.backgroundColor = colour;
  }

  // The narrowest frame drawn under z: half a pixel, or wider when that
  // would put more than FRAME_BUDGET divs in the page (Chromium lays out a
  // some ten thousand positioned divs a second on a slow machine, and
  // a pathological tree can have 100,000 frames half a pixel wide). A node
  // is drawn when its total is at least the minimum: its ancestors are
  // wider still, so this counts the drawn frames without placing them.
  function minPx(z, width) {
    const tz = t.total[z];
    for (let px = MIN_PX; ; px *= 2) {
      const min = tz * px / width;
      let n = 0;
      for (let k = z + 1; k < t.end[z] && n <= FRAME_BUDGET;) {
        if (t.total[k] >= min && t.total[k] > 0) {
          n++;
          k++;
        } else {
          k = t.end[k];
        }
      }
      if (n <= FRAME_BUDGET) return px;
    }
  }

  // Draws the zoomed node full width, its ancestors full width above it and
  // its descendants below, each as wide as its share of the zoomed total.
  function render() {
    const width = flame.clientWidth || 1000;
    const z = state.zoom;
    const tz = t.total[z];
    const match = state.match;
    const frag = document.createDocumentFragment();
    let used = 0;
    let rows = t.depth[z] + 1;
    const place = (k, x, w, ancestor) => {
      const d = frameDiv(used);
      if (used >= live) frag.appendChild(d);
      used++;
      if (d.node !== k) {
        d.node = k;
        d.setAttribute('data-node', String(k));
        d.textContent = t.name[t.frame[k]];
      }
      paint(d, k, ancestor);
      const s = d.style;
      s.left = (x * 100) + '%';
      s.width = (w * 100) + '%';
      s.top = (t.depth[k] * ROW) + 'px';
      if (match && k > 0 && match[t.frame[k]]) d.setAttribute('data-match', '1');
      else d.removeAttribute('data-match');
    };

    for (let a = t.parent[z]; a >= 0; a = t.parent[a]) place(a, 0, 1, true);
    place(z, 0, 1, false);
    const note = $('flame-note');
    note.textContent = '';
    if (tz > 0) {
      const px = minPx(z, width);
      const minTotal = tz * px / width;
      note.textContent = px > MIN_PX ? 'Too many frames to draw: frames narrower than ' + px +
        ' px are not drawn; zoom in to see them.' : '';
      // Depth-first over drawn frames: node and its left edge (in values).
      const stackNode = [z];
      const stackX = [0];
      while (stackNode.length > 0) {
        const k = stackNode.pop();
        let x = stackX.pop();
        for (let c = k + 1; c < t.end[k]; c = t.end[c]) {
          const v = t.total[c];
          if (v >= minTotal && v > 0) {
            place(c, x / tz, v / tz, false);
            if (t.depth[c] + 1 > rows) rows = t.depth[c] + 1;
            if (t.end[c] > c + 1) {
              stackNode.push(c);
              stackX.push(x);
            }
          }
          x += v;
        }
      }
    }
    for (let i = used; i < live; i++) pool[i].remove();
    if (frag.firstChild) flame.appendChild(frag);
    live = used;
    flame.style.height = (rows * ROW) + 'px';
    isoprof.zoomedNode = z;
  }

  function zoom(k) {
    k = Number(k);
    if (!Number.isInteger(k) || k < 0 || k >= t.n) return;
    state.zoom = k;
    hideTooltip();
    render();
  }

  // --- search -----------------------------------------------------------

  let lowerName = null;
  let lowerFile = null;

  // Marks the frames whose name or file holds text (case-insensitive) and
  // shows the share of the samples through them, each sample once: a
  // matching node's subtree is skipped, so nested matches do not count twice.
  function search(text) {
    const raw = text == null ? '' : String(text);
    const q = raw.trim().toLowerCase();
    const input = $('search');
    if (input.value !== raw) input.value = raw;
    const out = $('matches');
    if (q === '') {
      state.match = null;
      out.textContent = '';
    } else {
      if (!lowerName) {
        lowerName = t.name.map((s) => s.toLowerCase());
        lowerFile = t.file.map((s) => s.toLowerCase());
      }
      const m = new Uint8Array(t.name.length);
      for (let f = 0; f < m.length; f++) m[f] = lowerName[f].includes(q) || lowerFile[f].includes(q) ? 1 : 0;
      let sum = 0;
      let baseSum = 0;
      for (let k = 1; k < t.n;) {
        if (m[t.frame[k]]) {
          sum += t.total[k];
          if (t.diff) baseSum += t.baseTotal[k];
          k = t.end[k];
        } else {
          k++;
        }
      }
      state.match = m;
      let line = 'matches: ' + (share(sum) * 100).toFixed(1) + '% of total';
      if (t.diff) line += ' (base ' + (baseShare(baseSum) * 100).toFixed(1) + '%)';
      out.textContent = line;
    }
    for (let i = 0; i < live; i++) {
      const d = pool[i];
      if (state.match && d.node > 0 && state.match[t.frame[d.node]]) d.setAttribute('data-match', '1');
      else d.removeAttribute('data-match');
    }
  }

  // --- tooltip ----------------------------------------------------------

  let tipNode = -1;

  function hideTooltip() {
    tooltip.hidden = true;
    tipNode = -1;
  }

  function fillTooltip(k) {
    const f = t.frame[k];
    const lines = [el('div', 'tt-name', t.name[f])];
    let where = t.file[f] || '(unknown file)';
    if (t.file[f] && t.line[f] > 0) where += ':' + t.line[f];
    lines.push(el('div', 'tt-file', where));
    lines.push(el('div', '', 'total: ' + valueText(t.total[k]) + ' (' + pct(share(t.total[k])) + ')'));
    lines.push(el('div', '', 'self: ' + valueText(t.self[k]) + ' (' + pct(share(t.self[k])) + ')'));
    if (t.diff) {
      const a = baseShare(t.baseTotal[k]);
      const b = share(t.total[k]);
      lines.push(el('div', '', 'base: ' + valueText(t.baseTotal[k]) + ' (' + pct(a) + ')'));
      lines.push(el('div', '', 'share: ' + pct(a) + ' \u2192 ' + pct(b) + ' (' + pp(b - a) + ')'));
    }
    tooltip.replaceChildren(...lines);
  }

  function onMove(ev) {
    const d = ev.target instanceof Element ? ev.target.closest('.frame') : null;
    if (!d || d.node < 0) {
      hideTooltip();
      return;
    }
    if (tipNode !== d.node) {
      tipNode = d.node;
      fillTooltip(d.node);
    }
    tooltip.hidden = false;
    const pad = 14;
    const r = tooltip.getBoundingClientRect();
    let x = ev.clientX + pad;
    let y = ev.clientY + pad;
    if (x + r.width > window.innerWidth) x = Math.max(0, ev.clientX - pad - r.width);
    if (y + r.height > window.innerHeight) y = Math.max(0, ev.clientY - pad - r.height);
    tooltip.style.left = x + 'px';
    tooltip.style.top = y + 'px';
  }

  // --- tables -----------------------------------------------------------

  let stats = null;
  const sort = { key: 'self', dir: -1 };
  // Rows of the functions table shown: laying out all of 50,000 functions
  // takes Chromium seconds, so they come in pages.
  let tableRows = TABLE_ROWS;

  function fileText(f) {
    if (!t.file[f]) return '';
    return t.line[f] > 0 ? t.file[f] + ':' + t.line[f] : t.file[f];
  }

  function nameCells(tr, f) {
    tr.appendChild(el('td', 'name', t.name[f]));
    tr.appendChild(el('td', 'file', fileText(f)));
  }

  // One row per function of the shown set, sorted by self or total (then
  // the other, then name: the order of `isoprof top` for self).
  function renderFunctions() {
    const ids = [];
    for (let i = 0; i < t.fnFrame.length; i++) if (stats.total[i] > 0 || stats.self[i] > 0) ids.push(i);
    const a = sort.key === 'self' ? stats.self : stats.total;
    const b = sort.key === 'self' ? stats.total : stats.self;
    ids.sort((x, y) => (a[y] - a[x]) * -sort.dir || (b[y] - b[x]) * -sort.dir ||
      (t.name[t.fnFrame[x]] < t.name[t.fnFrame[y]] ? -1 : t.name[t.fnFrame[x]] > t.name[t.fnFrame[y]] ? 1 : 0));
    const shown = Math.min(ids.length, tableRows);
    const frag = document.createDocumentFragment();
    for (let r = 0; r < shown; r++) {
      const i = ids[r];
      const f = t.fnFrame[i];
      const tr = el('tr', t.isFolded(f) ? 'folded' : '');
      nameCells(tr, f);
      tr.appendChild(el('td', 'num self', fmt(stats.self[i])));
      tr.appendChild(el('td', 'num', pct(share(stats.self[i]))));
      tr.appendChild(el('td', 'num total', fmt(stats.total[i])));
      tr.appendChild(el('td', 'num', pct(share(stats.total[i]))));
      frag.appendChild(tr);
    }
    $('functions').tBodies[0].replaceChildren(frag);
    for (const th of document.querySelectorAll('#functions th[data-sort]')) {
      if (th.getAttribute('data-sort') === sort.key) th.setAttribute('aria-sort', sort.dir < 0 ? 'descending' : 'ascending');
      else th.removeAttribute('aria-sort');
    }
    $('functions-count').textContent = 'Showing ' + shown + ' of ' + ids.length + ' functions.';
    const more = $('functions-more');
    more.hidden = shown === ids.length;
    more.textContent = 'Show ' + Math.min(TABLE_ROWS, ids.length - shown) + ' more';
  }

  // Functions by |change of self share|, largest first.
  function renderChanges() {
    const rows = [];
    for (let i = 0; i < t.fnFrame.length; i++) {
      const before = baseShare(stats.baseSelf[i]);
      const after = share(stats.self[i]);
      if (Math.abs(after - before) > DIFF_EPS) rows.push({ i, before, after, delta: after - before });
    }
    rows.sort((x, y) => Math.abs(y.delta) - Math.abs(x.delta) || y.delta - x.delta);
    const frag = document.createDocumentFragment();
    const shown = Math.min(rows.length, CHANGE_ROWS);
    for (let r = 0; r < shown; r++) {
      const c = rows[r];
      const tr = el('tr', c.delta > 0 ? 'grown' : 'shrunk');
      nameCells(tr, t.fnFrame[c.i]);
      tr.appendChild(el('td', 'num base', pct(c.before)));
      tr.appendChild(el('td', 'num new', pct(c.after)));
      tr.appendChild(el('td', 'num delta', pp(c.delta)));
      frag.appendChild(tr);
    }
    $('changes').tBodies[0].replaceChildren(frag);
    const more = $('changes-more');
    if (rows.length > shown) {
      more.textContent = 'The ' + shown + ' largest of ' + rows.length + ' changes.';
      more.hidden = false;
    } else if (rows.length === 0) {
      more.textContent = 'No function changed its self share.';
      more.hidden = false;
    }
  }

  // --- wiring -----------------------------------------------------------

  const isoprof = {
    ready: false,
    renderMs: 0,
    zoomedNode: 0,
    zoom,
    reset: () => zoom(0),
    search,
  };
  window.isoprof = isoprof;

  flame.addEventListener('click', (ev) => {
    const d = ev.target instanceof Element ? ev.target.closest('.frame') : null;
    if (d && d.node >= 0) zoom(d.node);
  });
  flame.addEventListener('mousemove', onMove);
  flame.addEventListener('mouseleave', hideTooltip);
  $('reset').addEventListener('click', () => zoom(0));
  $('search').addEventListener('input', (ev) => search(ev.target.value));
  document.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape' && document.activeElement !== $('search')) zoom(0);
  });
  for (const th of document.querySelectorAll('#functions th[data-sort]')) {
    th.addEventListener('click', () => {
      const key = th.getAttribute('data-sort');
      sort.dir = sort.key === key ? -sort.dir : -1;
      sort.key = key;
      renderFunctions();
    });
  }
  $('functions-more').addEventListener('click', () => {
    tableRows += TABLE_ROWS;
    renderFunctions();
  });
  let lastWidth = 0;
  window.addEventListener('resize', () => {
    if (flame.clientWidth !== lastWidth) {
      lastWidth = flame.clientWidth;
      render();
    }
  });

  renderHeader();
  lastWidth = flame.clientWidth;
  render();
  lap('flame');
  stats = functionStats(t);
  renderFunctions();
  if (t.diff) renderChanges();
  // The search box may hold text the browser restored.
  if ($('search').value) search($('search').value);
  lap('tables');
  // Layout is part of the first render: do it now, so renderMs counts it
  // (the browser would do it next anyway).
  void document.body.offsetHeight;
  lap('layout');
  isoprof.timings = timings;
  isoprof.renderMs = performance.now() - T0;
  isoprof.ready = true;
})();
