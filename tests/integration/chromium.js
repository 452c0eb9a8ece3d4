// A small headless Chromium driver over the DevTools protocol, for the
// tests and the benchmark of the flame graph page: no npm packages, Node
// 20's WebSocket (run node with --experimental-websocket).
//
//   const browser = await launch({ timeoutMs });
//   const page = await browser.open('file:///...');
//   await page.waitFor('window.isoprof && window.isoprof.ready', 10000);
//   await page.click('#reset'); page.errors, page.requests, page.dialogs
//   await browser.close();
//
// launch() starts its own Chromium (ISOPROF_CHROMIUM, else
// /usr/bin/chromium) in a fresh user-data-dir with the DevTools endpoint on
// loopback only, in its own process group; close() ends that group by its
// PID and removes the dir, and so does process exit if a test forgot.
// Every protocol call has a time limit. Nothing here sleeps for a fixed
// time: it waits on events, or polls a condition up to a limit.
'use strict';
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const DEFAULT_CHROMIUM = '/usr/bin/chromium';
const POLL_MS = 25;

// Browsers launched and not closed: killed (synchronously) on exit.
const running = new Set();
process.on('exit', () => {
  for (const b of running) b.killSync();
});

function withTimeout(promise, ms, what) {
  let timer;
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer in ${ms} ms`)), ms);
  });
  return Promise.race([promise, limit]).finally(() => clearTimeout(timer));
}

// One WebSocket to the browser endpoint; sessions (flatten) share it.
class Connection {
  constructor(ws, callTimeoutMs) {
    this.ws = ws;
    this.callTimeoutMs = callTimeoutMs;
    this.nextId = 1;
    this.pending = new Map();
    this.sessions = new Map();   // sessionId -> event handler
    this.closed = false;
    ws.addEventListener('message', (ev) => this.onMessage(ev.data));
    ws.addEventListener('close', () => this.onClose(new Error('DevTools connection closed')));
    ws.addEventListener('error', () => this.onClose(new Error('DevTools connection failed')));
  }

  onMessage(text) {
    let msg;
    try {
      msg = JSON.parse(typeof text === 'string' ? text : Buffer.from(text).toString('utf8'));
    } catch (_) {
      return;
    }
    if (msg.id !== undefined) {
      const p = this.pending.get(msg.id);
      if (!p) return;
      this.pending.delete(msg.id);
      clearTimeout(p.timer);
      if (msg.error) p.reject(new Error(`${p.method}: ${msg.error.message}${msg.error.data ? ` (${msg.error.data})` : ''}`));
      else p.resolve(msg.result || {});
    } else if (msg.sessionId && this.sessions.has(msg.sessionId)) {
      this.sessions.get(msg.sessionId)(msg.method, msg.params || {});
    }
  }

  onClose(err) {
    if (this.closed) return;
    this.closed = true;
    for (const p of this.pending.values()) {
      clearTimeout(p.timer);
      p.reject(new Error(`${p.method}: ${err.message}`));
    }
    this.pending.clear();
  }

  send(method, params = {}, sessionId, timeoutMs = this.callTimeoutMs) {
    if (this.closed) return Promise.reject(new Error(`${method}: DevTools connection closed`));
    const id = this.nextId++;
    const msg = { id, method, params };
    if (sessionId) msg.sessionId = sessionId;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`${method}: no answer in ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, { method, resolve, reject, timer });
      this.ws.send(JSON.stringify(msg));
    });
  }

  close() {
    this.onClose(new Error('DevTools connection closed'));
    try { this.ws.close(); } catch (_) { /* already closed */ }
  }
}

// One tab, attached with its own session.
class Page {
  constructor(conn, targetId, sessionId, timeoutMs) {
    this.conn = conn;
    this.targetId = targetId;
    this.sessionId = sessionId;
    this.timeoutMs = timeoutMs;
    this.errors = [];
    this.requests = [];
    this.dialogs = [];
    this.waiters = [];   // { method, resolve }: the next such event
    conn.sessions.set(sessionId, (method, params) => this.onEvent(method, params));
  }

  send(method, params, timeoutMs) {
    return this.conn.send(method, params, this.sessionId, timeoutMs || this.timeoutMs);
  }

