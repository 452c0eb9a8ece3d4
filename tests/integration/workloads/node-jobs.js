// Integration workload: a job runner (fleet.test.js). The main thread
// starts an unnamed Worker on this file every JOB_EVERY_MS (2000); each
// job runs jobCrunch for JOB_MS (2500) and exits, so one or two run at any
// time and every job is a new thread (a new NodeWorker workerId). Prints
// "job N started" on stderr.
'use strict';
const { Worker, isMainThread } = require('node:worker_threads');

function jobCrunch(ms) {
  const end = Date.now() + ms;
  let s = 0;
  while (Date.now() < end) for (let i = 0; i < 10000; i++) s += Math.sqrt(i);
  return s;
}

if (isMainThread) {
  const every = Number(process.env.JOB_EVERY_MS || 2000);
  let n = 0;
  setInterval(() => {
    n++;
    const w = new Worker(__filename);
    w.on('error', (e) => process.stderr.write(`job ${n} error ${e.message}\n`));
    process.stderr.write(`job ${n} started\n`);
  }, every);
  setInterval(() => {}, 1000);
} else {
  jobCrunch(Number(process.env.JOB_MS || 2500));
}
