// isoprof flamegraph and export --format folded|cpuprofile, on a store the
// daemon filled from a real Node workload and from fake inspectors whose
// profiles are known exactly: two versions of one worker where one
// function's share doubles, and one whose function names are hostile
// markup. The pages are opened in headless Chromium (chromium.js): no
// console error, no network request, the hot function shown, zoom, search,
// the table, the diff's colours and changes, and markup shown as text.
'use strict';
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const path = require('node:path');
const { pathToFileURL } = require('node:url');
const L = require('./lib');
const F = require('./fake-inspector');
const C = require('./chromium');

after(L.cleanup);

const monoUs = () => Number(process.hrtime.bigint() / 1000n);
const HOSTILE = '</script><img src=x onerror=alert(1)>';
const HOSTILE2 = '"><svg onload=alert(1)>';

// A CPU profile reply where fns = [[name, hits, 0-based line]] are the
// children of (root), in file file:///srv/<file>.
function stopText(fns, file) {
  return (id) => {
    const end = monoUs();
    const total = fns.reduce((n, f) => n + f[1], 0);
    const start = end - total * 1000;
    const nodes = [{ id: 1, callFrame: { functionName: '(root)', scriptId: '0', url: '', lineNumber: -1, columnNumber: -1 }, hitCount: 0, children: fns.map((_, i) => i + 2) }];
    const samples = [];
    fns.forEach(([name, hits, line], i) => {
      nodes.push({ id: i + 2, callFrame: { functionName: name, scriptId: '7', url: `file:///srv/${file}`, lineNumber: line, columnNumber: 0 }, hitCount: hits, children: [] });
      for (let h = 0; h < hits; h++) samples.push(i + 2);
    });
    return JSON.stringify({ id, result: { profile: { nodes, startTime: start, endTime: end, samples, timeDeltas: samples.map(() => 1000) } } });
  };
}

// `isoprof top` rows: {flatPct, cumPct, name, file}.
function topRows(store, args) {
  const r = L.cli(['top', '--store', store, '-n', '100000', ...args]);
  assert.strictEqual(r.status, 0, r.stderr);
  const rows = [];
  for (const line of r.stdout.split('\n')) {
    const m = /^\s*[\d.]+\S*\s+([\d.]+)%\s+[\d.]+%\s+[\d.]+\S*\s+([\d.]+)%\s+(.*)$/.exec(line);
    if (!m) continue;
    const fm = /^(.*) (\S+):\d+$/.exec(m[3]);
    rows.push({ flatPct: parseFloat(m[1]), cumPct: parseFloat(m[2]), name: fm ? fm[1] : m[3], file: fm ? fm[2] : '' });
  }
  return rows;
}

// Folded stacks back into per-function flat and cum shares, as top counts
// them: a frame is "name (file:line)" or "name".
function foldedShares(text) {
  const fns = new Map();
  let total = 0;
  for (const line of text.split('\n').filter(Boolean)) {
    const m = /^(.*) (\d+)$/.exec(line);
    assert.ok(m, `a folded line ends in a count: ${line}`);
    const n = Number(m[2]);
    total += n;
    const frames = m[1].split(';').map((f) => {
      const fm = /^(.*) \((.*?)(?::\d+)?\)$/.exec(f);
      return fm ? `${fm[1]}\t${fm[2]}` : `${f}\t`;
    });
    const get = (k) => fns.get(k) || fns.set(k, { flat: 0, cum: 0 }).get(k);
    get(frames[frames.length - 1]).flat += n;
    for (const k of new Set(frames)) get(k).cum += n;
  }
  return { fns, total };
}