  onEvent(method, params) {
    switch (method) {
      case 'Runtime.consoleAPICalled':
        if (params.type === 'error' || params.type === 'warning') {
          const text = (params.args || []).map((a) => (a.value !== undefined ? String(a.value) : a.description || a.type)).join(' ');
          this.errors.push(`console.${params.type}: ${text}`);
        }
        break;
      case 'Runtime.exceptionThrown': {
        const d = params.exceptionDetails || {};
        this.errors.push(`exception: ${(d.exception && d.exception.description) || d.text}`);
        break;
      }
      case 'Log.entryAdded':
        if (params.entry && params.entry.level === 'error') {
          this.errors.push(`log (${params.entry.source}): ${params.entry.text}${params.entry.url ? ` ${params.entry.url}` : ''}`);
        }
        break;
      case 'Network.requestWillBeSent':
        this.requests.push(params.request.url);
        break;
      case 'Page.javascriptDialogOpening':
        this.dialogs.push({ type: params.type, message: params.message });
        this.send('Page.handleJavaScriptDialog', { accept: false }).catch(() => {});
        break;
      default:
        break;
    }
    for (let i = 0; i < this.waiters.length;) {
      if (this.waiters[i].method === method) {
        this.waiters.splice(i, 1)[0].resolve(params);
      } else {
        i++;
      }
    }
  }

  // The next event named method, within timeoutMs.
  nextEvent(method, timeoutMs = this.timeoutMs) {
    let waiter;
    const p = new Promise((resolve) => {
      waiter = { method, resolve };
      this.waiters.push(waiter);
    });
    return withTimeout(p, timeoutMs, `waiting for ${method}`).finally(() => {
      const i = this.waiters.indexOf(waiter);
      if (i !== -1) this.waiters.splice(i, 1);
    });
  }

  async navigate(url, timeoutMs = this.timeoutMs) {
    const loaded = this.nextEvent('Page.loadEventFired', timeoutMs);
    loaded.catch(() => {});
    const r = await this.send('Page.navigate', { url }, timeoutMs);
    if (r.errorText) throw new Error(`navigate ${url}: ${r.errorText}`);
    await loaded;
  }

  // The value of expr (awaited if a promise); throws the page's exception.
  async evaluate(expr, timeoutMs = this.timeoutMs) {
    const r = await this.send('Runtime.evaluate',
      { expression: String(expr), returnByValue: true, awaitPromise: true }, timeoutMs);
    if (r.exceptionDetails) {
      const d = r.exceptionDetails;
      throw new Error(`evaluate: ${(d.exception && d.exception.description) || d.text}`);
    }
    return r.result ? r.result.value : undefined;
  }

