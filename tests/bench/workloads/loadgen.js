// An open-loop load generator for the overhead benchmark
// (tests/bench/overhead.js): it sends POST requests at a constant rate
// whatever the server does, and measures each request's latency from the
// time it was SCHEDULED to be sent to the end of its answer. A server that
// stalls therefore shows the whole stall in the latency of every request
// that should have gone out meanwhile (no coordinated omission), which a
// closed-loop client such as wrk hides.
//
//   node loadgen.js --url http://127.0.0.1:PORT/orders/render --body FILE
//        --rate 800 --seconds 5 [--connections 64] [--drain-ms 5000]
//
// Requests beyond the open keep-alive connections wait in the agent's queue;
// that wait counts, as it would for a real client. At the end one JSON line
// goes to stdout:
//   {rate, seconds, scheduled, completed, errors, unfinished, achieved_rps,
//    latency_us: {min, p50, p90, p99, p999, max, mean},
//    send_lag_us: {p50, p99, max}}   (how late the generator itself sent)
// Requests still unanswered drain-ms after the last was scheduled are
// counted as unfinished and enter the percentiles with their latency so far
// (a lower bound), so a hung server cannot look fast.
'use strict';
const http = require('node:http');
const fs = require('node:fs');

function arg(name, def) {
  const i = process.argv.indexOf('--' + name);
  return i > 0 ? process.argv[i + 1] : def;
}
const url = new URL(arg('url'));
const body = fs.readFileSync(arg('body'));
const rate = parseFloat(arg('rate', '500'));
const seconds = parseFloat(arg('seconds', '5'));
const connections = parseInt(arg('connections', '64'), 10);
const drainMs = parseFloat(arg('drain-ms', '5000'));

const agent = new http.Agent({ keepAlive: true, maxSockets: connections, maxFreeSockets: connections });
const total = Math.max(1, Math.round(rate * seconds));
const lat = new Float64Array(total).fill(NaN); // µs from schedule to answer end
const lag = new Float64Array(total).fill(NaN); // µs from schedule to send call
let completed = 0;
let errors = 0;
const now = () => Number(process.hrtime.bigint()) / 1e3; // µs

const stepUs = 1e6 / rate;
let t0;
let next = 0;

function send(i) {
  const sched = t0 + i * stepUs;
  lag[i] = now() - sched;
  const req = http.request({
    agent, host: url.hostname, port: url.port, path: url.pathname, method: 'POST',
    headers: { 'Content-Type': 'application/json', 'Content-Length': body.length },
  }, (res) => {
    res.on('data', () => {});
    res.on('end', () => {
      lat[i] = now() - sched;
      if (res.statusCode === 200) completed++; else errors++;
      maybeDone();
    });
  });
  req.on('error', () => { lat[i] = now() - sched; errors++; maybeDone(); });
  req.end(body);
}

// Sends every request whose time has come; runs from a 1 ms timer, so a
// request goes out at most about a millisecond late when the generator
// itself is not delayed (send_lag_us shows when it was).
function tick() {
  const t = now();
  while (next < total && t0 + next * stepUs <= t) send(next++);
  if (next < total) setTimeout(tick, 1);
  else drainTimer = setTimeout(finish, drainMs);
}

let drainTimer = null;
let finished = false;
function maybeDone() {
  if (next === total && completed + errors === total) { clearTimeout(drainTimer); finish(); }
}

function pct(sorted, q) {
  if (!sorted.length) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
}
function finish() {
  if (finished) return;
  finished = true;
  const end = now();
  let unfinished = 0;
  for (let i = 0; i < total; i++) {
    if (Number.isNaN(lat[i])) { unfinished++; lat[i] = end - (t0 + i * stepUs); }
  }
  const s = Float64Array.from(lat).sort();
  const g = Float64Array.from(lag).sort();
  const r = (x) => Math.round(x);
  const out = {
    rate, seconds, scheduled: total, completed, errors, unfinished,
    achieved_rps: completed / ((total * stepUs) / 1e6),
    latency_us: {
      min: r(s[0]), p50: r(pct(s, 0.5)), p90: r(pct(s, 0.9)), p99: r(pct(s, 0.99)), p999: r(pct(s, 0.999)),
      max: r(s[s.length - 1]), mean: r(s.reduce((a, b) => a + b, 0) / s.length),
    },
    send_lag_us: { p50: r(pct(g, 0.5)), p99: r(pct(g, 0.99)), max: r(g[g.length - 1]) },
  };
  process.stdout.write(JSON.stringify(out) + '\n');
  agent.destroy();
  process.exit(0);
}

t0 = now() + 20000; // first request 20 ms from now
setTimeout(tick, 20);
