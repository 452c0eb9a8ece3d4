// Integration workload for Deno's Workers (deno.test.js): the main thread
// holds about 40 MiB of live data and idles (a near-limit episode under a
// low anomaly.memory.threshold); one Worker runs deno-threads-worker.js,
// whose denoThreadCrunch is where its time goes.
const held = [];
for (let i = 0; i < 40; i++) {
  const a = new Array(131072); // 1 MiB of doubles
  for (let j = 0; j < a.length; j++) a[j] = j * 1.5;
  held.push(a);
}
const worker = new Worker(new URL('./deno-threads-worker.js', import.meta.url).href, { type: 'module', name: 'dpool' });
worker.onerror = (e) => console.error(`worker error: ${e.message}`);
setInterval(() => { held.length; }, 1000);
