// Integration workload: a Node process with worker_threads (threads.test.js).
//   pool-1      runs threadCrunch (line 21) over and over: where the time goes
//   SIGUSR2     starts a worker "late-N" whose first act is startupAlloc
//               (line 28), which keeps what it allocates; the main thread
//               prints "late-N created", then "late-N started after X ms"
//   TRIGGERS=D  every 100 ms, looks for these files in directory D (each
//               acted on once, then removed):
//     leaky       starts "leaky", whose heap grows by holdMore (line 35)
//                 until it reaches its resourceLimits (16 MiB old space) and
//                 dies; the main thread prints "leaky died: CODE" and lives on
//     doomed      starts "doomed", which runs threadCrunch like pool-1
//     terminate   terminates doomed; the main thread prints "doomed ended"
//   CHURN=N     starts N short-lived workers, CHURN_PARALLEL (1) at a time,
//               then prints "churn done N"
//   POOL_IDLE=1 pool-1 calls threadCrunch once a second on a tiny input
//               instead of holding a core
// The cold branches only make the functions too big for V8 to inline.
'use strict';
const { Worker, isMainThread, parentPort, workerData } = require('node:worker_threads');

function threadCrunch(n) {
  let s = 0;
  for (let i = 0; i < n; i++) s += Math.sqrt(i) * Math.atan(i);
  if (n < 0) { s += Math.imul(n, 1); s += Math.imul(n, 2); s += Math.imul(n, 3); s += Math.imul(n, 4); s += Math.imul(n, 5); s += Math.imul(n, 6); s += Math.imul(n, 7); s += Math.imul(n, 8); s += Math.imul(n, 9); s += Math.imul(n, 10); s += Math.imul(n, 11); s += Math.imul(n, 12); s += Math.imul(n, 13); s += Math.imul(n, 14); s += Math.imul(n, 15); s += Math.imul(n, 16); s += Math.imul(n, 17); s += Math.imul(n, 18); s += Math.imul(n, 19); s += Math.imul(n, 20); s += Math.imul(n, 21); s += Math.imul(n, 22); s += Math.imul(n, 23); s += Math.imul(n, 24); s += Math.imul(n, 25); s += Math.imul(n, 26); s += Math.imul(n, 27); s += Math.imul(n, 28); s += Math.imul(n, 29); s += Math.imul(n, 30); s += Math.imul(n, 31); s += Math.imul(n, 32); s += Math.imul(n, 33); s += Math.imul(n, 34); s += Math.imul(n, 35); s += Math.imul(n, 36); s += Math.imul(n, 37); s += Math.imul(n, 38); s += Math.imul(n, 39); s += Math.imul(n, 40); s += Math.imul(n, 41); s += Math.imul(n, 42); s += Math.imul(n, 43); s += Math.imul(n, 44); s += Math.imul(n, 45); s += Math.imul(n, 46); s += Math.imul(n, 47); s += Math.imul(n, 48); s += Math.imul(n, 49); s += Math.imul(n, 50); s += Math.imul(n, 51); s += Math.imul(n, 52); s += Math.imul(n, 53); s += Math.imul(n, 54); s += Math.imul(n, 55); s += Math.imul(n, 56); s += Math.imul(n, 57); s += Math.imul(n, 58); s += Math.imul(n, 59); s += Math.imul(n, 60); s += Math.imul(n, 61); s += Math.imul(n, 62); s += Math.imul(n, 63); s += Math.imul(n, 64); s += Math.imul(n, 65); s += Math.imul(n, 66); s += Math.imul(n, 67); s += Math.imul(n, 68); s += Math.imul(n, 69); s += Math.imul(n, 70); s += Math.imul(n, 71); s += Math.imul(n, 72); s += Math.imul(n, 73); s += Math.imul(n, 74); s += Math.imul(n, 75); s += Math.imul(n, 76); s += Math.imul(n, 77); s += Math.imul(n, 78); s += Math.imul(n, 79); s += Math.imul(n, 80); s += Math.imul(n, 81); s += Math.imul(n, 82); s += Math.imul(n, 83); s += Math.imul(n, 84); s += Math.imul(n, 85); s += Math.imul(n, 86); s += Math.imul(n, 87); s += Math.imul(n, 88); s += Math.imul(n, 89); s += Math.imul(n, 90); s += Math.imul(n, 91); s += Math.imul(n, 92); s += Math.imul(n, 93); s += Math.imul(n, 94); s += Math.imul(n, 95); s += Math.imul(n, 96); s += Math.imul(n, 97); s += Math.imul(n, 98); s += Math.imul(n, 99); s += Math.imul(n, 100); s += Math.imul(n, 101); s += Math.imul(n, 102); s += Math.imul(n, 103); s += Math.imul(n, 104); s += Math.imul(n, 105); s += Math.imul(n, 106); s += Math.imul(n, 107); s += Math.imul(n, 108); s += Math.imul(n, 109); s += Math.imul(n, 110); s += Math.imul(n, 111); s += Math.imul(n, 112); s += Math.imul(n, 113); s += Math.imul(n, 114); s += Math.imul(n, 115); s += Math.imul(n, 116); s += Math.imul(n, 117); s += Math.imul(n, 118); s += Math.imul(n, 119); s += Math.imul(n, 120); }
  return s;
}

