// A light workerd worker for the agent section: each request does a fixed
// amount of JS work (workerd's clock does not advance while JS runs, so the
// work is counted in iterations, about a millisecond's worth) and answers.
function item(i, k) { return { k, v: Math.sqrt(k * i + 1), tag: 'item-' + (k % 7) }; }
function order(i) { const o = { id: i, items: [] }; for (let k = 0; k < 40; k++) o.items.push(item(i, k)); return o; }
function total(o) { let s = 0; for (const it of o.items) s += it.v; return s; }
function handle(i) { const o = order(i); o.total = total(o); return JSON.stringify(o).length; }

let seq = 0;
export default {
  async fetch() {
    let n = 0;
    for (let r = 0; r < 60; r++) n += handle(seq++);
    return new Response(String(n));
  },
};
