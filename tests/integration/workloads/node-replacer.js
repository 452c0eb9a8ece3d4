// Integration workload: a service that serializes documents through a JSON
// replacer (regress.test.js). REPLACER_VARIANT=v2 makes the replacer walk
// each document's `meta` subtree (walkNested) before it is written: about
// 30 % of v2's CPU (measured with node --cpu-prof: 31.6 %), the regression
// a deploy brings. v1 (the default) is the code before it. The cold branch
// only makes walkNested too big for V8 to inline into the replacer; it
// recurses too. Beside the serialization each request does about as much
// other work (scoreDoc and the rest of handleRequest), so that the frames
// above the replacer do not hold nearly all of the CPU.
'use strict';
const V2 = process.env.REPLACER_VARIANT === 'v2';

function makeDoc(i) {
  const items = [];
  for (let k = 0; k < 24; k++) items.push({ id: i * 31 + k, price: (k * 7.31) % 97, name: `item-${k}`, tags: ['a', 'b', 'c'] });
  const meta = { owner: `u${i % 97}`, region: 'eu-1', audit: [] };
  for (let k = 0; k < 12; k++) meta.audit.push({ at: i + k, by: `svc-${k}`, note: { text: `changed ${k}`, score: k * 1.5, refs: [k, k + 1, k + 2] } });
  return { id: i, total: items.reduce((s, x) => s + x.price, 0), items, meta };
}

function walkNested(v, depth) {
  let h = 0;
  if (v === null || typeof v !== 'object' || depth > 8) return typeof v === 'string' ? v.length : 1;
  for (const k in v) {
    const x = v[k];
    h = (h * 31 + k.length) | 0;
    if (typeof x === 'string') for (let c = 0; c < x.length; c++) h = (h * 33 + x.charCodeAt(c)) | 0;
    else if (typeof x === 'number') h = (h ^ Math.imul(x | 0, 2654435761)) | 0;
    else h = (h + walkNested(x, depth + 1)) | 0;
  }
  if (depth < 0) { h += Math.imul(h, 1); h += Math.imul(h, 2); h += Math.imul(h, 3); h += Math.imul(h, 4); h += Math.imul(h, 5); h += Math.imul(h, 6); h += Math.imul(h, 7); h += Math.imul(h, 8); h += Math.imul(h, 9); h += Math.imul(h, 10); h += Math.imul(h, 11); h += Math.imul(h, 12); h += Math.imul(h, 13); h += Math.imul(h, 14); h += Math.imul(h, 15); h += Math.imul(h, 16); h += Math.imul(h, 17); h += Math.imul(h, 18); h += Math.imul(h, 19); h += Math.imul(h, 20); h += Math.imul(h, 21); h += Math.imul(h, 22); h += Math.imul(h, 23); h += Math.imul(h, 24); h += Math.imul(h, 25); h += Math.imul(h, 26); h += Math.imul(h, 27); h += Math.imul(h, 28); h += Math.imul(h, 29); h += Math.imul(h, 30); h += Math.imul(h, 31); h += Math.imul(h, 32); h += Math.imul(h, 33); h += Math.imul(h, 34); h += Math.imul(h, 35); h += Math.imul(h, 36); h += Math.imul(h, 37); h += Math.imul(h, 38); h += Math.imul(h, 39); h += Math.imul(h, 40); h += Math.imul(h, 41); h += Math.imul(h, 42); h += Math.imul(h, 43); h += Math.imul(h, 44); h += Math.imul(h, 45); h += Math.imul(h, 46); h += Math.imul(h, 47); h += Math.imul(h, 48); h += Math.imul(h, 49); h += Math.imul(h, 50); h += Math.imul(h, 51); h += Math.imul(h, 52); h += Math.imul(h, 53); h += Math.imul(h, 54); h += Math.imul(h, 55); h += Math.imul(h, 56); h += Math.imul(h, 57); h += Math.imul(h, 58); h += Math.imul(h, 59); h += Math.imul(h, 60); }
  return h;
}

let sink = 0;
function replacer(key, value) {
  if (typeof value === 'number') return Math.round(value * 100) / 100;
  if (key === 'meta' && V2) {
    for (let r = 0; r < WALK_ROUNDS; r++) sink = (sink + walkNested(value, 0)) | 0;
  }
  return value;
}
// How many times v2 walks the subtree: about 30 % of its CPU.
const WALK_ROUNDS = 9;

function serialize(doc) {
  return JSON.stringify(doc, replacer);
}

// The rest of a request's work, beside the serialization: about as much.
function scoreDoc(doc) {
  let s = 0;
  for (let r = 0; r < 600; r++) for (const it of doc.items) s += Math.sqrt(it.price + r) * (it.id % 7);
  return s;
}

function handleRequest(i) {
  const doc = makeDoc(i);
  return (scoreDoc(doc) | 0) + serialize(doc).length;
}

// Busy most of each millisecond, idle the rest: ~70 % of a core.
let n = 0;
setInterval(() => {
  const until = Date.now() + 7;
  while (Date.now() < until) sink = (sink + handleRequest(n++)) | 0;
}, 10);
