// A loopback Grafana Pyroscope ingest server for the integration tests and
// the benchmarks: it receives what isoprofd uploads, records every profile
// it accepts, and answers as the test scripts it (including the ways a real
// server or the network fails).
//
//   const srv = await startIngestServer({ dir });   // 127.0.0.1, port 0
//   srv.url, srv.port, srv.dir, srv.profiles, srv.requests
//   srv.queue([{ status: 429, retryAfter: 2 }, 'reset']);   // then 200s
//   srv.script((req) => (req.index < 3 ? { status: 503 } : { status: 200 }));
//   await srv.waitProfiles(2, 10000);
//   await srv.pause(); ... await srv.resume();   // connections refused meanwhile
//   await srv.close();
//
// Endpoints (PROTOCOLS.md §3):
//   POST /push.v1.PusherService/Push   Content-Type application/proto (415
//        otherwise), Content-Encoding gzip or identity (501 otherwise). The
//        PushRequest is decoded here by hand; unknown fields are skipped by
//        wire type. No sample at all: 400 "no profiles received". Malformed
//        protobuf, invalid UTF-8 in a string, a profile that is neither pprof
//        nor gzip'd pprof: 400 with the reason, as Connect JSON
//        {code, message}. Success: 200, empty application/proto body.
//   POST /ingest?name=app{k=v,...}&from=&until=&spyName=[&format=pprof]
//        raw pprof with format=pprof, else multipart/form-data with a
//        `profile` part. Bad name: 400; no profile, bad multipart, not
//        pprof: 422. Success: 200, empty body.
//   Anything else: 404 (405 for a method other than POST). A body over
//   maxBodyBytes (64 MiB): 413, read and thrown away, never buffered.
//
// Actions (what the next request gets; srv.queue() entries are used first,
// then srv.script(fn), then the default {status: 200}):
//   {status: 200[, delayMs]}   validate, record, answer (an invalid request
//                              still gets its 4xx)
//   {status: N[, body][, retryAfter (s)][, headers][, delayMs]}
//                              answer N, record nothing
//   'hang'     read the request, never answer (until close())
//   'reset'    read the request, then TCP RST (socket.resetAndDestroy())
//   'garbage'  write random non-HTTP bytes on the socket and close it
//   'huge'     200 with Content-Length: 1000000000, then 64 bytes every
//              100 ms, never finishing
//   'drip'     200 status line and headers (chunked), then one body byte a
//              second, never finishing
// A number N is {status: N}; {action: 'hang'} is 'hang'. fn(req) gets
// {index, method, path, url, api, headers, bodyBytes, series} where series
// is [{labels: {name: value}, ids: [...]}] (ingest: one series, ids
// [null], plus app), or null when the request could not be decoded. A
// throwing fn answers 500. Only an answer of 200 records profiles.
//
// The acceptance window (Grafana Pyroscope's validation.reject-older-than
// and reject-newer-than): with window {olderThanS, newerThanS} (option, or
// srv.acceptWindow({...}) later; null/0 = no bound) a profile whose
// time_nanos is further in the past or the future than that, by this
// machine's clock, makes the request a 400 whose message is Pyroscope's
// ("... is outside of ingestion window (profile timestamp: T, the
// ingestion window starts at S)" or "... ends at E"); srv.windowRefused
// lists {id, timeNs, why: 'old'|'new'} of each such profile.
//
// Options: {dir, port = 0, maxBodyBytes = 64 MiB, record = true, window}; record:
// false (benchmarks) keeps the records in memory only (file: null) and
// writes nothing to dir. Without dir, a temp dir that close() removes.
//
// Recording: profile n (from 1) is <dir>/<n>.pb.gz, the raw profile bytes
// as received when they were gzip'd, else gzip'd here (gzip: false in its
// record), and one JSON line in <dir>/records.jsonl. srv.profiles holds the
// records: {seq, request, api, labels, id, app, file, bytes, rawBytes,
// gzip, from, until, spyName, format, headers, time}. `bytes` is the size
// as received, `rawBytes` the uncompressed pprof size; from/until/spyName
// (ingest) are the query strings as sent, null for push; labels of an
// ingest profile are those between the braces of name (app is separate).
// srv.requests logs every request, refused ones too: {index, method, path,
// url, api, status (the status line sent; null if none), action, bodyBytes,
// series, profiles (raw profiles decoded), recorded, error, time, headers,
// done}.
//
// pause() closes the listening socket (connections are refused) and the
// idle keep-alive connections; a request arriving on an older connection
// while paused gets its socket destroyed, as from a server that went away.
// Requests already in progress (hung ones too) are left alone. resume()
// listens again on the same port.
//
// Run directly it serves the default script until SIGINT/SIGTERM:
//   node tests/integration/ingest-server.js [--port 4040] [--dir DIR]
// prints `listening http://127.0.0.1:PORT` on stdout and one line per
// request on stderr (without --dir, profiles go to a temp dir, removed at
// exit).
'use strict';
const crypto = require('node:crypto');
const EventEmitter = require('node:events');
const fs = require('node:fs');
const http = require('node:http');
const os = require('node:os');
const path = require('node:path');
const zlib = require('node:zlib');

