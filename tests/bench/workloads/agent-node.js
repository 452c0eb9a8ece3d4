// A light Node target for the agent section: WORK_MS of JS work (building
// and serializing small objects through a few functions) every EVERY_MS,
// so its CPU profiles have content while fifty of them still leave most of
// a 2-core machine idle.
'use strict';
const WORK_MS = Number(process.env.WORK_MS || '1.5');
const EVERY_MS = Number(process.env.EVERY_MS || '150');

function item(i, k) { return { k, v: Math.sqrt(k * i + 1), tag: 'item-' + (k % 7) }; }
function order(i) { const o = { id: i, items: [] }; for (let k = 0; k < 40; k++) o.items.push(item(i, k)); return o; }
function total(o) { let s = 0; for (const it of o.items) s += it.v; return s; }
function handle(i) { const o = order(i); o.total = total(o); return JSON.stringify(o).length; }

let n = 0, i = 0;
setInterval(() => {
  const end = performance.now() + WORK_MS;
  while (performance.now() < end) n += handle(i++);
}, EVERY_MS);
