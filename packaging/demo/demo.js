// The quick-start demo workload: a "pricing service" whose hot path is one
// obviously expensive function, so the profile has a clear answer.
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
