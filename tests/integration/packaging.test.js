// The package: `cpack -G DEB` from this build directory builds a .deb with
// the binaries (hardened, when the directory was configured with Debian's
// flags by packaging/deb/build.sh), the hardened systemd unit, the default config as a conffile
// and three man pages, and Depends computed from the shared libraries. The
// unit passes `systemd-analyze verify` and rates 2.0 or better in
// `systemd-analyze security --offline=true`; the packaged config is valid
// and matches `isoprofd --print-config`; the man pages render without
// warnings and isoprof.yaml(5) documents every option of `isoprofd --help`.
// The sandbox is checked against the daemon itself: isoprofd runs under
// strace profiling a Node isolate, uploading, answering on its control
// socket and reloading, and uses no system call outside the unit's
// SystemCallFilter, no address family outside RestrictAddressFamilies, no
// writable-and-executable memory, and writes nowhere ProtectSystem=strict
// would refuse. The .deb is built from a tree configured for the prefix /usr
// (packaging/deb/build.sh); cpack refuses another, and those checks skip.
// Any tree: `cmake --install --prefix DIR` as a user who cannot write
// elsewhere (nobody, when run as root) writes only under DIR, and the prefix
// /usr staged under DESTDIR puts the config in etc/isoprof and the unit in
// systemd's unit directory.
//
// Needs cpack (cmake), dpkg-deb and dpkg-shlibdeps (dpkg-dev), systemd-analyze
// (systemd), strace, setpriv (util-linux), and groff or man (groff-base,
// man-db): packaging/setup.sh.
// The build directory is $ISOPROF_BUILD_DIR (CTest sets it), else the one
// this runs in (CTest's working directory is <build>/tests/integration).
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert');
const { spawn, spawnSync } = require('node:child_process');
const dgram = require('node:dgram');
const fs = require('node:fs');
const http = require('node:http');
const os = require('node:os');
const path = require('node:path');
const zlib = require('node:zlib');
const L = require('./lib');
const { startIngestServer } = require('./ingest-server');

after(L.cleanup);

const BUILD = process.env.ISOPROF_BUILD_DIR || path.resolve(process.cwd(), '..', '..');
const VERSION = /project\(isoprof VERSION ([\d.]+)/.exec(fs.readFileSync(path.join(L.ROOT, 'CMakeLists.txt'), 'utf8'))[1];
const UNIT = 'lib/systemd/system/isoprof.service';
const CONF = 'etc/isoprof/isoprof.yaml';
const MANS = ['usr/share/man/man8/isoprofd.8.gz', 'usr/share/man/man1/isoprof.1.gz', 'usr/share/man/man5/isoprof.yaml.5.gz'];

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: 120000, maxBuffer: 64 << 20, ...opts });
  if (r.error) throw new Error(`${cmd} ${args.join(' ')}: ${r.error.message} (packaging/setup.sh installs it)`);
  return r;
}
function ok(cmd, args, opts) {
  const r = run(cmd, args, opts);
  assert.strictEqual(r.status, 0, `${cmd} ${args.join(' ')} exited ${r.status}:\n${r.stdout}\n${r.stderr}`);
  return r;
}
function which(cmd) {
  return run('sh', ['-c', `command -v ${cmd}`]).status === 0;
}

let deb; // the .deb built from this build directory
let root; // its files, extracted
let work; // scratch
let noDeb; // why there is no .deb: the tree is configured for another prefix
let cache; // CMakeCache.txt

// The .deb's tests skip on a tree configured for another prefix than /usr:
// cpack refuses it (checked below), since what is built into the binaries
// and the unit would not match where the package puts them.
function needDeb(t) {
  if (deb) return true;
  t.skip(noDeb);
  return false;
}

