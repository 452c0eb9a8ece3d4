// A service that loads a large catalogue at start and then idles: a heap
// of BIG_HEAP_ITEMS small objects (default 400,000: about 1.2 million heap
// snapshot nodes, 65 MiB of used heap), whose heap snapshot takes V8
// seconds to build and seconds more to write. It says "heap built" on
// stderr when done.
'use strict';

const n = Number(process.env.BIG_HEAP_ITEMS || 400000);
const catalogue = [];
for (let i = 0; i < n; i++) catalogue.push({ sku: i, name: 'item-' + i, prices: [i, i + 1] });
globalThis.catalogue = catalogue;
process.stderr.write(`heap built ${n}\n`);
setInterval(() => {}, 1000);
