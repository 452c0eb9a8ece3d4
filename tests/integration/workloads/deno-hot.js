// Integration workload for Deno: denoCrunch (line 3) is where the time goes.
// The cold branch only makes the function too big for V8 to inline.
function denoCrunch(n) {
  let s = 0;
  for (let i = 0; i < n; i++) s += Math.sqrt(i) * Math.cos(i);
  if (n < 0) { s += Math.imul(n, 1); s += Math.imul(n, 2); s += Math.imul(n, 3); s += Math.imul(n, 4); s += Math.imul(n, 5); s += Math.imul(n, 6); s += Math.imul(n, 7); s += Math.imul(n, 8); s += Math.imul(n, 9); s += Math.imul(n, 10); s += Math.imul(n, 11); s += Math.imul(n, 12); s += Math.imul(n, 13); s += Math.imul(n, 14); s += Math.imul(n, 15); s += Math.imul(n, 16); s += Math.imul(n, 17); s += Math.imul(n, 18); s += Math.imul(n, 19); s += Math.imul(n, 20); s += Math.imul(n, 21); s += Math.imul(n, 22); s += Math.imul(n, 23); s += Math.imul(n, 24); s += Math.imul(n, 25); s += Math.imul(n, 26); s += Math.imul(n, 27); s += Math.imul(n, 28); s += Math.imul(n, 29); s += Math.imul(n, 30); s += Math.imul(n, 31); s += Math.imul(n, 32); s += Math.imul(n, 33); s += Math.imul(n, 34); s += Math.imul(n, 35); s += Math.imul(n, 36); s += Math.imul(n, 37); s += Math.imul(n, 38); s += Math.imul(n, 39); s += Math.imul(n, 40); s += Math.imul(n, 41); s += Math.imul(n, 42); s += Math.imul(n, 43); s += Math.imul(n, 44); s += Math.imul(n, 45); s += Math.imul(n, 46); s += Math.imul(n, 47); s += Math.imul(n, 48); s += Math.imul(n, 49); s += Math.imul(n, 50); s += Math.imul(n, 51); s += Math.imul(n, 52); s += Math.imul(n, 53); s += Math.imul(n, 54); s += Math.imul(n, 55); s += Math.imul(n, 56); s += Math.imul(n, 57); s += Math.imul(n, 58); s += Math.imul(n, 59); s += Math.imul(n, 60); s += Math.imul(n, 61); s += Math.imul(n, 62); s += Math.imul(n, 63); s += Math.imul(n, 64); s += Math.imul(n, 65); s += Math.imul(n, 66); s += Math.imul(n, 67); s += Math.imul(n, 68); s += Math.imul(n, 69); s += Math.imul(n, 70); s += Math.imul(n, 71); s += Math.imul(n, 72); s += Math.imul(n, 73); s += Math.imul(n, 74); s += Math.imul(n, 75); s += Math.imul(n, 76); s += Math.imul(n, 77); s += Math.imul(n, 78); s += Math.imul(n, 79); s += Math.imul(n, 80); s += Math.imul(n, 81); s += Math.imul(n, 82); s += Math.imul(n, 83); s += Math.imul(n, 84); s += Math.imul(n, 85); s += Math.imul(n, 86); s += Math.imul(n, 87); s += Math.imul(n, 88); s += Math.imul(n, 89); s += Math.imul(n, 90); s += Math.imul(n, 91); s += Math.imul(n, 92); s += Math.imul(n, 93); s += Math.imul(n, 94); s += Math.imul(n, 95); s += Math.imul(n, 96); s += Math.imul(n, 97); s += Math.imul(n, 98); s += Math.imul(n, 99); s += Math.imul(n, 100); s += Math.imul(n, 101); s += Math.imul(n, 102); s += Math.imul(n, 103); s += Math.imul(n, 104); s += Math.imul(n, 105); s += Math.imul(n, 106); s += Math.imul(n, 107); s += Math.imul(n, 108); s += Math.imul(n, 109); s += Math.imul(n, 110); s += Math.imul(n, 111); s += Math.imul(n, 112); s += Math.imul(n, 113); s += Math.imul(n, 114); s += Math.imul(n, 115); s += Math.imul(n, 116); s += Math.imul(n, 117); s += Math.imul(n, 118); s += Math.imul(n, 119); s += Math.imul(n, 120); }
  return s;
}

function tick() {
  denoCrunch(300000);
  setTimeout(tick, 1);
}

// The hot loop starts once the agent is likely profiling; denoCrunch keeps
// its own frame whenever its caller was optimized (too big to inline).
setTimeout(tick, 5000);