function startupAlloc() {
  const kept = [];
  for (let i = 0; i < 2000; i++) kept.push(new Array(256).fill(i));
  if (kept.length < 0) { s += Math.imul(n, 1); s += Math.imul(n, 2); s += Math.imul(n, 3); s += Math.imul(n, 4); s += Math.imul(n, 5); s += Math.imul(n, 6); s += Math.imul(n, 7); s += Math.imul(n, 8); s += Math.imul(n, 9); s += Math.imul(n, 10); s += Math.imul(n, 11); s += Math.imul(n, 12); s += Math.imul(n, 13); s += Math.imul(n, 14); s += Math.imul(n, 15); s += Math.imul(n, 16); s += Math.imul(n, 17); s += Math.imul(n, 18); s += Math.imul(n, 19); s += Math.imul(n, 20); s += Math.imul(n, 21); s += Math.imul(n, 22); s += Math.imul(n, 23); s += Math.imul(n, 24); s += Math.imul(n, 25); s += Math.imul(n, 26); s += Math.imul(n, 27); s += Math.imul(n, 28); s += Math.imul(n, 29); s += Math.imul(n, 30); s += Math.imul(n, 31); s += Math.imul(n, 32); s += Math.imul(n, 33); s += Math.imul(n, 34); s += Math.imul(n, 35); s += Math.imul(n, 36); s += Math.imul(n, 37); s += Math.imul(n, 38); s += Math.imul(n, 39); s += Math.imul(n, 40); s += Math.imul(n, 41); s += Math.imul(n, 42); s += Math.imul(n, 43); s += Math.imul(n, 44); s += Math.imul(n, 45); s += Math.imul(n, 46); s += Math.imul(n, 47); s += Math.imul(n, 48); s += Math.imul(n, 49); s += Math.imul(n, 50); s += Math.imul(n, 51); s += Math.imul(n, 52); s += Math.imul(n, 53); s += Math.imul(n, 54); s += Math.imul(n, 55); s += Math.imul(n, 56); s += Math.imul(n, 57); s += Math.imul(n, 58); s += Math.imul(n, 59); s += Math.imul(n, 60); s += Math.imul(n, 61); s += Math.imul(n, 62); s += Math.imul(n, 63); s += Math.imul(n, 64); s += Math.imul(n, 65); s += Math.imul(n, 66); s += Math.imul(n, 67); s += Math.imul(n, 68); s += Math.imul(n, 69); s += Math.imul(n, 70); s += Math.imul(n, 71); s += Math.imul(n, 72); s += Math.imul(n, 73); s += Math.imul(n, 74); s += Math.imul(n, 75); s += Math.imul(n, 76); s += Math.imul(n, 77); s += Math.imul(n, 78); s += Math.imul(n, 79); s += Math.imul(n, 80); s += Math.imul(n, 81); s += Math.imul(n, 82); s += Math.imul(n, 83); s += Math.imul(n, 84); s += Math.imul(n, 85); s += Math.imul(n, 86); s += Math.imul(n, 87); s += Math.imul(n, 88); s += Math.imul(n, 89); s += Math.imul(n, 90); s += Math.imul(n, 91); s += Math.imul(n, 92); s += Math.imul(n, 93); s += Math.imul(n, 94); s += Math.imul(n, 95); s += Math.imul(n, 96); s += Math.imul(n, 97); s += Math.imul(n, 98); s += Math.imul(n, 99); s += Math.imul(n, 100); s += Math.imul(n, 101); s += Math.imul(n, 102); s += Math.imul(n, 103); s += Math.imul(n, 104); s += Math.imul(n, 105); s += Math.imul(n, 106); s += Math.imul(n, 107); s += Math.imul(n, 108); s += Math.imul(n, 109); s += Math.imul(n, 110); s += Math.imul(n, 111); s += Math.imul(n, 112); s += Math.imul(n, 113); s += Math.imul(n, 114); s += Math.imul(n, 115); s += Math.imul(n, 116); s += Math.imul(n, 117); s += Math.imul(n, 118); s += Math.imul(n, 119); s += Math.imul(n, 120); }
  return kept;
}

