-- wrk script of the overhead benchmark (tests/bench/overhead.js): every
-- request is POST /orders/render with the body read from the file named by
-- the BODY_FILE environment variable, and when the run is over one JSON line
-- goes to stdout, prefixed "WRK-JSON " so it can be told from wrk's own text:
--   {requests, duration_us, bytes, errors: {connect, read, write, status,
--    timeout}, latency_us: {min, max, mean, stdev, p50, p90, p99, p999}}
-- Latencies are wrk's (closed loop: from each request's send to its answer).

local f = assert(io.open(assert(os.getenv("BODY_FILE"), "BODY_FILE not set"), "rb"))
local body = f:read("*a")
f:close()

wrk.method = "POST"
wrk.path = "/orders/render"
wrk.body = body
wrk.headers["Content-Type"] = "application/json"

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK-JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"min":%d,"max":%d,"mean":%.1f,"stdev":%.1f,"p50":%d,"p90":%d,"p99":%d,"p999":%d}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.max, latency.mean, latency.stdev,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9)))
end
