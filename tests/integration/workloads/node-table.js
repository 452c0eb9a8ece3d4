// Builds a large lookup table once, at its start-up (when the file named
// by TABLE_TRIGGER appears), then idles: a heap profile taken much later
// must still show who allocated the table.
'use strict';
const fs = require('node:fs');

let table = null;
function buildPriceTable(n) {
  const rows = new Array(n);
  for (let i = 0; i < n; i++) {
    rows[i] = { sku: 'sku-' + i, price: (i % 997) * 1.25, tags: ['t' + (i % 13), 'c' + (i % 7)] };
  }
  return rows;
}

const trigger = process.env.TABLE_TRIGGER;
const poll = setInterval(() => {
  if (!trigger || !fs.existsSync(trigger)) return;
  clearInterval(poll);
  table = buildPriceTable(Number(process.env.TABLE_ROWS || 150000));
  process.stderr.write(`table built ${table.length} ${Date.now()}\n`);
  setInterval(() => table.length, 1000); // idle, and keep the table alive
}, 50);