  // Polls expr until it is truthy; returns its value.
  async waitFor(expr, timeoutMs = this.timeoutMs) {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const v = await this.evaluate(expr, Math.max(1000, until - Date.now()));
      if (v) return v;
      if (Date.now() >= until) throw new Error(`waitFor: ${expr} still false after ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }

  async screenshot() {
    const r = await this.send('Page.captureScreenshot', { format: 'png' });
    return r.data;
  }

  // The viewport point at the centre of the visible part of selector's
  // element, scrolled into view first.
  async point(selector) {
    const p = await this.evaluate(`(() => {
      const e = document.querySelector(${JSON.stringify(selector)});
      if (!e) return null;
      e.scrollIntoView({ block: 'center', inline: 'nearest' });
      const r = e.getBoundingClientRect();
      const l = Math.max(r.left, 0), rt = Math.min(r.right, window.innerWidth);
      const t = Math.max(r.top, 0), b = Math.min(r.bottom, window.innerHeight);
      if (rt <= l || b <= t) return { hidden: true };
      return { x: (l + rt) / 2, y: (t + b) / 2 };
    })()`);
    if (!p) throw new Error(`no element matches ${selector}`);
    if (p.hidden) throw new Error(`${selector} is not visible`);
    return p;
  }

  async click(selector) {
    const { x, y } = await this.point(selector);
    await this.send('Input.dispatchMouseEvent', { type: 'mouseMoved', x, y });
    await this.send('Input.dispatchMouseEvent', { type: 'mousePressed', x, y, button: 'left', buttons: 1, clickCount: 1 });
    await this.send('Input.dispatchMouseEvent', { type: 'mouseReleased', x, y, button: 'left', buttons: 0, clickCount: 1 });
  }

  async hover(selector) {
    const { x, y } = await this.point(selector);
    await this.send('Input.dispatchMouseEvent', { type: 'mouseMoved', x, y });
  }

  async close() {
    this.conn.sessions.delete(this.sessionId);
    await this.conn.send('Target.closeTarget', { targetId: this.targetId }).catch(() => {});
  }
}

class Browser {
  constructor(child, dir, conn, timeoutMs) {
    this.child = child;
    this.dir = dir;
    this.conn = conn;
    this.timeoutMs = timeoutMs;
    this.exited = new Promise((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) resolve();
      else child.once('exit', () => resolve());
    });
    running.add(this);
  }

  // A new tab with Page, Runtime, Log and Network on; at url if given.
  async open(url) {
    const { targetId } = await this.conn.send('Target.createTarget', { url: 'about:blank' });
    const { sessionId } = await this.conn.send('Target.attachToTarget', { targetId, flatten: true });
    const page = new Page(this.conn, targetId, sessionId, this.timeoutMs);
    await Promise.all(['Page.enable', 'Runtime.enable', 'Log.enable', 'Network.enable'].map((m) => page.send(m)));
    if (url) await page.navigate(url);
    return page;
  }

  // Kills the process group and removes the profile dir, synchronously.
  killSync() {
    running.delete(this);
    try { process.kill(-this.child.pid, 'SIGKILL'); } catch (_) { /* gone */ }
    fs.rmSync(this.dir, { recursive: true, force: true });
  }

  async close() {
    if (!running.has(this)) return;
    running.delete(this);
    await this.conn.send('Browser.close', {}, undefined, 5000).catch(() => {});
    this.conn.close();
    // Chromium exits by itself after Browser.close; its group goes anyway.
    await withTimeout(this.exited, 5000, 'chromium exit').catch(() => {});
    try { process.kill(-this.child.pid, 'SIGKILL'); } catch (_) { /* gone */ }
    await withTimeout(this.exited, 10000, 'chromium exit').catch(() => {});
    // Its helpers outlive it by a moment (then init reaps them): wait
    // until the group is empty, so a caller may check that nothing is left.
    for (const until = Date.now() + 5000; Date.now() < until;) {
      try {
        process.kill(-this.child.pid, 0);
      } catch (_) {
        break;
      }
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
    fs.rmSync(this.dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
  }
}

// Starts Chromium and connects to it. timeoutMs bounds the start (and is
// each later protocol call's and navigation's default limit).
async function launch({ timeoutMs = 60000 } = {}) {
  const bin = process.env.ISOPROF_CHROMIUM || DEFAULT_CHROMIUM;
  try {
    fs.accessSync(bin, fs.constants.X_OK);
  } catch (_) {
    throw new Error(`chromium.js: no Chromium at ${bin}: run packaging/setup.sh --browser (or set ISOPROF_CHROMIUM)`);
  }
  if (typeof WebSocket !== 'function') {
    throw new Error('chromium.js: no global WebSocket: run node with --experimental-websocket');
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'isoprof-chromium-'));
  const child = spawn(bin, [
    '--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
    '--no-first-run', '--no-default-browser-check', '--remote-debugging-address=127.0.0.1',
    '--remote-debugging-port=0', `--user-data-dir=${dir}`, 'about:blank',
  ], { stdio: ['ignore', 'ignore', 'pipe'], detached: true });
  const killEarly = () => {
    try { process.kill(-child.pid, 'SIGKILL'); } catch (_) { /* gone */ }
    fs.rmSync(dir, { recursive: true, force: true });
  };
  process.on('exit', killEarly);

  // Chromium says where DevTools listens on stderr; the rest of stderr is
  // kept (the tail) for messages and drained so Chromium never blocks.
  let stderr = '';
  let wsUrl;
  try {
    wsUrl = await withTimeout(new Promise((resolve, reject) => {
      child.stderr.setEncoding('utf8');
      child.stderr.on('data', (s) => {
        stderr = (stderr + s).slice(-16384);
        const m = /DevTools listening on (ws:\/\/\S+)/.exec(stderr);
        if (m) resolve(m[1]);
      });
      child.once('error', (e) => reject(new Error(`chromium.js: cannot start ${bin}: ${e.message}`)));
      child.once('exit', (code, sig) => reject(new Error(`chromium.js: ${bin} exited (${sig || code}) before DevTools listened:\n${stderr}`)));
    }), timeoutMs, 'chromium.js: DevTools endpoint');
    const host = new URL(wsUrl).hostname;
    if (!['127.0.0.1', 'localhost', '[::1]', '::1'].includes(host)) {
      throw new Error(`chromium.js: DevTools listens on ${host}, not loopback`);
    }
  } catch (e) {
    process.removeListener('exit', killEarly);
    killEarly();
    throw e;
  }

  let conn;
  try {
    const ws = new WebSocket(wsUrl);
    await withTimeout(new Promise((resolve, reject) => {
      ws.addEventListener('open', resolve, { once: true });
      ws.addEventListener('error', () => reject(new Error(`chromium.js: cannot connect to ${wsUrl}`)), { once: true });
    }), timeoutMs, 'chromium.js: DevTools connection');
    conn = new Connection(ws, timeoutMs);
  } catch (e) {
    process.removeListener('exit', killEarly);
    killEarly();
    throw e;
  }
  process.removeListener('exit', killEarly);
  const browser = new Browser(child, dir, conn, timeoutMs);
  browser.stderr = () => stderr;
  return browser;
}

module.exports = { launch };
