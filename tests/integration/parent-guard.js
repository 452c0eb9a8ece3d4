// Preloaded into the Node and Deno workloads (node --require, deno
// --preload): when the process that started the workload goes away (a test
// process killed without cleaning up, e.g. by CTest's timeout), the
// workload exits instead of keeping a core busy and a port taken. It polls
// the parent pid: reading stdin in a Deno preload stalls the main module's
// timers. No module syntax is used, so both runtimes load it as it is.
(function guard() {
  const isDeno = typeof Deno !== 'undefined';
  const ppid = () => (isDeno ? Deno.ppid : process.ppid);
  const parent = ppid();
  const t = setInterval(() => {
    if (ppid() !== parent) (isDeno ? Deno.exit : process.exit)(0);
  }, 500);
  if (isDeno) Deno.unrefTimer(t); else t.unref();
})();