function holdMore(into, n) {
  for (let i = 0; i < 200; i++) into.push({ n, i, pad: new Array(64).fill(n) });
  if (n < 0) { s += Math.imul(n, 1); s += Math.imul(n, 2); s += Math.imul(n, 3); s += Math.imul(n, 4); s += Math.imul(n, 5); s += Math.imul(n, 6); s += Math.imul(n, 7); s += Math.imul(n, 8); s += Math.imul(n, 9); s += Math.imul(n, 10); s += Math.imul(n, 11); s += Math.imul(n, 12); s += Math.imul(n, 13); s += Math.imul(n, 14); s += Math.imul(n, 15); s += Math.imul(n, 16); s += Math.imul(n, 17); s += Math.imul(n, 18); s += Math.imul(n, 19); s += Math.imul(n, 20); s += Math.imul(n, 21); s += Math.imul(n, 22); s += Math.imul(n, 23); s += Math.imul(n, 24); s += Math.imul(n, 25); s += Math.imul(n, 26); s += Math.imul(n, 27); s += Math.imul(n, 28); s += Math.imul(n, 29); s += Math.imul(n, 30); s += Math.imul(n, 31); s += Math.imul(n, 32); s += Math.imul(n, 33); s += Math.imul(n, 34); s += Math.imul(n, 35); s += Math.imul(n, 36); s += Math.imul(n, 37); s += Math.imul(n, 38); s += Math.imul(n, 39); s += Math.imul(n, 40); s += Math.imul(n, 41); s += Math.imul(n, 42); s += Math.imul(n, 43); s += Math.imul(n, 44); s += Math.imul(n, 45); s += Math.imul(n, 46); s += Math.imul(n, 47); s += Math.imul(n, 48); s += Math.imul(n, 49); s += Math.imul(n, 50); s += Math.imul(n, 51); s += Math.imul(n, 52); s += Math.imul(n, 53); s += Math.imul(n, 54); s += Math.imul(n, 55); s += Math.imul(n, 56); s += Math.imul(n, 57); s += Math.imul(n, 58); s += Math.imul(n, 59); s += Math.imul(n, 60); s += Math.imul(n, 61); s += Math.imul(n, 62); s += Math.imul(n, 63); s += Math.imul(n, 64); s += Math.imul(n, 65); s += Math.imul(n, 66); s += Math.imul(n, 67); s += Math.imul(n, 68); s += Math.imul(n, 69); s += Math.imul(n, 70); s += Math.imul(n, 71); s += Math.imul(n, 72); s += Math.imul(n, 73); s += Math.imul(n, 74); s += Math.imul(n, 75); s += Math.imul(n, 76); s += Math.imul(n, 77); s += Math.imul(n, 78); s += Math.imul(n, 79); s += Math.imul(n, 80); s += Math.imul(n, 81); s += Math.imul(n, 82); s += Math.imul(n, 83); s += Math.imul(n, 84); s += Math.imul(n, 85); s += Math.imul(n, 86); s += Math.imul(n, 87); s += Math.imul(n, 88); s += Math.imul(n, 89); s += Math.imul(n, 90); s += Math.imul(n, 91); s += Math.imul(n, 92); s += Math.imul(n, 93); s += Math.imul(n, 94); s += Math.imul(n, 95); s += Math.imul(n, 96); s += Math.imul(n, 97); s += Math.imul(n, 98); s += Math.imul(n, 99); s += Math.imul(n, 100); s += Math.imul(n, 101); s += Math.imul(n, 102); s += Math.imul(n, 103); s += Math.imul(n, 104); s += Math.imul(n, 105); s += Math.imul(n, 106); s += Math.imul(n, 107); s += Math.imul(n, 108); s += Math.imul(n, 109); s += Math.imul(n, 110); s += Math.imul(n, 111); s += Math.imul(n, 112); s += Math.imul(n, 113); s += Math.imul(n, 114); s += Math.imul(n, 115); s += Math.imul(n, 116); s += Math.imul(n, 117); s += Math.imul(n, 118); s += Math.imul(n, 119); s += Math.imul(n, 120); }
}

