// Heap shapes for the memory watch (memwatch.test.js), one per MODE:
//   hold      holds HOLD_MB of live data from the start, nothing more
//   leak      keeps LEAK_KB_PER_TICK of session records every 10 ms in a
//             module-level Map that nothing ever clears (the leak)
//   cache     fills a cache for 15 s, then serves from it: the heap plateaus
//   sawtooth  a steady live set and a lot of short-lived request garbage
'use strict';

const MODE = process.env.MODE || 'hold';
const held = [];

// A chunk of about kb KiB of live data the GC cannot free while held.
function chunk(kb) {
  const a = new Array(kb * 128); // 8 bytes a slot
  for (let i = 0; i < a.length; i++) a[i] = i * 1.5;
  return a;
}

if (MODE === 'hold') {
  const mb = Number(process.env.HOLD_MB || 150);
  for (let i = 0; i < mb; i++) held.push(chunk(1024));
  setInterval(() => { held.length; }, 1000);
}

// The leak: every session ever seen is remembered, with its payload.
const sessions = new Map();
let nextSession = 0;

// Called by the timers (native code), large enough not to be inlined: the
// heap profile charges its allocations to it.
function rememberSessions(kb) {
  for (let n = 0; n < 4; n++) {
    const id = 'session-' + (nextSession++) + '-' + Date.now().toString(36);
    const payload = new Array(kb * 32);
    for (let i = 0; i < payload.length; i++) payload[i] = { seq: i, at: nextSession };
    const record = {
      id,
      created: Date.now(),
      user: { name: 'user' + (nextSession % 9973), tags: ['a', 'b', id.length] },
      payload,
      history: [],
    };
    for (let h = 0; h < 8; h++) record.history.push({ step: h, note: id + ':' + h });
    if (record.payload.length !== kb * 32) throw new Error('short payload');
    sessions.set(id, record);
  }
}

if (MODE === 'leak') {
  const kb = Number(process.env.LEAK_KB_PER_TICK || 8);
  setInterval(rememberSessions, 10, kb);
}

if (MODE === 'cache') {
  const cache = new Map();
  const start = Date.now();
  let k = 0;
  setInterval(() => {
    if (Date.now() - start < 15000) {
      cache.set(k, chunk(256));
      k++;
    } else {
      // served from the cache: reads, and a little garbage
      let s = 0;
      for (let i = 0; i < 50; i++) s += cache.get(i % k)[i];
      JSON.stringify({ s });
    }
  }, 25);
}

if (MODE === 'sawtooth') {
  for (let i = 0; i < 40; i++) held.push(chunk(1024));
  setInterval(() => {
    const garbage = [];
    for (let i = 0; i < 200; i++) garbage.push({ i, s: 'request-' + i, v: new Array(64).fill(i) });
    JSON.stringify(garbage.length);
  }, 2);
}
