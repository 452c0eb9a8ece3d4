// A workerd worker that keeps a little of every request in module state:
// its isolate's memory grows with the traffic.
const kept = [];

function keepRequestState(n) {
  const block = new Array(8192);
  for (let i = 0; i < block.length; i++) block[i] = { n, i };
  kept.push(block);
  return kept.length;
}

export default {
  async fetch() {
    return new Response(String(keepRequestState(kept.length)));
  },
};
