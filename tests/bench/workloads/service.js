// The target of the overhead benchmark (tests/bench/overhead.js): a plain
// node:http service with a handler shaped like a real one. POST
// /orders/render takes an order as JSON, parses it, validates and prices it
// through a few levels of calls, renders an HTML fragment from a template
// with escaping, and answers a JSON document holding the totals and the
// fragment. About 0.3-0.5 ms of CPU a request on the benchmark machines.
// GET /health answers "ok" (used to wait for the service to be up).
//
//   SERVICE_PORT_FILE=/tmp/x/port node tests/bench/workloads/service.js
//
// Listens on 127.0.0.1 on a port of the kernel's choosing and writes that
// port to SERVICE_PORT_FILE (it prints nothing, so stdout and stderr carry
// only what the runtime or a preloaded profiler prints). It exits when its
// parent process goes away, so a killed benchmark leaves no service behind.
//
// orderBody(seed) builds a request body; overhead.js writes one to a file
// that the load generators send.
'use strict';
const http = require('node:http');
const fs = require('node:fs');

// --- the request body ---------------------------------------------------

const SKUS = ['tea', 'coffee', 'cocoa', 'mate', 'rooibos', 'chai', 'matcha', 'oolong'];
function orderBody(seed = 1) {
  let x = seed;
  const rnd = () => { x = (x * 1103515245 + 12345) % 2147483648; return x / 2147483648; };
  const items = [];
  for (let i = 0; i < 14; i++) {
    items.push({
      sku: `${SKUS[i % SKUS.length]}-${(rnd() * 1000) | 0}`,
      title: `${SKUS[i % SKUS.length]} <${i}> "special" & blend`,
      qty: 1 + ((rnd() * 5) | 0),
      price: Math.round(rnd() * 10000) / 100,
      tags: ['organic', 'loose', 'gift'].slice(0, 1 + (i % 3)),
      options: { grind: i % 2 ? 'fine' : 'coarse', size: ['s', 'm', 'l'][i % 3] },
    });
  }
  return JSON.stringify({
    id: `ord-${seed}`,
    currency: 'EUR',
    locale: 'de-DE',
    customer: { id: 4711, name: 'Erika Mustermann', email: 'erika@example.org', tier: 'gold', country: 'DE' },
    coupon: 'SPRING10',
    items,
    notes: 'Please leave at the door <b>thanks</b>',
  });
}

// --- the handler: a few levels of calls ----------------------------------

const TAX = { DE: 0.19, FR: 0.2, NL: 0.21 };
const TIER_DISCOUNT = { gold: 0.05, silver: 0.02 };

function validateItem(it) {
  if (typeof it.sku !== 'string' || !(it.qty > 0) || !(it.price >= 0)) throw new Error('bad item');
  return { sku: it.sku, title: String(it.title), qty: it.qty | 0, price: +it.price, tags: it.tags || [], options: it.options || {} };
}
function lineDiscount(item, order) {
  let d = TIER_DISCOUNT[order.customer.tier] || 0;
  if (order.coupon === 'SPRING10' && item.tags.includes('organic')) d += 0.1;
  return Math.min(d, 0.3);
}
function priceLine(item, order) {
  const gross = item.qty * item.price;
  const discount = gross * lineDiscount(item, order);
  const net = gross - discount;
  const tax = net * (TAX[order.customer.country] || 0);
  return { ...item, gross, discount, net, tax, total: net + tax };
}
function priceOrder(order) {
  const lines = order.items.map(validateItem).map((it) => priceLine(it, order));
  const sum = (k) => lines.reduce((s, l) => s + l[k], 0);
  return { lines, gross: sum('gross'), discount: sum('discount'), tax: sum('tax'), total: sum('total') };
}

const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
const escapeHtml = (s) => String(s).replace(/[&<>"']/g, (c) => ESC[c]);
// Formatters are cached per locale and currency, as a real service would.
const formatters = new Map();
function money(v, order) {
  const key = `${order.locale}/${order.currency}`;
  let f = formatters.get(key);
  if (!f) formatters.set(key, (f = new Intl.NumberFormat(order.locale, { style: 'currency', currency: order.currency })));
  return f.format(v);
}
// A tiny template engine: {{name}} is escaped, {{{name}}} is raw.
function render(tpl, vars) {
  return tpl.replace(/\{\{(\{?)\s*([\w.]+)\s*\}?\}\}/g, (_, raw, key) => {
    const v = key.split('.').reduce((o, k) => (o == null ? o : o[k]), vars);
    return raw ? String(v ?? '') : escapeHtml(v ?? '');
  });
}
const ROW = '<tr class="{{cls}}"><td>{{line.sku}}</td><td>{{line.title}}</td><td>{{line.qty}}</td>'
  + '<td>{{opts}}</td><td>{{net}}</td><td>{{total}}</td></tr>';
const PAGE = '<section id="{{order.id}}"><h2>Order {{order.id}} for {{order.customer.name}}</h2>'
  + '<p>{{order.notes}}</p><table>{{{rows}}}</table><p class="total">{{total}}</p></section>';
function renderOrder(order, priced) {
  const rows = priced.lines.map((line, i) => render(ROW, {
    cls: i % 2 ? 'odd' : 'even',
    line,
    opts: Object.entries(line.options).map(([k, v]) => `${k}=${v}`).join(', '),
    net: money(line.net, order),
    total: money(line.total, order),
  })).join('');
  return render(PAGE, { order, rows, total: money(priced.total, order) });
}

function handle(body) {
  const order = JSON.parse(body);
  const priced = priceOrder(order);
  const html = renderOrder(order, priced);
  return JSON.stringify({
    id: order.id,
    customer: order.customer.id,
    totals: { gross: priced.gross, discount: priced.discount, tax: priced.tax, total: priced.total },
    lines: priced.lines.map((l) => ({ sku: l.sku, qty: l.qty, total: Math.round(l.total * 100) / 100 })),
    html,
  });
}

// --- the server ---------------------------------------------------------

function serve() {
  const server = http.createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/health') { res.end('ok'); return; }
    if (req.method !== 'POST' || req.url !== '/orders/render') { res.statusCode = 404; res.end(); return; }
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      let out;
      try {
        out = handle(Buffer.concat(chunks).toString('utf8'));
      } catch (e) {
        res.statusCode = 400;
        res.end(JSON.stringify({ error: e.message }));
        return;
      }
      res.setHeader('Content-Type', 'application/json');
      res.end(out);
    });
  });
  server.keepAliveTimeout = 60000;
  server.listen(0, '127.0.0.1', () => {
    const f = process.env.SERVICE_PORT_FILE;
    if (f) {
      // Written whole then renamed, so a reader never sees a partial number.
      fs.writeFileSync(f + '.tmp', String(server.address().port));
      fs.renameSync(f + '.tmp', f);
    }
  });
  // Exit once the parent (the benchmark) is gone: then ppid changes.
  const parent = process.ppid;
  setInterval(() => { if (process.ppid !== parent) process.exit(0); }, 1000).unref();
}

if (require.main === module) serve();
module.exports = { orderBody, handle };
