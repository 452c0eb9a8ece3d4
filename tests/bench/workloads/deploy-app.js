// The target of the deploy benchmark (tests/bench/bench_deploy.js): a
// service-shaped loop whose new version costs more in one function.
//
//   DEPLOY_ADDED=0.1 DEPLOY_BUSY=0.4 node --inspect=127.0.0.1:0 deploy-app.js
//
// It handles requests for DEPLOY_BUSY of the time (0.4: bursts of 2 to 6 ms
// between idle gaps of 3 to 9 ms), so the process takes about that share
// of a core whatever its version. A request builds a document, scores it
// (scoreDoc) and serializes it through a JSON replacer; for the document's
// `meta` the replacer hashes the audit subtree twice (walkNested), about
// 6 % of the old version's CPU.
//
// DEPLOY_ADDED=X (default 0, the old version) makes walkNested hash the
// subtree more often, by X times the CPU of a request of the old version:
// 0.05 is "+5 % of the CPU added in one function". The rounds per request
// come from WALKS_PER_REQUEST, the CPU of one request over that of one
// walk; fractions of a round are carried from request to request. What a
// run really added is read back from its profiles: bench_deploy.js reports
// walkNested's share before and after, and the X they imply.
//
// walkNested is large (a cold branch of straight-line code) so that V8
// never inlines it into the replacer: its frame is in every profile.
'use strict';

const ADDED = Number(process.env.DEPLOY_ADDED || '0');
const BUSY = Number(process.env.DEPLOY_BUSY || '0.4');
const BASE_WALKS = 2;
// CPU of one old-version request / CPU of one walk, from `node --cpu-prof`
// of this file on Node 20.20.2 (busy 0.4, 15 s): the shares of walkNested
// that DEPLOY_ADDED=0.3 and 1 gave implied 36.6 and 35.4.
const WALKS_PER_REQUEST = 36;

function makeDoc(i) {
  const items = [];
  for (let k = 0; k < 20; k++) items.push({ id: i * 17 + k, price: (k * 3.7 + i) % 89, sku: `sku-${k}`, flags: ['x', 'y'] });
  const audit = [];
  for (let k = 0; k < 10; k++) audit.push({ at: i + k, actor: `actor-${k % 4}`, change: { field: `f${k}`, from: k, to: k + 1, why: `reason ${k}` } });
  return { id: i, items, meta: { tenant: `t${i % 13}`, audit } };
}

function hashValue(x, depth) {
  let h = 0;
  if (typeof x === 'string') for (let c = 0; c < x.length; c++) h = (h * 33 + x.charCodeAt(c)) | 0;
  else if (typeof x === 'number') h = Math.imul(x | 0, 0x9e3779b1);
  else h = walkNested(x, depth + 1);
  return h;
}