describe('flame graphs of a store the daemon filled', () => {
  let dir; let store; let browser;
  before(async () => {
    dir = L.tmpdir();
    store = path.join(dir, 'store');
    // v1: grows 20 %, steadyA and steadyB 40 % each; v2: grows 40 %, 30 %, 30 %.
    const v1 = await F.startFakeInspector({ url: 'file:///srv/shop.js', stopText: stopText([['grows', 20, 9], ['steadyA', 40, 19], ['steadyB', 40, 29]], 'shop.js') });
    const v2 = await F.startFakeInspector({ url: 'file:///srv/shop.js', stopText: stopText([['grows', 40, 9], ['steadyA', 30, 19], ['steadyB', 30, 29]], 'shop.js') });
    const evil = await F.startFakeInspector({ url: 'file:///srv/evil.js', stopText: stopText([[HOSTILE, 60, 1], [HOSTILE2, 40, 2]], '<b>evil</b>.js') });
    const node = await L.startNode(path.join(__dirname, 'workloads', 'node-hot.js'));
    const d = await L.startDaemon(L.yamlConfig({
      store, duration: '1s', period: '1500ms', jitter: '0%', heap: '{period: 2s}',
      targets: [{ port: v1.port, worker: 'shop', version: 'v1' }, { port: v2.port, worker: 'shop', version: 'v2' },
        { port: evil.port, worker: 'evil', version: 'e1' }, { port: node.port, worker: 'real', version: 'r1' }],
    }), { dir });
    // node-hot.js starts its loop 5 s after it starts: wait for windows of it.
    let seen = 'nothing stored';
    await L.waitFor(() => {
      if (!fs.existsSync(path.join(store, 'data.mdb')) || d.count((l) => l.msg === 'window stored') === 0) return false;
      const ws = L.windows(store);
      const of = (w, v, t) => ws.filter((x) => x.worker === w && x.version === v && x.type === t).length;
      seen = `shop v1 ${of('shop', 'v1', 'cpu')}, v2 ${of('shop', 'v2', 'cpu')}, evil ${of('evil', 'e1', 'cpu')}, real ${of('real', 'r1', 'cpu')} cpu ${of('real', 'r1', 'heap')} heap`;
      if (of('shop', 'v1', 'cpu') < 4 || of('shop', 'v2', 'cpu') < 4 || of('evil', 'e1', 'cpu') < 2 || of('real', 'r1', 'heap') < 1) return false;
      const top = L.cli(['top', '--store', store, '--worker', 'real', '--type', 'cpu', '-n', '1']);
      return top.status === 0 && /crunchNumbers/.test(top.stdout);
    }, 90000, 'windows of every target, the real one naming crunchNumbers').catch((e) => {
      throw new Error(`${e.message} (windows: ${seen})\n${d.tail()}`);
    });
    const r = await L.stopDaemon(d, { signal: 'SIGTERM' });
    assert.strictEqual(r.code, 0, d.tail());
    await Promise.all([v1.close(), v2.close(), evil.close(), L.stop(node)]);
    browser = await C.launch({ timeoutMs: 60000 });
  });
  after(async () => { if (browser) await browser.close(); });

  // A page of the CLI's, opened; fails on any console error or request.
  async function openPage(args, name) {
    const file = path.join(dir, `${name}.html`);
    const r = L.cli(['flamegraph', '--store', store, ...args, '-o', file]);
    assert.strictEqual(r.status, 0, r.stderr);
    const html = fs.readFileSync(file, 'utf8');
    const url = pathToFileURL(file).href;
    const page = await browser.open('about:blank');
    await page.navigate(url);
    await page.waitFor('window.isoprof && window.isoprof.ready === true', 30000);
    return { page, html, url };
  }

  function assertClean(page, url) {
    assert.deepStrictEqual(page.errors, [], 'no console error or exception');
    assert.deepStrictEqual(page.requests.filter((u) => u !== url && u !== 'about:blank'), [], 'no network request');
    assert.deepStrictEqual(page.dialogs, [], 'no dialog opened');
  }

  test('export --format folded agrees with isoprof top', () => {
    for (const w of ['real', 'shop']) {
      const r = L.cli(['export', '--store', store, '--worker', w, '--type', 'cpu', '--format', 'folded']);
      assert.strictEqual(r.status, 0, r.stderr);
      const { fns, total } = foldedShares(r.stdout);
      assert.ok(total > 0);
      const top = topRows(store, ['--worker', w, '--type', 'cpu']);
      assert.ok(top.length > 0);
      for (const row of top) {
        const f = fns.get(`${row.name}\t${row.file}`);
        assert.ok(f, `${w}: ${row.name} ${row.file} is in the folded stacks`);
        // top prints shares of 0.01 %; folded counts whole samples
        assert.ok(Math.abs(100 * f.flat / total - row.flatPct) < 0.02, `${w} ${row.name}: flat ${100 * f.flat / total} vs ${row.flatPct}`);
        assert.ok(Math.abs(100 * f.cum / total - row.cumPct) < 0.02, `${w} ${row.name}: cum ${100 * f.cum / total} vs ${row.cumPct}`);
      }
    }
    // the shop's stacks, exactly: 2+ windows of each version merged
    const s = L.cli(['export', '--store', store, '--worker', 'shop', '--version', 'v1', '--type', 'cpu', '--format', 'folded']).stdout;
    const lines = s.split('\n').filter(Boolean).sort();
    assert.strictEqual(lines.length, 3, s);
    assert.match(lines[0], /^grows \(\/srv\/shop\.js:10\) \d+$/);
    const n = lines.map((l) => Number(/ (\d+)$/.exec(l)[1]));
    assert.strictEqual(n[0] * 2, n[1], 'grows is half of steadyA in v1');
  });

  test('export --format cpuprofile: nodes, samples and timeDeltas consistent', () => {
    const file = path.join(dir, 'real.cpuprofile');
    const r = L.cli(['export', '--store', store, '--worker', 'real', '--type', 'cpu', '--format', 'cpuprofile', '-o', file]);
    assert.strictEqual(r.status, 0, r.stderr);
    const p = JSON.parse(fs.readFileSync(file, 'utf8'));
    assert.ok(Array.isArray(p.nodes) && Array.isArray(p.samples) && Array.isArray(p.timeDeltas));
    const ids = new Map(p.nodes.map((n) => [n.id, n]));
    assert.strictEqual(ids.size, p.nodes.length, 'node ids are unique');
    const parents = new Map();
    for (const n of p.nodes) {
      for (const k of ['functionName', 'scriptId', 'url', 'lineNumber', 'columnNumber']) assert.ok(k in n.callFrame, `callFrame.${k}`);
      assert.ok(Number.isInteger(n.hitCount) && n.hitCount >= 0);
      for (const c of n.children) {
        assert.ok(ids.has(c), `child ${c} exists`);
        assert.ok(!parents.has(c), `child ${c} has one parent`);
        parents.set(c, n.id);
      }
    }
    const roots = p.nodes.filter((n) => !parents.has(n.id));
    assert.strictEqual(roots.length, 1, 'one root');
    assert.strictEqual(roots[0].callFrame.functionName, '(root)');
    assert.strictEqual(p.samples.length, p.timeDeltas.length);
    assert.strictEqual(p.samples.length, p.nodes.reduce((n, x) => n + x.hitCount, 0), 'a sample per hit');
    const hits = new Map();
    for (const s of p.samples) { assert.ok(ids.has(s)); hits.set(s, (hits.get(s) || 0) + 1); }
    for (const n of p.nodes) assert.strictEqual(hits.get(n.id) || 0, n.hitCount);
    assert.ok(p.timeDeltas.every((d) => d > 0));
    assert.ok(p.endTime >= p.startTime + p.timeDeltas.reduce((a, b) => a + b, 0));
    const hot = p.nodes.filter((n) => n.callFrame.functionName === 'crunchNumbers');
    assert.ok(hot.length > 0 && hot.some((n) => n.hitCount > 0), 'crunchNumbers has samples');
    assert.ok(hot.every((n) => /node-hot\.js$/.test(n.callFrame.url) && n.callFrame.lineNumber === 3), JSON.stringify(hot[0].callFrame));
    // heap windows are not a .cpuprofile
    const h = L.cli(['export', '--store', store, '--worker', 'real', '--type', 'heap', '--format', 'cpuprofile']);
    assert.ok(h.status === 1 || h.status === 2, `heap: ${h.status}`);
    if (h.status === 2) assert.match(h.stderr, /CPU windows only/);
  });

  test('flamegraph: command line, exit codes, stdout, escaping in the file', () => {
    const out = L.cli(['flamegraph', '--store', store, '--worker', 'shop', '--version', 'v1', '--type', 'cpu']);
    assert.strictEqual(out.status, 0, out.stderr);
    assert.match(out.stdout, /^<!DOCTYPE html>/i, 'HTML on stdout when it is not a terminal');
    assert.strictEqual(L.cli(['flamegraph', '--store', store, '--worker', 'nobody', '-o', path.join(dir, 'x.html')]).status, 1);
    assert.ok(!fs.existsSync(path.join(dir, 'x.html')) || fs.statSync(path.join(dir, 'x.html')).size === 0);
    const nb = L.cli(['flamegraph', '--store', store, '--worker', 'shop', '--type', 'cpu', '--base-version', 'v0', '-o', path.join(dir, 'y.html')]);
    assert.strictEqual(nb.status, 1);
    assert.match(nb.stderr, /no window matched the base set/);
    for (const args of [['--fold', 'x'], ['--fold', '100'], ['--fold', '-1'], ['--id', 'abc', '--base-version', 'v1'], ['--format', 'folded'],
      ['--base-since', 'yesterday'], ['--since', '-1m', '--base-until', '-2h', '--base-since', '-1h']]) {
      const r = L.cli(['flamegraph', '--store', store, ...args]);
      assert.strictEqual(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.ok(r.stderr.length > 0);
    }
    const mixed = L.cli(['flamegraph', '--store', store, '--worker', 'real']);
    assert.strictEqual(mixed.status, 2, 'cpu and heap windows of one worker need --type');
    assert.match(mixed.stderr, /--type/);
    const help = L.cli(['--help']).stdout;
    for (const o of ['flamegraph', '--base-version', '--base-since', '--fold', '--format', 'folded', 'cpuprofile']) assert.ok(help.includes(o), `--help names ${o}`);
    const evil = L.cli(['flamegraph', '--store', store, '--worker', 'evil', '--type', 'cpu']).stdout;
    // the page's own script (which names such a string in a comment) aside
    const outside = evil.replace(/<script>[\s\S]*?<\/script>/g, '');
    assert.ok(!outside.includes('<img') && !outside.includes('<svg') && !outside.includes('<b>evil'), 'no markup from the profile in the file');
    assert.ok(evil.includes('\\u003c/script\\u003e\\u003cimg src=x onerror=alert(1)\\u003e'), 'the name is in the data, escaped');
    assert.strictEqual((evil.match(/<\/script>/gi) || []).length, 2, 'the data and the script close their own elements only');
  });

  test('flamegraph in Chromium: hot function, zoom, reset, search, table', async () => {
    const { page, url } = await openPage(['--worker', 'real', '--type', 'cpu'], 'real');
    const title = await page.evaluate('document.title');
    assert.match(title, /real/);
    const header = await page.evaluate("document.getElementById('header').textContent");
    for (const s of ['real', 'r1', 'windows']) assert.ok(header.includes(s), `header names ${s}: ${header}`);
    const hot = await page.evaluate(`(() => {
      const f = [...document.querySelectorAll('#flame .frame')].find((e) => e.textContent.includes('crunchNumbers'));
      return f ? { node: Number(f.dataset.node), width: f.getBoundingClientRect().width } : null; })()`);
    assert.ok(hot, 'a frame names crunchNumbers');
    const full = await page.evaluate("document.getElementById('flame').getBoundingClientRect().width");
    assert.ok(hot.width > 0.2 * full, `crunchNumbers is wide (${hot.width} of ${full} px)`);
    // click: the frame becomes the zoomed root, full width
    await page.click(`#flame .frame[data-node="${hot.node}"]`);
    await page.waitFor(`window.isoprof.zoomedNode === ${hot.node}`, 10000);
    const zw = await page.evaluate(`document.querySelector('#flame .frame[data-node="${hot.node}"]').getBoundingClientRect().width`);
    assert.ok(Math.abs(zw - full) <= 2, `zoomed width ${zw} of ${full}`);
    await page.click('#reset');
    await page.waitFor('window.isoprof.zoomedNode === 0', 10000);
    // search: matches marked, their share shown
    await page.evaluate("window.isoprof.search('crunch')");
    const marked = await page.evaluate(`[...document.querySelectorAll('#flame .frame[data-match="1"]')].map((e) => e.textContent)`);
    assert.ok(marked.length > 0 && marked.every((t) => /crunch/i.test(t)), JSON.stringify(marked));
    const share = await page.evaluate("document.getElementById('matches').textContent");
    const pct = parseFloat(/([\d.]+)\s*%/.exec(share)[1]);
    const topHot = topRows(store, ['--worker', 'real', '--type', 'cpu']).find((r) => r.name === 'crunchNumbers');
    assert.ok(Math.abs(pct - topHot.cumPct) < 0.2, `search share ${pct}% vs top's cum ${topHot.cumPct}%`);
    // the table: every function, sortable by total
    const names = await page.evaluate("[...document.querySelectorAll('#functions tbody td.name')].map((e) => e.textContent)");
    assert.ok(names.some((n) => n.includes('crunchNumbers')), 'the table lists crunchNumbers');
    await page.click('#functions th[data-sort="total"]');
    const first = await page.evaluate("document.querySelector('#functions tbody td.name').textContent");
    assert.ok(first.length > 0);
    assertClean(page, url);
  });

  test('a heap flame graph: values in bytes', async () => {
    // the fake's heap profile (the real workload's heap windows may hold no sample)
    const { page, url } = await openPage(['--worker', 'shop', '--version', 'v1', '--type', 'heap'], 'heap');
    const data = JSON.parse(await page.evaluate("document.getElementById('isoprof-data').textContent"));
    assert.strictEqual(data.type, 'heap');
    assert.strictEqual(data.unit, 'bytes');
    assert.ok(data.total > 0);
    const frames = await page.evaluate("document.querySelectorAll('#flame .frame').length");
    assert.ok(frames > 1, `${frames} frames drawn`);
    assertClean(page, url);
  });

  test('a hostile function name is shown as text and runs nothing', async () => {
    const { page, url } = await openPage(['--worker', 'evil', '--type', 'cpu'], 'evil');
    const texts = await page.evaluate("[...document.querySelectorAll('#flame .frame')].map((e) => e.textContent)");
    assert.ok(texts.some((t) => t.includes(HOSTILE)), `the name as text: ${JSON.stringify(texts)}`);
    assert.ok(texts.some((t) => t.includes(HOSTILE2)));
    const injected = await page.evaluate("document.querySelectorAll('img, svg, b, iframe, object, embed').length");
    assert.strictEqual(injected, 0, 'no element from the profile');
    await page.evaluate(`window.isoprof.search(${JSON.stringify('onerror')})`);
    await page.hover('#flame .frame[data-match="1"]');
    const tip = await page.evaluate("document.getElementById('tooltip').textContent");
    assert.ok(tip.includes('<b>evil</b>.js'), `the file as text in the tooltip: ${tip}`);
    assertClean(page, url);
  });

  test('diff of two versions: the function whose share doubled leads the changes, coloured as grown', async () => {
    const { page, url } = await openPage(['--worker', 'shop', '--type', 'cpu', '--version', 'v2', '--base-version', 'v1'], 'diff');
    const rows = await page.evaluate(`[...document.querySelectorAll('#changes tbody tr')].map((r) => ({
      name: r.querySelector('.name').textContent, cls: r.className }))`);
    assert.ok(rows.length >= 3, JSON.stringify(rows));
    assert.ok(rows[0].name.includes('grows'), `first change: ${JSON.stringify(rows)}`);
    assert.match(rows[0].cls, /grown/);
    assert.ok(rows.slice(1, 3).every((r) => /shrunk/.test(r.cls)), JSON.stringify(rows));
    const cls = await page.evaluate(`[...document.querySelectorAll('#flame .frame')].filter((e) => e.textContent.includes('grows')).map((e) => e.className)`);
    assert.ok(cls.length > 0 && cls.every((c) => /grown/.test(c)), JSON.stringify(cls));
    const steady = await page.evaluate(`[...document.querySelectorAll('#flame .frame')].filter((e) => e.textContent.includes('steadyA')).map((e) => e.className)`);
    assert.ok(steady.every((c) => /shrunk/.test(c)), JSON.stringify(steady));
    const header = await page.evaluate("document.getElementById('header').textContent");
    assert.ok(header.includes('v1') && header.includes('v2'), header);
    assertClean(page, url);
  });
});