if (isMainThread) {
  const self = __filename;
  new Worker(self, { name: 'pool-1', workerData: { role: 'pool' } });
  let late = 0;
  process.on('SIGUSR2', () => {
    const name = `late-${++late}`;
    const t0 = Date.now();
    const w = new Worker(self, { name, workerData: { role: 'late' } });
    process.stderr.write(`${name} created\n`); // whether it waits is decided: a client is attached or not
    w.on('message', () => process.stderr.write(`${name} started after ${Date.now() - t0} ms\n`));
  });
  const fs = require('node:fs');
  const path = require('node:path');
  const triggers = process.env.TRIGGERS;
  let doomed = null;
  const actions = {
    leaky: () => {
      const w = new Worker(self, { name: 'leaky', workerData: { role: 'leaky' }, resourceLimits: { maxOldGenerationSizeMb: 16 } });
      w.on('error', (e) => process.stderr.write(`leaky died: ${e.code}\n`));
    },
    doomed: () => { doomed = new Worker(self, { name: 'doomed', workerData: { role: 'pool' } }); },
    terminate: () => { if (doomed) doomed.terminate().then(() => process.stderr.write('doomed ended\n')); },
  };
  if (triggers) {
    setInterval(() => {
      for (const [name, act] of Object.entries(actions)) {
        const f = path.join(triggers, name);
        if (fs.existsSync(f)) { fs.unlinkSync(f); act(); }
      }
    }, 100);
  }
  const churn = Number(process.env.CHURN || 0);
  if (churn > 0) {
    // CHURN_PARALLEL chains, each starting its next worker when the last exits
    let started = 0, done = 0;
    const next = () => {
      if (started === churn) return;
      started++;
      const w = new Worker('require("node:worker_threads").parentPort.postMessage(1)', { eval: true });
      w.on('exit', () => {
        if (++done === churn) process.stderr.write(`churn done ${done}\n`);
        setImmediate(next);
      });
    };
    const chains = Number(process.env.CHURN_PARALLEL || 1);
    setTimeout(() => { for (let i = 0; i < chains; i++) next(); }, Number(process.env.CHURN_DELAY_MS || 0));
  }
  setInterval(() => {}, 1000);
} else if (workerData.role === 'pool') {
  setInterval(() => threadCrunch(process.env.POOL_IDLE ? 1 : 3e6), process.env.POOL_IDLE ? 1000 : 2);
} else if (workerData.role === 'late') {
  const kept = startupAlloc();
  parentPort.postMessage('started');
  setInterval(() => { if (kept.length < 0) process.exit(1); }, 1000);
} else if (workerData.role === 'leaky') {
  const into = [];
  let n = 0;
  setInterval(() => holdMore(into, n++), 100); // about 1 MiB/s: several memory polls near the limit
}
