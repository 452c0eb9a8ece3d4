// One Node process whose THREADS worker threads each run agent-node.js's
// light load (the main thread idles): the threads side of
// bench_threads.js, set against THREADS processes of one thread each.
'use strict';
const path = require('node:path');
const { Worker } = require('node:worker_threads');

const n = Number(process.env.THREADS || '16');
for (let i = 0; i < n; i++) new Worker(path.join(__dirname, 'agent-node.js'), { name: `t${i}` });
setInterval(() => {}, 1000);
