// A service whose metrics registry keeps every label set it ever sees:
// each request carries a new user id, so the registry grows until V8
// kills the isolate at its heap limit (run it with a small
// --max-old-space-size). LEAK_PER_TICK sets the speed (requests per
// 10 ms), LEAK_START_MS when the requests begin.
'use strict';

class MetricsRegistry {
  constructor() {
    this.series = new Map();
  }

  // Sanitises the label values, then finds or creates the series. The
  // series are never dropped: that is the leak.
  observe(name, labels, value) {
    const parts = [name];
    for (const key of Object.keys(labels).sort()) {
      let v = String(labels[key]);
      if (v.length > 64) v = v.slice(0, 64);
      let clean = '';
      for (let i = 0; i < v.length; i++) {
        const c = v.charCodeAt(i);
        clean += c === 44 || c === 61 || c === 123 || c === 125 ? '_' : v[i];
      }
      parts.push(key + '=' + clean);
    }
    const id = parts.join(',');
    let s = this.series.get(id);
    if (s === undefined) {
      s = { id, labels: { ...labels }, count: 0, sum: 0, buckets: new Array(24).fill(0) };
      this.series.set(id, s);
    }
    s.count++;
    s.sum += value;
    let b = 0;
    while (b < 23 && value > 2 ** b) b++;
    s.buckets[b]++;
  }
}

const registry = new MetricsRegistry();
let served = 0;

function handleRequest() {
  const n = served++;
  const started = process.hrtime.bigint();
  const route = n % 50 === 0 ? '/checkout' : '/item';
  const body = JSON.stringify({ route, n });
  const ms = Number(process.hrtime.bigint() - started) / 1e6 + body.length / 1000;
  registry.observe('http_request_duration_ms', { route, user: 'u' + n, status: 200 + (n % 3) }, ms);
}

const perTick = Number(process.env.LEAK_PER_TICK || 100);
const startDelay = Number(process.env.LEAK_START_MS || 0);
setTimeout(() => {
  process.stderr.write(`leak started ${Date.now()}\n`);
  setInterval(() => {
    for (let i = 0; i < perTick; i++) handleRequest();
  }, 10);
}, startDelay);
