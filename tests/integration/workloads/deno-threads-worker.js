// The Worker of deno-threads.js: denoThreadCrunch (line 4) is the timer
// callback itself, so V8 has no JS caller to inline it into.

function denoThreadCrunch(n) {
  let s = 0;
  for (let i = 0; i < n; i++) s += Math.sqrt(i) * Math.atan(i);
  return s;
}

setInterval(denoThreadCrunch, 2, 2e6);