const PUSH_PATH = '/push.v1.PusherService/Push';
const INGEST_PATH = '/ingest';
const DEFAULT_MAX_BODY = 64 << 20;

// --- a protobuf reader (just what PushRequest and a pprof check need) ----

class ProtoError extends Error {}

// -> [value, next]; value is exact up to 2^53 (enough for lengths and keys).
function readVarint(buf, pos) {
  let v = 0;
  let mul = 1;
  for (let i = 0; i < 10; i++) {
    if (pos >= buf.length) throw new ProtoError(`truncated varint at byte ${pos}`);
    const b = buf[pos++];
    v += (b & 0x7f) * mul;
    mul *= 128;
    if (!(b & 0x80)) return [v, pos];
  }
  throw new ProtoError(`varint longer than 10 bytes at byte ${pos - 10}`);
}

// Reads the field at pos -> {field, wire, value, next}: value is a number
// (varint), a Buffer (length-delimited), or null (fixed32/64, groups).
function readField(buf, pos, depth = 0) {
  const start = pos;
  let key;
  [key, pos] = readVarint(buf, pos);
  const field = Math.floor(key / 8);
  const wire = key % 8;
  if (field === 0 || field > 0x1fffffff) throw new ProtoError(`invalid field number ${field} at byte ${start}`);
  switch (wire) {
    case 0: { const [v, n] = readVarint(buf, pos); return { field, wire, value: v, next: n }; }
    case 1: if (pos + 8 > buf.length) throw new ProtoError(`truncated fixed64 at byte ${pos}`); return { field, wire, value: null, next: pos + 8 };
    case 5: if (pos + 4 > buf.length) throw new ProtoError(`truncated fixed32 at byte ${pos}`); return { field, wire, value: null, next: pos + 4 };
    case 2: {
      const [len, n] = readVarint(buf, pos);
      if (len > buf.length - n) throw new ProtoError(`field ${field}: length ${len} runs past the end (byte ${n} of ${buf.length})`);
      return { field, wire, value: buf.subarray(n, n + len), next: n + len };
    }
    case 3: { // a group (deprecated): skip to its matching end-group
      if (depth > 64) throw new ProtoError('groups nested too deep');
      for (;;) {
        if (pos >= buf.length) throw new ProtoError(`group ${field} not closed`);
        const [k, n] = readVarint(buf, pos);
        if (k % 8 === 4) {
          if (Math.floor(k / 8) !== field) throw new ProtoError(`end-group ${Math.floor(k / 8)} closes group ${field}`);
          return { field, wire, value: null, next: n };
        }
        pos = readField(buf, pos, depth + 1).next;
      }
    }
    case 4: throw new ProtoError(`unexpected end-group ${field} at byte ${start}`);
    default: throw new ProtoError(`invalid wire type ${wire} at byte ${start}`);
  }
}

// Calls fn(field, wire, value) for each field of a message. A known field
// with an unexpected wire type is the callee's to ignore (protobuf-go keeps
// it as an unknown field).
function eachField(buf, fn) {
  let pos = 0;
  while (pos < buf.length) {
    const f = readField(buf, pos);
    fn(f.field, f.wire, f.value);
    pos = f.next;
  }
}

const utf8 = new TextDecoder('utf-8', { fatal: true });
function pbString(b, what) {
  try { return utf8.decode(b); } catch (_) { throw new ProtoError(`${what}: invalid UTF-8`); }
}

