// Integration workload for Deno's Workers (deno.test.js): the main thread
// idles; one Worker runs deno-threads-worker.js, whose denoThreadCrunch
// is where its time goes.
const worker = new Worker(new URL('./deno-threads-worker.js', import.meta.url).href, { type: 'module', name: 'dpool' });
worker.onerror = (e) => console.error(`worker error: ${e.message}`);
setInterval(() => {}, 1000);
