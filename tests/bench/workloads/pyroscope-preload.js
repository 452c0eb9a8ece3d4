// Starts the in-process peer, @pyroscope/nodejs, inside a service before
// the service's own code runs, configured as its documentation shows and at
// its defaults otherwise (wall profiler at 100 Hz in 60 s windows, heap
// sampling every 512 KiB, a flush to <serverAddress>/ingest every 60 s):
//
//   PYROSCOPE_NODE_MODULES=~/.cache/isoprof/npm/node_modules \
//   BENCH_PYROSCOPE_URL=http://127.0.0.1:PORT \
//   node --require tests/bench/workloads/pyroscope-preload.js service.js
//
// PYROSCOPE_NODE_MODULES is the node_modules directory holding the package
// (the benchmarks install it outside the repository); BENCH_PYROSCOPE_URL is
// the loopback ingest server the profiles go to.
'use strict';
const path = require('node:path');

const modules = process.env.PYROSCOPE_NODE_MODULES;
const url = process.env.BENCH_PYROSCOPE_URL;
if (!modules || !url) throw new Error('pyroscope-preload: set PYROSCOPE_NODE_MODULES and BENCH_PYROSCOPE_URL');
const Pyroscope = require(path.join(modules, '@pyroscope', 'nodejs'));

Pyroscope.init({ serverAddress: url, appName: 'bench' });
Pyroscope.start();
