// The quick-start demo workload: a "pricing service" whose hot path is one
// obviously expensive function, so the profile has a clear answer. No HTTP:
// a setImmediate loop keeps the event loop busy and alive.
'use strict';

// Hot: naive recursion, called for every simulated request.
function fibonacciHot(n) {
  return n < 2 ? n : fibonacciHot(n - 1) + fibonacciHot(n - 2);
}

// Cold: cheap bookkeeping that also runs for every request.
function formatReceipt(id, total) {
  return JSON.stringify({ id, total, currency: 'EUR' });
}

let served = 0;
function handleRequest() {
  const price = fibonacciHot(24);
  formatReceipt(served++, price);
}

function loop() {
  for (let i = 0; i < 20; i++) handleRequest();
  setImmediate(loop);
}
loop();

// run.sh names itself here: if it dies without cleaning up (SIGKILL), the
// demo must not keep a core busy and the inspector port taken.
const parent = Number(process.env.ISOPROF_DEMO_PARENT || 0);
if (parent > 0) {
  setInterval(() => {
    try { process.kill(parent, 0); } catch (_) { process.exit(0); }
  }, 1000).unref();
}