before(() => {
  const cfg = path.join(BUILD, 'CPackConfig.cmake');
  assert.ok(fs.existsSync(cfg), `${cfg} is missing: ISOPROF_BUILD_DIR must name a configured build directory`);
  cache = fs.readFileSync(path.join(BUILD, 'CMakeCache.txt'), 'utf8');
  work = L.tmpdir();
  const out = path.join(work, 'out');
  const prefix = (/^CMAKE_INSTALL_PREFIX:PATH=(.*)$/m.exec(cache) || [])[1];
  if (prefix !== '/usr') {
    noDeb = `${BUILD} is configured with CMAKE_INSTALL_PREFIX=${prefix}, not /usr as the .deb's tree (packaging/deb/build.sh)`;
    const r = run('cpack', ['-G', 'DEB', '-B', out, '--config', cfg]);
    assert.notStrictEqual(r.status, 0, 'cpack refuses a tree configured for another prefix');
    assert.match((r.stdout + r.stderr).replace(/\s+/g, ' '), /configure it with -DCMAKE_INSTALL_PREFIX=\/usr \(packaging\/deb\/build\.sh does\)/);
    return;
  }
  ok('cpack', ['-G', 'DEB', '-B', out, '--config', cfg]);
  const debs = fs.readdirSync(out).filter((f) => /^isoprof_.*\.deb$/.test(f));
  assert.strictEqual(debs.length, 1, `one isoprof_*.deb in ${out}: ${fs.readdirSync(out)}`);
  deb = path.join(out, debs[0]);
  assert.match(debs[0], new RegExp(`^isoprof_${VERSION.replace(/\./g, '\\.')}-1_[a-z0-9]+\\.deb$`));
  root = path.join(work, 'root');
  ok('dpkg-deb', ['-x', deb, root]);
});