function walkNested(v, depth) {
  if (v === null || typeof v !== 'object' || depth > 8) return typeof v === 'string' ? v.length : 1;
  let h = depth;
  // Arrays by index, objects by for-in (their enum cache): a walk
  // allocates nothing, so its cost is its own and not the collector's.
  const isArray = Array.isArray(v);
  const keys = isArray ? null : v;
  const n = isArray ? v.length : 0;
  for (let i = 0; isArray && i < n; i++) h = (h * 31 + hashValue(v[i], depth)) | 0;
  for (const k in keys) h = (h * 31 + k.length + hashValue(v[k], depth)) | 0;
  if (depth < 0) {
    // Never runs: only its bytecode size matters (over V8's inlining limit).
    h = (h + Math.imul(h, 3) + Math.imul(h, 5) + Math.imul(h, 7) + Math.imul(h, 11) + Math.imul(h, 13)) | 0;
    h = (h + Math.imul(h, 17) + Math.imul(h, 19) + Math.imul(h, 23) + Math.imul(h, 29) + Math.imul(h, 31)) | 0;
    h = (h + Math.imul(h, 37) + Math.imul(h, 41) + Math.imul(h, 43) + Math.imul(h, 47) + Math.imul(h, 53)) | 0;
    h = (h + Math.imul(h, 59) + Math.imul(h, 61) + Math.imul(h, 67) + Math.imul(h, 71) + Math.imul(h, 73)) | 0;
    h = (h + Math.imul(h, 79) + Math.imul(h, 83) + Math.imul(h, 89) + Math.imul(h, 97) + Math.imul(h, 101)) | 0;
    h = (h + Math.imul(h, 103) + Math.imul(h, 107) + Math.imul(h, 109) + Math.imul(h, 113) + Math.imul(h, 127)) | 0;
    h = (h + Math.imul(h, 131) + Math.imul(h, 137) + Math.imul(h, 139) + Math.imul(h, 149) + Math.imul(h, 151)) | 0;
    h = (h + Math.imul(h, 157) + Math.imul(h, 163) + Math.imul(h, 167) + Math.imul(h, 173) + Math.imul(h, 179)) | 0;
    h = (h + Math.imul(h, 181) + Math.imul(h, 191) + Math.imul(h, 193) + Math.imul(h, 197) + Math.imul(h, 199)) | 0;
    h = (h + Math.imul(h, 211) + Math.imul(h, 223) + Math.imul(h, 227) + Math.imul(h, 229) + Math.imul(h, 233)) | 0;
    h = (h + Math.imul(h, 239) + Math.imul(h, 241) + Math.imul(h, 251) + Math.imul(h, 257) + Math.imul(h, 263)) | 0;
    h = (h + Math.imul(h, 269) + Math.imul(h, 271) + Math.imul(h, 277) + Math.imul(h, 281) + Math.imul(h, 283)) | 0;
    h = (h + Math.imul(h, 293) + Math.imul(h, 307) + Math.imul(h, 311) + Math.imul(h, 313) + Math.imul(h, 317)) | 0;
    h = (h + Math.imul(h, 331) + Math.imul(h, 337) + Math.imul(h, 347) + Math.imul(h, 349) + Math.imul(h, 353)) | 0;
    h = (h + Math.imul(h, 359) + Math.imul(h, 367) + Math.imul(h, 373) + Math.imul(h, 379) + Math.imul(h, 383)) | 0;
    h = (h + Math.imul(h, 389) + Math.imul(h, 397) + Math.imul(h, 401) + Math.imul(h, 409) + Math.imul(h, 419)) | 0;
  }
  return h;
}

let sink = 0;
let credit = 0; // rounds of the added work owed, carried between requests
const extraPerRequest = ADDED * WALKS_PER_REQUEST;
function replacer(key, value) {
  if (typeof value === 'number') return Math.round(value * 100) / 100;
  if (key === 'meta') {
    credit += extraPerRequest;
    let rounds = BASE_WALKS;
    while (credit >= 1) { rounds++; credit -= 1; }
    for (let r = 0; r < rounds; r++) sink = (sink + walkNested(value, 0)) | 0;
  }
  return value;
}

function scoreDoc(doc) {
  let s = 0;
  for (let r = 0; r < 200; r++) for (const it of doc.items) s += Math.sqrt(it.price + r) * ((it.id % 5) + 1);
  return s;
}

function handleRequest(i) {
  const doc = makeDoc(i);
  return (scoreDoc(doc) | 0) + JSON.stringify(doc, replacer).length;
}

// Bursts of work and idle gaps of random lengths (uniform, mean 10 ms a
// cycle): a fixed 10 ms timer would beat with the 10 ms sampling interval
// and put whole windows' samples in the work or in the gaps.
let n = 0;
let seed = process.pid >>> 0 || 1;
const rnd = () => { seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0; return seed / 4294967296; };
function cycle() {
  const until = performance.now() + BUSY * 10 * (0.5 + rnd());
  while (performance.now() < until) sink = (sink + handleRequest(n++)) | 0;
  setTimeout(cycle, (1 - BUSY) * 10 * (0.5 + rnd()));
}
cycle();