// push.v1.PushRequest -> [{labels: [[name, value]], samples: [{raw, id}]}]
function decodePushRequest(buf) {
  const series = [];
  eachField(buf, (f, w, v) => {
    if (f !== 1 || w !== 2) return;
    const s = { labels: [], samples: [] };
    eachField(v, (f2, w2, v2) => {
      if (w2 !== 2) return;
      if (f2 === 1) {
        let name = ''; let value = '';
        eachField(v2, (f3, w3, v3) => {
          if (w3 !== 2) return;
          if (f3 === 1) name = pbString(v3, 'label name');
          else if (f3 === 2) value = pbString(v3, 'label value');
        });
        s.labels.push([name, value]);
      } else if (f2 === 2) {
        let raw = Buffer.alloc(0); let id = '';
        eachField(v2, (f3, w3, v3) => {
          if (w3 !== 2) return;
          if (f3 === 1) raw = v3;
          else if (f3 === 2) id = pbString(v3, 'sample ID');
        });
        s.samples.push({ raw, id });
      }
      // 3: annotations, ignored like the server does
    });
    series.push(s);
  });
  return series;
}

const isGzip = (b) => b.length >= 2 && b[0] === 0x1f && b[1] === 0x8b;

// A raw profile as received -> {gzip, raw (uncompressed pprof)}; throws
// ProtoError when it is neither a gzip'd nor a plain pprof message.
function checkPprof(b, maxBytes) {
  if (!b.length) throw new ProtoError('empty profile');
  const gzip = isGzip(b);
  let raw = b;
  if (gzip) {
    try { raw = zlib.gunzipSync(b, { maxOutputLength: maxBytes }); } catch (e) {
      throw new ProtoError(`profile: bad gzip (${e.code === 'ERR_BUFFER_TOO_LARGE' ? `over ${maxBytes} bytes uncompressed` : e.message})`);
    }
  }
  let fields = 0;
  try { eachField(raw, () => { fields++; }); } catch (e) { throw new ProtoError(`profile is not pprof: ${e.message}`); }
  if (!fields) throw new ProtoError('empty profile');
  return { gzip, raw };
}

// --- /ingest ------------------------------------------------------------

// "app{k=v,k2=v2}" -> {app, labels}; null when not a valid name.
function parseIngestName(name) {
  const m = /^([A-Za-z0-9_.\-/]+)(?:\{(.*)\})?$/s.exec(name || '');
  if (!m) return null;
  const labels = {};
  if (m[2] !== undefined && m[2] !== '') {
    for (const kv of m[2].split(',')) {
      const eq = kv.indexOf('=');
      if (eq <= 0) return null;
      const k = kv.slice(0, eq).trim(); const v = kv.slice(eq + 1).trim();
      if (!/^[A-Za-z0-9_.]+$/.test(k) || v.includes('}')) return null;
      labels[k] = v;
    }
  }
  return { app: m[1], labels };
}

// A header's parameter (boundary="x"; name=y) or null.
function headerParam(value, param) {
  const re = new RegExp(`(?:^|;)\\s*${param}\\s*=\\s*(?:"((?:[^"\\\\]|\\\\.)*)"|([^;\\s]*))`, 'i');
  const m = re.exec(value || '');
  if (!m) return null;
  return m[1] !== undefined ? m[1].replace(/\\(.)/g, '$1') : m[2];
}

// multipart/form-data body -> [{name, filename, headers, body}]; throws
// ProtoError when malformed (RFC 7578 / 2046: CRLF line ends).
function parseMultipart(body, boundary) {
  if (!boundary || boundary.length > 70) throw new ProtoError('multipart: no or bad boundary');
  const delim = Buffer.from(`--${boundary}`);
  const crlfDelim = Buffer.from(`\r\n--${boundary}`);
  let pos;
  if (body.subarray(0, delim.length).equals(delim)) pos = delim.length;
  else {
    const i = body.indexOf(crlfDelim); // a preamble before the first delimiter
    if (i < 0) throw new ProtoError('multipart: boundary not found');
    pos = i + crlfDelim.length;
  }
  const parts = [];
  for (;;) {
    if (body.subarray(pos, pos + 2).toString() === '--') return parts; // close delimiter
    // transport padding, then CRLF
    while (body[pos] === 0x20 || body[pos] === 0x09) pos++;
    if (body[pos] !== 0x0d || body[pos + 1] !== 0x0a) throw new ProtoError('multipart: delimiter not followed by CRLF');
    pos += 2;
    const hend = body.indexOf('\r\n\r\n', pos);
    if (hend < 0) throw new ProtoError('multipart: part headers not terminated');
    const headers = {};
    for (const line of body.subarray(pos, hend).toString('latin1').split('\r\n')) {
      if (!line) continue;
      const c = line.indexOf(':');
      if (c <= 0) throw new ProtoError(`multipart: bad part header ${JSON.stringify(line.slice(0, 80))}`);
      headers[line.slice(0, c).trim().toLowerCase()] = line.slice(c + 1).trim();
    }
    const next = body.indexOf(crlfDelim, hend + 4);
    if (next < 0) throw new ProtoError('multipart: part not terminated by the boundary');
    const disp = headers['content-disposition'] || '';
    if (!/^form-data\b/i.test(disp)) throw new ProtoError('multipart: part without Content-Disposition: form-data');
    parts.push({ name: headerParam(disp, 'name'), filename: headerParam(disp, 'filename'), headers, body: body.subarray(hend + 4, next) });
    pos = next + crlfDelim.length;
  }
}