test('the .deb holds the binaries, the unit, the config and the man pages', (t) => {
  if (!needDeb(t)) return;
  const files = ok('dpkg-deb', ['-c', deb]).stdout.split('\n')
    .map((l) => (/\s\.\/(\S+)$/.exec(l) || [])[1]).filter(Boolean);
  for (const f of ['usr/bin/isoprofd', 'usr/bin/isoprof', UNIT, CONF, ...MANS]) {
    assert.ok(files.includes(f), `dpkg-deb -c lists ${f}:\n${files.join('\n')}`);
  }
  // The unit and the config where Debian keeps them, whatever the install
  // rule does for other prefixes: nothing under usr/etc or usr/lib/systemd.
  assert.deepStrictEqual(files.filter((f) => /^usr\/(etc|lib\/systemd)\//.test(f)), []);
  assert.deepStrictEqual(files.filter((f) => /isoprof\.(service|yaml)$/.test(f)).sort(), [CONF, UNIT].sort());
  for (const b of ['isoprofd', 'isoprof']) {
    const r = ok(path.join(root, 'usr/bin', b), ['--version']);
    assert.strictEqual(r.stdout, `${b} ${VERSION}\n`);
  }
  // The packaged isoprof looks for the packaged config.
  assert.match(ok(path.join(root, 'usr/bin/isoprof'), ['--help']).stdout, /else \/etc\/isoprof\/isoprof\.yaml\.\n/);
  // gzip'd man pages as Debian wants them: -n, no name or time stamp.
  for (const m of MANS) {
    const gz = fs.readFileSync(path.join(root, m));
    assert.strictEqual(gz.readUInt32LE(4), 0, `${m}: no mtime in the gzip header`);
    assert.strictEqual(gz[3] & 0x08, 0, `${m}: no file name in the gzip header`);
  }
});

// packaging/deb/build.sh configures with Debian's flags (dpkg-buildflags,
// hardening=+all); the test command builds the plain suite with it. A build
// directory configured otherwise (the ASan suite, a developer's) has
// nothing of this to check.
test('built as Debian builds (packaging/deb/build.sh): PIE, full RELRO, stack protector, fortify', (t) => {
  if (!needDeb(t)) return;
  const flags = (/^CMAKE_C_FLAGS:STRING=(.*)$/m.exec(cache) || [])[1] || '';
  if (!/^CMAKE_BUILD_TYPE:STRING=None$/m.test(cache) || !flags.includes('-D_FORTIFY_SOURCE')) {
    t.skip(`${BUILD} was not configured by packaging/deb/build.sh`);
    return;
  }
  for (const b of ['isoprofd', 'isoprof']) {
    const file = path.join(root, 'usr/bin', b);
    assert.match(ok('readelf', ['-hW', file]).stdout, /Type:\s+DYN/, `${b}: a position-independent executable`);
    assert.match(ok('readelf', ['-lW', file]).stdout, /GNU_RELRO/, `${b}: RELRO`);
    assert.match(ok('readelf', ['-dW', file]).stdout, /BIND_NOW|Flags:.*\bNOW\b/, `${b}: BIND_NOW (full RELRO)`);
    const syms = ok('readelf', ['--dyn-syms', '-W', file]).stdout;
    assert.match(syms, /\b__stack_chk_fail\b/, `${b}: -fstack-protector-strong`);
    assert.match(syms, /\b__(?:snprintf|memcpy|vsnprintf)_chk\b/, `${b}: _FORTIFY_SOURCE`);
  }
});

test('control: Depends from the shared libraries, the conffile, maintainer scripts', (t) => {
  if (!needDeb(t)) return;
  const info = ok('dpkg-deb', ['-I', deb]).stdout;
  const dep = /^ Depends: (.*)$/m.exec(info);
  assert.ok(dep, `a Depends line:\n${info}`);
  // dpkg-shlibdeps writes versioned dependencies from the symbols files.
  for (const lib of ['libc6', 'libuv1', 'liblmdb0', 'libzstd1', 'libcurl4', 'libprotobuf-c1', 'libyaml-0-2']) {
    assert.match(dep[1], new RegExp(`(^|, )${lib.replace(/[+.]/g, '\\$&')}( \\(>= [^)]+\\))?(,|$)`), `Depends names ${lib}: ${dep[1]}`);
  }
  assert.match(dep[1], /libuv1 \(>= /, 'versions come from dpkg-shlibdeps');
  assert.match(info, /^ Package: isoprof$/m);
  assert.match(info, new RegExp(`^ Version: ${VERSION.replace(/\./g, '\\.')}-1$`, 'm'));
  assert.match(info, /^ Maintainer: .+ <.+>$/m);

  const ctrl = path.join(work, 'control');
  fs.mkdirSync(ctrl);
  ok('dpkg-deb', ['-e', deb, ctrl]);
  const conffiles = fs.readFileSync(path.join(ctrl, 'conffiles'), 'utf8').split('\n').filter(Boolean);
  assert.deepStrictEqual(conffiles, ['/etc/isoprof/isoprof.yaml']);
  for (const s of ['postinst', 'prerm', 'postrm']) {
    const p = path.join(ctrl, s);
    assert.ok(fs.statSync(p).mode & 0o111, `${s} is executable`);
    ok('sh', ['-n', p]);
  }
});

test('the packaged config is valid, stores in /var/lib/isoprof and is --print-config otherwise', (t) => {
  if (!needDeb(t)) return;
  const conf = path.join(root, CONF);
  const r = ok(L.ISOPROFD, ['--check-config', conf]);
  assert.strictEqual(r.stdout, `${conf}: ok\n`);
  const text = fs.readFileSync(conf, 'utf8');
  assert.match(text, /^store:\n(  #.*\n)*  path: \/var\/lib\/isoprof\n/m);
  // Generated from the table: the defaults the built daemon prints, the store
  // path aside, follow the package's header comment line for line.
  const printed = ok(L.ISOPROFD, ['--print-config']).stdout;
  const body = text.slice(text.indexOf(printed.split('\n')[0]));
  assert.strictEqual(body, printed.replace('\n  path: ./isoprof-data\n', '\n  path: /var/lib/isoprof\n'));
});

test('the unit: systemd-analyze verify passes, security rates it 2.0 or better', (t) => {
  if (!needDeb(t)) return;
  const unitText = fs.readFileSync(path.join(root, UNIT), 'utf8');
  for (const line of ['Type=notify', 'ExecStart=/usr/bin/isoprofd --config /etc/isoprof/isoprof.yaml',
    'ExecReload=/bin/kill -HUP $MAINPID', 'Restart=on-failure', 'StateDirectory=isoprof',
    'RuntimeDirectory=isoprof', 'ConfigurationDirectory=isoprof', 'ProtectSystem=strict',
    'NoNewPrivileges=yes', 'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6', 'SystemCallFilter=@system-service']) {
    assert.ok(unitText.split('\n').includes(line), `the unit has ${line}`);
  }
  assert.match(unitText, /^MemoryMax=\d+[KMG]$/m);
  assert.doesNotMatch(unitText, /^IPAddress(Deny|Allow)=/m, 'no IP allow-list: the upload server is remote');

  // verify checks that ExecStart exists, so the copy it reads runs the
  // packaged binary from where it was extracted; everything else is the
  // packaged unit as it is.
  const dir = path.join(work, 'unit');
  fs.mkdirSync(dir);
  const copy = path.join(dir, 'isoprof.service');
  fs.writeFileSync(copy, unitText.replace(/^ExecStart=\/usr\/bin\/isoprofd /m,
    `ExecStart=${path.join(root, 'usr/bin/isoprofd')} `));
  // Both print problems (unknown keys, bad values) and still exit 0: any
  // line about the unit is a failure.
  const about = (s) => s.split('\n').filter((l) => l.includes('isoprof.service'));
  const v = run('systemd-analyze', ['verify', '--man=no', copy]);
  assert.strictEqual(v.status, 0, `systemd-analyze verify:\n${v.stdout}${v.stderr}`);
  assert.deepStrictEqual(about(v.stderr + v.stdout), [], 'systemd-analyze verify has nothing to say');

  const s = run('systemd-analyze', ['security', '--offline=true', '--no-pager', copy]);
  assert.strictEqual(s.status, 0, `systemd-analyze security:\n${s.stdout}${s.stderr}`);
  assert.deepStrictEqual(about(s.stderr), [], 'systemd-analyze security parses every line');
  const m = /Overall exposure level for isoprof\.service: (\d+(?:\.\d+)?) (\S+)/.exec(s.stdout);
  assert.ok(m, `an overall exposure level:\n${s.stdout}`);
  const level = parseFloat(m[1]);
  console.log(`# systemd-analyze security: exposure ${level} ${m[2]}`);
  assert.ok(level <= 2.0, `exposure ${level} <= 2.0:\n${s.stdout}`);
});

test('the man pages render without warnings; isoprof.yaml(5) has every option', (t) => {
  if (!needDeb(t)) return;
  const pages = MANS.map((m) => path.join(root, m));
  if (which('man')) {
    for (const p of pages) {
      const r = ok('man', ['--warnings', '-l', p], { env: { ...process.env, MANWIDTH: '80', MANPAGER: 'cat', PAGER: 'cat', LANG: 'C.UTF-8' } });
      assert.strictEqual(r.stderr, '', `man --warnings -l ${p}`);
      assert.ok(r.stdout.length > 500, `${p} renders`);
    }
  } else if (which('groff')) {
    for (const p of pages) {
      const r = ok('groff', ['-man', '-Tutf8', '-ww', '-k', '-z'], { input: zlib.gunzipSync(fs.readFileSync(p)) });
      assert.strictEqual(r.stderr, '', `groff -man -ww ${p}`);
    }
  } else {
    t.diagnostic('neither man nor groff is installed (packages man-db, groff-base): the pages were not rendered');
  }
  const src = zlib.gunzipSync(fs.readFileSync(pages[2])).toString('utf8');
  const help = ok(L.ISOPROFD, ['--help']).stdout;
  const table = help.slice(help.indexOf('\n  OPTION ') + 1).split('\n\n')[0].split('\n').slice(1);
  assert.ok(table.length > 10, `the option table of isoprofd --help:\n${help}`);
  for (const row of table) {
    const name = row.trim().split(/\s+/)[0];
    assert.ok(src.includes(`.TP\n.B ${name.replace(/-/g, '\\-')}\n`), `isoprof.yaml(5) documents ${name}`);
  }
  assert.ok(!src.includes('@OPTIONS@') && !src.includes('@PROJECT_VERSION@'), 'no placeholder left');
  for (const p of pages) {
    const page = zlib.gunzipSync(fs.readFileSync(p)).toString('utf8');
    assert.ok(page.includes(`"isoprof ${VERSION}"`), `${p} names version ${VERSION}`);
    assert.ok(!page.includes('@ISOPROF_'), `${p}: no placeholder left`);
    assert.ok(page.includes('.I /etc/isoprof/isoprof.yaml\n'), `${p} names the packaged config`);
  }
  assert.ok(zlib.gunzipSync(fs.readFileSync(pages[0])).toString('utf8').includes('.I /lib/systemd/system/isoprof.service\n'),
    'isoprofd(8) names the packaged unit');
});

// --- cmake --install: stays in its prefix ----------------------------------

// Runs `cmake --install` of this build directory as a user who cannot
// write outside what it is given: nobody when the test runs as root
// (setpriv), else the user running it. The install writes its manifest into
// the build directory, so it runs from a copy of the install scripts (every
// cmake_install.cmake and the files they install, the build directory's
// path replaced by the copy's), world-readable, in a temp dir; the copy's
// top directory, the prefix and DESTDIR are directories that user owns.
function installTree() {
  const dir = L.tmpdir();
  fs.chmodSync(dir, 0o755);
  const copy = path.join(dir, 'build');
  const seen = new Set();
  const esc = BUILD.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const copyFile = (src) => {
    if (seen.has(src)) return;
    seen.add(src);
    const dst = path.join(copy, path.relative(BUILD, src));
    fs.mkdirSync(path.dirname(dst), { recursive: true, mode: 0o755 });
    if (!src.endsWith('.cmake')) {
      fs.copyFileSync(src, dst);
      fs.chmodSync(dst, fs.statSync(src).mode & 0o111 ? 0o755 : 0o644);
      return;
    }
    const text = fs.readFileSync(src, 'utf8');
    fs.writeFileSync(dst, text.split(BUILD).join(copy), { mode: 0o644 });
    for (const m of text.matchAll(new RegExp(`"(${esc}/[^"$]*)"`, 'g'))) {
      if (fs.existsSync(m[1]) && fs.statSync(m[1]).isFile()) copyFile(m[1]);
    }
  };
  copyFile(path.join(BUILD, 'cmake_install.cmake'));
  for (const d of [copy, ...[...seen].map((f) => path.dirname(path.join(copy, path.relative(BUILD, f))))]) {
    fs.chmodSync(d, 0o755);
  }
  const root = process.getuid() === 0;
  // The copy's top directory takes install_manifest.txt.
  if (root) fs.chownSync(copy, 65534, 65534);
  const mine = (p) => {
    fs.mkdirSync(p);
    if (root) fs.chownSync(p, 65534, 65534);
  };
  const as = (args, env = {}) => {
    const cmd = root ? ['setpriv', '--reuid=nobody', '--regid=nogroup', '--clear-groups', '--', 'cmake', ...args] : ['cmake', ...args];
    return run(cmd[0], cmd.slice(1), { cwd: '/', env: { ...process.env, ...env } });
  };
  return { dir, copy, mine, as, user: root ? 'nobody' : os.userInfo().username };
}

// Every file under dir, relative to it.
function tree(dir) {
  return fs.readdirSync(dir, { recursive: true }).filter((f) => !fs.statSync(path.join(dir, f)).isDirectory()).sort();
}

test('cmake --install --prefix DIR as a non-root user writes only under DIR', (t) => {
  const it = installTree();
  const marker = path.join(it.dir, 'marker');
  fs.writeFileSync(marker, '');
  const near = () => run('find', ['/etc', '/lib/systemd', '/usr/lib/systemd', '/usr/local', '-name', '*isoprof*', '-newer', marker])
    .stdout.split('\n').filter(Boolean);
  const before = near();

  // An ordinary prefix: everything under it, the config in etc/isoprof, the
  // unit in lib/systemd/system.
  const prefix = path.join(it.dir, 'prefix');
  it.mine(prefix);
  const r = it.as(['--install', it.copy, '--prefix', prefix]);
  assert.strictEqual(r.status, 0, `cmake --install --prefix ${prefix} as ${it.user}:\n${r.stdout}\n${r.stderr}`);
  const want = ['bin/isoprof', 'bin/isoprofd', 'etc/isoprof/isoprof.yaml', 'lib/systemd/system/isoprof.service',
    'share/isoprof/setup.sh', 'share/man/man1/isoprof.1.gz', 'share/man/man5/isoprof.yaml.5.gz', 'share/man/man8/isoprofd.8.gz'];
  assert.deepStrictEqual(tree(prefix), want);
  // CMake's own record of what it wrote: all of it under the prefix.
  const manifest = fs.readFileSync(path.join(it.copy, 'install_manifest.txt'), 'utf8').split('\n').filter(Boolean).sort();
  assert.deepStrictEqual(manifest, want.map((f) => path.join(prefix, f)));
  t.diagnostic(`installed as ${it.user}: ${want.join(' ')}`);

  // The prefix /usr, staged with DESTDIR as a packager does: GNUInstallDirs'
  // special case puts the config in /etc, the unit goes to systemd's unit
  // directory (pkg-config systemd), the rest under /usr.
  const dest = path.join(it.dir, 'destdir');
  it.mine(dest);
  const u = it.as(['--install', it.copy, '--prefix', '/usr'], { DESTDIR: dest });
  assert.strictEqual(u.status, 0, `DESTDIR=${dest} cmake --install --prefix /usr as ${it.user}:\n${u.stdout}\n${u.stderr}`);
  const unitDir = (/^ISOPROF_SYSTEMD_UNITDIR:PATH=(.*)$/m.exec(cache) || [])[1];
  assert.ok(unitDir && unitDir.startsWith('/'), `ISOPROF_SYSTEMD_UNITDIR in the cache: ${unitDir}`);
  const pc = run('pkg-config', ['--variable=systemdsystemunitdir', 'systemd']);
  if (pc.status === 0 && pc.stdout.trim()) assert.strictEqual(unitDir, pc.stdout.trim(), 'the unit directory is pkg-config\'s');
  assert.deepStrictEqual(tree(dest), ['etc/isoprof/isoprof.yaml', path.join(unitDir.slice(1), 'isoprof.service'),
    'usr/bin/isoprof', 'usr/bin/isoprofd', 'usr/share/isoprof/setup.sh', 'usr/share/man/man1/isoprof.1.gz',
    'usr/share/man/man5/isoprof.yaml.5.gz', 'usr/share/man/man8/isoprofd.8.gz'].sort());

  // Nothing named isoprof appeared in the system's directories meanwhile.
  assert.deepStrictEqual(near(), before, 'no isoprof file written in /etc, /lib/systemd, /usr/lib/systemd or /usr/local');
});

// --- the sandbox, checked against the daemon's own behaviour ---------------

// The system calls a SystemCallFilter= allow list followed by ~deny lists
// leaves, expanded with systemd-analyze's own group tables.
function allowedSyscalls(unitText) {
  const groups = new Map();
  let cur = null;
  for (const line of ok('systemd-analyze', ['syscall-filter', '--no-pager']).stdout.split('\n')) {
    if (/^@\S+/.test(line)) { cur = line.split(/\s/)[0]; groups.set(cur, []); continue; }
    const t = line.trim();
    if (cur && t && !t.startsWith('#')) groups.get(cur).push(t);
  }
  const expand = (name, seen = new Set()) => {
    if (!name.startsWith('@')) return [name];
    assert.ok(groups.has(name), `systemd-analyze knows ${name}`);
    if (seen.has(name)) return [];
    seen.add(name);
    return groups.get(name).flatMap((n) => expand(n, seen));
  };
  let allowed = null;
  for (const m of unitText.matchAll(/^SystemCallFilter=(~?)(.*)$/gm)) {
    const names = m[2].trim().split(/\s+/).flatMap((n) => expand(n));
    if (m[1] === '~') {
      assert.ok(allowed, 'the unit starts SystemCallFilter= with an allow list');
      for (const n of names) allowed.delete(n);
    } else {
      allowed = allowed || new Set();
      for (const n of names) allowed.add(n);
    }
  }
  assert.ok(allowed && allowed.size > 100, 'an allow list of system calls');
  return allowed;
}

function request(opts) {
  return new Promise((resolve, reject) => {
    const req = http.request({ timeout: 5000, ...opts }, (res) => {
      let body = '';
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

test('the daemon stays inside the unit\'s sandbox (strace)', { timeout: 120000 }, async (t) => {
  if (!needDeb(t)) return;
  const bin = fs.readFileSync(L.ISOPROFD);
  if (bin.includes('__asan_init') || bin.includes('__ubsan_handle')) {
    t.skip('a sanitizer build: its runtime makes system calls the packaged daemon does not');
    return;
  }
  if (!which('strace')) assert.fail('strace is not installed (packaging/setup.sh installs it)');
  if (run('strace', ['-f', '-qq', '-o', '/dev/null', 'true']).status !== 0) {
    t.skip('strace cannot trace here (no ptrace permission in this container)');
    return;
  }
  const unitText = fs.readFileSync(path.join(root, UNIT), 'utf8');
  const allowed = allowedSyscalls(unitText);
  const families = new Set(/^RestrictAddressFamilies=(.*)$/m.exec(unitText)[1].trim().split(/\s+/));

  const dir = L.tmpdir();
  const store = path.join(dir, 'store');
  const rundir = path.join(dir, 'run'); // systemd's RuntimeDirectory=
  fs.mkdirSync(rundir);
  const srv = await startIngestServer({ dir: path.join(dir, 'ingest') });
  try {
    const node = await L.startNode(path.join(L.WORKLOADS, 'node-light.js'));
    const udp = await L.freePort();
    const help = ok(L.ISOPROFD, ['--help']).stdout;
    const metricsPort = help.includes('metrics.listen') ? await L.freePort() : 0;
    const cfg = path.join(dir, 'isoprof.yaml');
    const config = L.yamlConfig({
      store, targets: [{ port: node.port, worker: 'w', version: 'v1' }], duration: '1s', period: '2s',
      heap: '{period: 2s}', level: 'info', anomaly: `{latency: {listen: "127.0.0.1:${udp}"}}`,
      extra: [`upload: {url: "http://localhost:${srv.port}", batch: {max_delay: 200ms}}`,
        metricsPort ? `metrics: {listen: "127.0.0.1:${metricsPort}"}` : ''].join('\n'),
    });
    fs.writeFileSync(cfg, config);
    const trace = path.join(dir, 'trace');
    // -y: descriptors print with their paths, so a call relative to a
    // directory descriptor (renameat, unlinkat, mkdirat) resolves too.
    const d = L.track(spawn('strace', ['-f', '-qq', '-y', '-o', trace, L.ISOPROFD, '--config', cfg],
      { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, RUNTIME_DIRECTORY: rundir } }), 'strace isoprofd');
    // The daemon is the first process in the trace; signals go to it, not
    // to strace.
    const pid = await L.waitFor(() => {
      if (d.exitCode !== null) throw new Error(`strace isoprofd exited: ${d.stderrText}`);
      const m = fs.existsSync(trace) && /^(\d+) /.exec(fs.readFileSync(trace, 'utf8'));
      return m ? parseInt(m[1], 10) : null;
    }, 10000, 'isoprofd to start under strace');
    const stored = (type) => (d.stderrText.match(new RegExp(`msg="window stored".* type=${type}\\b`, 'g')) || []).length;
    await L.waitFor(() => {
      if (d.exitCode !== null) throw new Error(`isoprofd exited: ${d.stderrText}`);
      return stored('cpu') >= 2 && stored('heap') >= 1 && srv.profiles.length >= 2;
    }, 60000, 'CPU and heap windows stored and uploaded');
    const sock = dgram.createSocket('udp4');
    await new Promise((r) => sock.send('req:12|ms|#worker:w,version:v1', udp, '127.0.0.1', r));
    sock.close();
    const sockPath = path.join(rundir, 'isoprof.sock');
    if (fs.existsSync(sockPath)) {
      for (const p of ['/status', '/metrics']) {
        const r = await request({ socketPath: sockPath, path: p });
        assert.strictEqual(r.status, 200, `GET ${p} on the control socket: ${r.body}`);
      }
    } else {
      t.diagnostic(`no control socket at ${sockPath}: its system calls were not traced`);
    }
    if (metricsPort) {
      const r = await request({ host: '127.0.0.1', port: metricsPort, path: '/metrics' });
      assert.strictEqual(r.status, 200);
    }
    // systemctl reload: SIGHUP with the file unchanged.
    process.kill(pid, 'SIGHUP');
    await L.sleep(1500);
    assert.strictEqual(d.exitCode, null, `isoprofd survives SIGHUP: ${d.stderrText.slice(-2000)}`);
    process.kill(pid, 'SIGTERM');
    const r = await d.exited;
    assert.strictEqual(r.code, 0, `isoprofd exits 0 on SIGTERM: ${d.stderrText.slice(-2000)}`);
    L.assertNoSanitizer(d.stderrText, 'isoprofd');

    const lines = fs.readFileSync(trace, 'utf8').split('\n');
    const used = new Set();
    const bad = { syscalls: new Map(), families: new Set(), wx: [], writes: [] };
    const writable = [store, rundir, os.tmpdir(), '/dev/null'];
    for (const line of lines) {
      const m = /^\d+ +(?:<\.\.\. (\w+) resumed>|(\w+)\()(.*)$/.exec(line);
      if (!m) continue;
      const name = m[1] || m[2];
      const args = m[3];
      used.add(name);
      if (!allowed.has(name) && !bad.syscalls.has(name)) bad.syscalls.set(name, line);
      if (name === 'socket') {
        const f = /^(AF_\w+)/.exec(args);
        if (f && !families.has(f[1])) bad.families.add(`${f[1]}: ${line}`);
      }
      if ((name === 'mmap' && /PROT_WRITE\|PROT_EXEC|PROT_EXEC\|PROT_WRITE/.test(args)) ||
          (name === 'mprotect' && /PROT_EXEC/.test(args))) bad.wx.push(line);
      const writing = /^(?:openat|open|mkdir|mkdirat|unlink|unlinkat|rename|renameat2?|creat)$/.test(name) &&
        !/ = -1 /.test(line) && (name !== 'openat' && name !== 'open' || /O_WRONLY|O_RDWR|O_CREAT/.test(args));
      if (writing) {
        // Every path argument, resolved against its directory descriptor
        // (`14</run/isoprof>, "isoprof.sock"`) or the working directory.
        for (const a of args.matchAll(/(?:(?:\d+|AT_FDCWD)(?:<([^>]*)>)?, )?"([^"]+)"/g)) {
          const p = a[1] && !a[2].startsWith('/') ? path.resolve(a[1], a[2]) : path.resolve(a[2]);
          if (!writable.some((w) => p === w || p.startsWith(w + path.sep))) bad.writes.push(line);
        }
      }
    }
    assert.ok(used.has('epoll_wait') || used.has('epoll_pwait'), 'the trace covers the loop');
    assert.deepStrictEqual([...bad.syscalls.values()], [], 'system calls outside the unit\'s SystemCallFilter');
    assert.deepStrictEqual([...bad.families], [], 'address families outside RestrictAddressFamilies');
    assert.deepStrictEqual(bad.wx, [], 'writable and executable memory (MemoryDenyWriteExecute)');
    assert.deepStrictEqual(bad.writes, [], 'writes outside the store, the runtime directory and /tmp (ProtectSystem=strict)');
    t.diagnostic(`${used.size} distinct system calls traced, all allowed`);
  } finally {
    await srv.close();
  }
});