// --- the server ---------------------------------------------------------

const open = new Set();
// Closes every server still open (the test files' after() hook).
function closeAll() { return Promise.all([...open].map((s) => s.close())); }

const CONNECT_CODES = { 400: 'invalid_argument', 401: 'unauthenticated', 403: 'permission_denied', 404: 'unimplemented', 413: 'resource_exhausted', 415: 'internal', 429: 'unavailable', 500: 'internal', 501: 'unimplemented', 503: 'unavailable', 504: 'unavailable' };

function normalizeAction(a) {
  if (a === undefined || a === null) return { status: 200 };
  if (typeof a === 'number') return { status: a };
  if (typeof a === 'string') a = { action: a };
  if (typeof a !== 'object') throw new Error(`bad action ${JSON.stringify(a)}`);
  if (a.action !== undefined) {
    if (!['hang', 'reset', 'garbage', 'huge', 'drip'].includes(a.action)) throw new Error(`unknown action ${JSON.stringify(a.action)}`);
    return a;
  }
  if (!Number.isInteger(a.status) || a.status < 100 || a.status > 599) throw new Error(`bad action status ${JSON.stringify(a.status)}`);
  return a;
}

// pprof time_nanos (field 9) of an uncompressed profile, in ns (a double:
// exact to a microsecond or so, plenty for a window of seconds); 0 if none.
function pprofTimeNanos(raw) {
  let t = 0;
  eachField(raw, (f, w, v) => { if (f === 9 && w === 0) t = v; });
  return t;
}

// Go's time.Time String() as Pyroscope prints it.
const goTime = (ms) => new Date(ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' +0000 UTC');

async function startIngestServer({ dir, port = 0, maxBodyBytes = DEFAULT_MAX_BODY, record: keepFiles = true, window = null } = {}) {
  let ownDir = false;
  if (!dir) { dir = fs.mkdtempSync(path.join(os.tmpdir(), 'isoprof-ingest-')); ownDir = true; }
  fs.mkdirSync(dir, { recursive: true });
  const recordsFile = path.join(dir, 'records.jsonl');

  const events = new EventEmitter();
  events.setMaxListeners(0);
  const sockets = new Set();
  const timers = new Set();
  const pending = []; // queued actions
  let scriptFn = null;
  let paused = false;
  let closing = null;

  let acceptance = window;
  const srv = {
    port: 0, url: '', dir, profiles: [], requests: [], server: null, windowRefused: [],
    acceptWindow(w) { acceptance = w; },
    script(fn) { if (fn !== null && typeof fn !== 'function') throw new TypeError('script(fn): fn must be a function or null'); scriptFn = fn; },
    queue(list) { pending.length = 0; for (const a of list || []) pending.push(normalizeAction(a)); },
  };

  const later = (ms, fn) => { const t = setTimeout(() => { timers.delete(t); fn(); }, ms); timers.add(t); return t; };
  const every = (ms, fn) => { const t = setInterval(fn, ms); timers.add(t); return t; };
  const cancel = (t) => { clearTimeout(t); timers.delete(t); };

  function nextAction(info) {
    if (pending.length) return pending.shift();
    if (scriptFn) return normalizeAction(scriptFn(info));
    return { status: 200 };
  }

  // Decodes a request's body -> {series: [{labels: [[k, v]], samples:
  // [{raw, id}], app?}], meta, error: {status, message} | null}.
  function decode(api, req, url, body) {
    const out = { series: null, meta: {}, error: null };
    const fail = (status, message) => { out.error = { status, message }; return out; };
    const enc = (req.headers['content-encoding'] || 'identity').trim().toLowerCase();
    if (enc !== 'identity' && enc !== 'gzip') return fail(501, `unknown compression "${enc}"`);
    if (enc === 'gzip') {
      try { body = zlib.gunzipSync(body, { maxOutputLength: maxBodyBytes }); } catch (e) {
        return e.code === 'ERR_BUFFER_TOO_LARGE' ? fail(413, `request body over ${maxBodyBytes} bytes uncompressed`) : fail(400, `bad gzip body: ${e.message}`);
      }
    }
    const ctype = (req.headers['content-type'] || '').split(';')[0].trim().toLowerCase();
    if (api === 'push') {
      if (ctype !== 'application/proto') return fail(415, `unsupported content type "${req.headers['content-type'] || ''}"`);
      try { out.series = decodePushRequest(body); } catch (e) {
        if (!(e instanceof ProtoError)) throw e;
        return fail(400, `invalid PushRequest: ${e.message}`);
      }
      return out;
    }
    // /ingest
    const q = url.searchParams;
    for (const k of ['from', 'until', 'spyName', 'format']) out.meta[k] = q.get(k);
    const name = parseIngestName(q.get('name'));
    if (!name) return fail(400, `bad name ${JSON.stringify(q.get('name'))}`);
    out.meta.app = name.app;
    const labels = Object.entries(name.labels);
    let raw;
    if (q.get('format') === 'pprof') raw = body;
    else if (ctype === 'multipart/form-data') {
      let parts;
      try { parts = parseMultipart(body, headerParam(req.headers['content-type'], 'boundary')); } catch (e) {
        if (!(e instanceof ProtoError)) throw e;
        return fail(422, e.message);
      }
      const p = parts.find((x) => x.name === 'profile');
      if (!p) return fail(422, 'multipart: no "profile" part');
      raw = p.body;
      const stc = parts.find((x) => x.name === 'sample_type_config');
      if (stc) out.meta.sampleTypeConfig = stc.body.toString('utf8');
    } else {
      return fail(422, `unsupported format (format=${q.get('format')}, content type "${ctype}"): only pprof is accepted`);
    }
    out.series = [{ labels, samples: [{ raw, id: null }], app: name.app }];
    return out;
  }

  function summary(series) {
    if (!series) return null;
    return series.map((s) => {
      const o = { labels: Object.fromEntries(s.labels), ids: s.samples.map((x) => x.id) };
      if (s.app !== undefined) o.app = s.app;
      return o;
    });
  }

  function emitRequests() { events.emit('request'); }

  function send(res, entry, status, headers, body) {
    if (res.destroyed || res.writableEnded) { entry.done = true; emitRequests(); return; }
    body = body === undefined || body === null ? Buffer.alloc(0) : Buffer.isBuffer(body) ? body : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
    entry.status = status;
    entry.done = true;
    res.writeHead(status, { 'Content-Length': body.length, ...headers });
    res.end(body);
    emitRequests();
  }

  function sendError(res, entry, api, status, message, extra = {}) {
    entry.error = message;
    if (api === 'push') {
      send(res, entry, status, { 'Content-Type': 'application/json', ...extra }, JSON.stringify({ code: CONNECT_CODES[status] || 'unknown', message }));
    } else {
      send(res, entry, status, { 'Content-Type': 'text/plain; charset=utf-8', ...extra }, message + '\n');
    }
  }

  // Validates every raw profile, then writes them all (all or nothing).
  function record(entry, api, req, decoded) {
    const total = decoded.series.reduce((n, s) => n + s.samples.length, 0);
    if (!total) throw Object.assign(new ProtoError('no profiles received'), { status: 400 });
    const checked = [];
    for (const s of decoded.series) {
      for (const smp of s.samples) {
        try { checked.push({ s, smp, ...checkPprof(smp.raw, maxBodyBytes) }); } catch (e) {
          if (e instanceof ProtoError) throw Object.assign(e, { status: api === 'push' ? 400 : 422 });
          throw e;
        }
      }
    }
    if (acceptance) {
      const now = Date.now();
      for (const c of checked) {
        const t = pprofTimeNanos(c.raw);
        const ms = t / 1e6;
        const labels = `{${c.s.labels.map(([k, v]) => `${k}="${v}"`).join(', ')}}`;
        const head = `profile with labels '${labels}' is outside of ingestion window (profile timestamp: ${goTime(ms)}, `;
        let why = null; let msg = null;
        if (acceptance.olderThanS && ms < now - acceptance.olderThanS * 1000) {
          why = 'old'; msg = `${head}the ingestion window starts at ${goTime(now - acceptance.olderThanS * 1000)})`;
        } else if (acceptance.newerThanS && ms > now + acceptance.newerThanS * 1000) {
          why = 'new'; msg = `${head}the ingestion window ends at ${goTime(now + acceptance.newerThanS * 1000)})`;
        }
        if (why) {
          srv.windowRefused.push({ id: c.smp.id, timeNs: t, why });
          throw Object.assign(new ProtoError(msg), { status: 400 });
        }
      }
    }
    for (const c of checked) {
      const seq = srv.profiles.length + 1;
      const file = keepFiles ? path.join(dir, `${seq}.pb.gz`) : null;
      if (keepFiles) fs.writeFileSync(file, c.gzip ? c.smp.raw : zlib.gzipSync(c.raw));
      const rec = {
        seq, request: entry.index, api, labels: Object.fromEntries(c.s.labels), id: api === 'push' ? c.smp.id : null,
        app: api === 'ingest' ? c.s.app : null, file, bytes: c.smp.raw.length, rawBytes: c.raw.length, gzip: c.gzip,
        from: decoded.meta.from ?? null, until: decoded.meta.until ?? null, spyName: decoded.meta.spyName ?? null,
        format: decoded.meta.format ?? null, headers: { ...req.headers }, time: Date.now(),
      };
      if (decoded.meta.sampleTypeConfig !== undefined) rec.sampleTypeConfig = decoded.meta.sampleTypeConfig;
      if (keepFiles) fs.appendFileSync(recordsFile, JSON.stringify(rec) + '\n');
      srv.profiles.push(rec);
      entry.recorded++;
    }
    events.emit('profile');
  }

  function perform(action, entry, api, req, res, decoded) {
    const sock = req.socket;
    entry.action = action.action || 'status';
    switch (action.action) {
      case 'hang':
        entry.done = true; emitRequests();
        return;
      case 'reset':
        entry.done = true; emitRequests();
        if (typeof sock.resetAndDestroy === 'function') sock.resetAndDestroy(); else sock.destroy();
        return;
      case 'garbage': {
        const junk = crypto.randomBytes(256);
        junk[0] = 0xff; // never "HTTP/"
        entry.done = true; emitRequests();
        sock.end(junk);
        later(1000, () => sock.destroy());
        return;
      }
      case 'huge':
      case 'drip': {
        const huge = action.action === 'huge';
        entry.status = 200;
        entry.done = true;
        res.writeHead(200, huge ? { 'Content-Type': 'application/proto', 'Content-Length': '1000000000' } : { 'Content-Type': 'application/proto' });
        res.flushHeaders();
        emitRequests();
        const chunk = Buffer.alloc(huge ? 64 : 1, 0x0a);
        const t = every(huge ? 100 : 1000, () => { if (!res.destroyed) res.write(chunk); });
        sock.once('close', () => cancel(t));
        return;
      }
      default: break;
    }
    const extra = { ...(action.headers || {}) };
    if (action.retryAfter !== undefined) extra['Retry-After'] = String(action.retryAfter);
    if (action.status !== 200) {
      const body = action.body !== undefined ? action.body : `${action.status} ${http.STATUS_CODES[action.status] || ''} (scripted)\n`;
      send(res, entry, action.status, { 'Content-Type': typeof action.body === 'object' && !Buffer.isBuffer(action.body) ? 'application/json' : 'text/plain; charset=utf-8', ...extra }, body);
      return;
    }
    if (decoded.error) { sendError(res, entry, api, decoded.error.status, decoded.error.message, extra); return; }
    try {
      record(entry, api, req, decoded);
    } catch (e) {
      if (e instanceof ProtoError) { sendError(res, entry, api, e.status || 400, e.message, extra); return; }
      sendError(res, entry, api, 500, `recording failed: ${e.message}`, extra);
      return;
    }
    const body = action.body !== undefined ? action.body : undefined;
    send(res, entry, 200, { 'Content-Type': api === 'push' ? 'application/proto' : 'text/plain; charset=utf-8', ...extra }, body);
  }

  function onRequest(req, res) {
    const url = new URL(req.url, 'http://127.0.0.1');
    const api = url.pathname === PUSH_PATH ? 'push' : url.pathname === INGEST_PATH ? 'ingest' : null;
    const entry = {
      index: srv.requests.length, method: req.method, path: url.pathname, url: req.url, api, status: null, action: null,
      bodyBytes: 0, series: 0, profiles: 0, recorded: 0, error: null, time: Date.now(), headers: { ...req.headers }, done: false,
    };
    srv.requests.push(entry);
    if (paused) { // an old keep-alive connection: the server is "gone"
      entry.action = 'dropped'; entry.done = true; emitRequests();
      req.socket.destroy();
      return;
    }
    if (!api) { req.resume(); sendError(res, entry, null, 404, `no route for ${url.pathname}`); return; }
    if (req.method !== 'POST') { req.resume(); sendError(res, entry, api, 405, `method ${req.method} not allowed`, { Allow: 'POST' }); return; }
    const chunks = [];
    let over = false;
    req.on('data', (d) => {
      entry.bodyBytes += d.length;
      if (over) return;
      if (entry.bodyBytes > maxBodyBytes) { over = true; chunks.length = 0; return; }
      chunks.push(d);
    });
    req.on('error', (e) => { entry.error = entry.error || `request: ${e.message}`; entry.done = true; emitRequests(); });
    req.on('end', () => {
      if (closing) return;
      if (over) { sendError(res, entry, api, 413, `request body over ${maxBodyBytes} bytes`); return; }
      let decoded;
      try { decoded = decode(api, req, url, Buffer.concat(chunks)); } catch (e) {
        sendError(res, entry, api, 500, `decoding failed: ${e.message}`); return;
      }
      if (decoded.series) {
        entry.series = decoded.series.length;
        entry.profiles = decoded.series.reduce((n, s) => n + s.samples.length, 0);
      }
      if (decoded.error) entry.error = decoded.error.message;
      let action;
      try {
        action = nextAction({
          index: entry.index, method: req.method, path: url.pathname, url: req.url, api, headers: entry.headers,
          bodyBytes: entry.bodyBytes, series: summary(decoded.series),
        });
      } catch (e) {
        sendError(res, entry, api, 500, `script failed: ${e.message}`); return;
      }
      if (action.delayMs > 0) later(action.delayMs, () => perform(action, entry, api, req, res, decoded));
      else perform(action, entry, api, req, res, decoded);
    });
  }

  const server = http.createServer({ requestTimeout: 0, keepAliveTimeout: 5000 }, onRequest);
  srv.server = server;
  // Expect: 100-continue (libcurl, large bodies): refuse an announced
  // oversized body before it is sent.
  server.on('checkContinue', (req, res) => {
    const len = Number(req.headers['content-length']);
    if (!paused && Number.isFinite(len) && len > maxBodyBytes) {
      const url = new URL(req.url, 'http://127.0.0.1');
      const api = url.pathname === PUSH_PATH ? 'push' : url.pathname === INGEST_PATH ? 'ingest' : null;
      const entry = {
        index: srv.requests.length, method: req.method, path: url.pathname, url: req.url, api, status: null, action: 'status',
        bodyBytes: 0, series: 0, profiles: 0, recorded: 0, error: null, time: Date.now(), headers: { ...req.headers }, done: false,
      };
      srv.requests.push(entry);
      sendError(res, entry, api, 413, `request body over ${maxBodyBytes} bytes`, { Connection: 'close' });
      return;
    }
    res.writeContinue();
    onRequest(req, res);
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('error', () => {});
    s.on('close', () => sockets.delete(s));
  });
  server.on('clientError', (err, s) => {
    if (s.writable && !s.destroyed) s.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
    else s.destroy();
  });

  function listen(p) {
    return new Promise((resolve, reject) => {
      const onErr = (e) => { server.removeListener('listening', onOk); reject(e); };
      const onOk = () => { server.removeListener('error', onErr); resolve(); };
      server.once('error', onErr);
      server.once('listening', onOk);
      server.listen({ port: p, host: '127.0.0.1', exclusive: true });
    });
  }

  await listen(port);
  srv.port = server.address().port;
  srv.url = `http://127.0.0.1:${srv.port}`;

  srv.pause = () => new Promise((resolve) => {
    if (paused || closing || !server.listening) { resolve(); return; }
    paused = true;
    server.close(); // the listening socket only; connections stay
    server.closeIdleConnections();
    setImmediate(resolve);
  });
  srv.resume = async () => {
    if (closing) throw new Error('ingest server: resume() after close()');
    if (server.listening) { paused = false; return; }
    await listen(srv.port);
    paused = false;
  };

  function waitCount(what, count, n, timeoutMs) {
    return new Promise((resolve, reject) => {
      if (count() >= n) { resolve(); return; }
      if (closing) { reject(new Error(`ingest server closed while waiting for ${n} ${what}`)); return; }
      const check = () => { if (count() >= n) { done(); resolve(); } };
      const onClose = () => { done(); reject(new Error(`ingest server closed while waiting for ${n} ${what} (${count()} arrived)`)); };
      const t = later(timeoutMs, () => {
        done();
        const log = srv.requests.map((r) => `${r.index}:${r.api || r.path}:${r.status ?? r.action}`).join(' ');
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${n} ${what}: ${count()} arrived (requests: ${log || 'none'})`));
      });
      function done() { cancel(t); events.removeListener(what === 'profiles' ? 'profile' : 'request', check); events.removeListener('close', onClose); }
      events.on(what === 'profiles' ? 'profile' : 'request', check);
      events.once('close', onClose);
    });
  }
  // Resolves (to srv.profiles) once at least n profiles are recorded.
  srv.waitProfiles = (n, timeoutMs = 10000) => waitCount('profiles', () => srv.profiles.length, n, timeoutMs).then(() => srv.profiles);
  // Resolves (to srv.requests) once at least n requests were dealt with
  // (answered, or given their action).
  srv.waitRequests = (n, timeoutMs = 10000) => waitCount('requests', () => srv.requests.filter((r) => r.done).length, n, timeoutMs).then(() => srv.requests);

  srv.close = () => {
    if (closing) return closing;
    closing = new Promise((resolve) => {
      open.delete(srv);
      for (const t of timers) { clearTimeout(t); clearInterval(t); }
      timers.clear();
      events.emit('close');
      let n = 2;
      const fin = () => { if (--n === 0) { if (ownDir) fs.rmSync(dir, { recursive: true, force: true }); resolve(); } };
      if (server.listening) server.close(() => fin()); else fin();
      for (const s of sockets) s.destroy();
      server.closeAllConnections();
      fin();
    });
    return closing;
  };
  open.add(srv);
  return srv;
}

// go tool pprof -top <args> file -> its stdout (lib.js runs it: HOME,
// GOCACHE in a temp dir of the harness, a timeout; throws with stderr).
// Loaded lazily: lib.js registers node:test hooks and signal handlers.
function pprofTop(file, args = []) {
  return require('./lib').goPprof(['-top', ...args, file]);
}

// Under `node --test`, a server a failed test left open must not keep the
// test process alive until CTest's timeout.
if (process.env.NODE_TEST_CONTEXT && require.main !== module) require('node:test').after(closeAll);

module.exports = {
  startIngestServer, closeAll, pprofTop, decodePushRequest, parseIngestName, parseMultipart, PUSH_PATH, INGEST_PATH,
};

if (require.main === module) {
  const argv = process.argv.slice(2);
  const opt = (name) => { const i = argv.indexOf(name); return i >= 0 ? argv[i + 1] : undefined; };
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write('usage: node ingest-server.js [--port N] [--dir DIR]\n');
    process.exit(0);
  }
  const port = opt('--port') === undefined ? 0 : Number(opt('--port'));
  if (!Number.isInteger(port) || port < 0 || port > 65535) { process.stderr.write(`bad --port ${opt('--port')}\n`); process.exit(2); }
  startIngestServer({ port, dir: opt('--dir') }).then((srv) => {
    process.stdout.write(`listening ${srv.url}\n`);
    process.stderr.write(`profiles go to ${srv.dir}\n`);
    let logged = 0;
    const logNew = () => {
      for (; logged < srv.requests.length && srv.requests[logged].done; logged++) {
        const r = srv.requests[logged];
        process.stderr.write(`${new Date(r.time).toISOString()} #${r.index} ${r.method} ${r.url} ${r.status ?? r.action} bytes=${r.bodyBytes} profiles=${r.profiles} recorded=${r.recorded}${r.error ? ` error=${JSON.stringify(r.error)}` : ''}\n`);
      }
    };
    const poll = setInterval(logNew, 200);
    const quit = () => { clearInterval(poll); logNew(); srv.close().then(() => process.exit(0)); };
    process.once('SIGINT', quit);
    process.once('SIGTERM', quit);
  }, (e) => { process.stderr.write(`ingest server: ${e.message}\n`); process.exit(1); });
}
