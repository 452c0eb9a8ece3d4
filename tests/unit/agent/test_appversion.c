/* Unit tests for a process's version read from the process itself
 * (appversion.h, and the scan that calls it): the package.json reader on
 * good, odd and hostile texts, and searches in a fake /proc whose
 * processes' roots are directories of the test: an environment variable,
 * a package.json found walking up from the script, one under
 * node_modules skipped, malformed, huge, missing and FIFO files, a walk
 * that stops after APPVER_LEVELS directories, and symbolic links that
 * point outside the process's root, which never reach the file there. */
#include "../scratch.h"
#include "../test.h"
#include "appversion.h"
#include "base.h"
#include "procscan.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* base/rel, creating rel's directories; the path to out (1 KiB). */
static void mkpath(char *out, const char *base, const char *rel)
{
    if ((size_t)snprintf(out, 1024, "%s/%s", base, rel) >= 1024)
        abort();
    for (char *p = out + strlen(base) + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        if (mkdir(out, 0755) != 0 && errno != EEXIST) {
            perror(out);
            abort();
        }
        *p = '/';
    }
}

static void file(const char *base, const char *rel, const void *data, size_t n)
{
    char p[1024];
    mkpath(p, base, rel);
    FILE *f = fopen(p, "wb");
    if (f == NULL || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        perror(p);
        abort();
    }
}

static void text(const char *base, const char *rel, const char *s)
{
    file(base, rel, s, strlen(s));
}

static void slink(const char *base, const char *rel, const char *target)
{
    char p[1024];
    mkpath(p, base, rel);
    if (symlink(target, p) != 0) {
        perror(p);
        abort();
    }
}

/* A process of the fake /proc: root/PID/{root, cwd, cmdline, environ}.
 * Its root is the directory fsroot; its cwd the path cwd as it sees it
 * (a link read, never followed). */
static void fake_proc(const char *root, unsigned pid, const char *fsroot, const char *cwd,
                      const char *cmdline, size_t clen, const char *env, size_t elen)
{
    char rel[64];
    snprintf(rel, sizeof(rel), "%u/root", pid);
    slink(root, rel, fsroot);
    snprintf(rel, sizeof(rel), "%u/cwd", pid);
    slink(root, rel, cwd);
    snprintf(rel, sizeof(rel), "%u/cmdline", pid);
    file(root, rel, cmdline, clen);
    snprintf(rel, sizeof(rel), "%u/environ", pid);
    file(root, rel, env, elen);
}

static char scratch[APPVER_MAX_FILE + 1];

/* appver_find on root's pid with the given sources. */
static int find_as(const char *root, unsigned pid, int node, const char *const *src, size_t n,
                   struct appver *out)
{
    char p[1024], cmd[4096], env[4096];
    snprintf(p, sizeof(p), "%s/%u/cmdline", root, pid);
    FILE *f = fopen(p, "rb");
    size_t cl = f ? fread(cmd, 1, sizeof(cmd), f) : 0;
    if (f)
        fclose(f);
    snprintf(p, sizeof(p), "%s/%u/environ", root, pid);
    f = fopen(p, "rb");
    size_t el = f ? fread(env, 1, sizeof(env), f) : 0;
    if (f)
        fclose(f);
    return appver_find(root, pid, node, cmd, cl, env, el, src, n, scratch, out);
}

static int find(const char *root, unsigned pid, const char *const *src, size_t n,
                struct appver *out)
{
    return find_as(root, pid, 1, src, n, out);
}

static int parse(const char *s, char *out, char *why)
{
    return appver_package_json_parse(s, strlen(s), out, APPVER_VERSION_MAX + 1, why, 200);
}

TEST(package_json_texts)
{
    char v[APPVER_VERSION_MAX + 1], why[200];
    CHECK_EQ_INT(parse("{\"name\":\"shop\",\"version\":\"1.2.3\"}", v, why), 1);
    CHECK_STR(v, "1.2.3");
    /* only the top level's; escapes unescaped; the last of two wins */
    CHECK_EQ_INT(parse("{\"dependencies\":{\"version\":\"9\"},\"config\":[{\"version\":\"8\"}],"
                       "\"version\":\"2.0.0-rc.\\u0031\",\"version\":\"2.0.1\"}",
                       v, why),
                 1);
    CHECK_STR(v, "2.0.1");
    CHECK_EQ_INT(parse("{\"version\":\"3.0.0\",\"dependencies\":{\"version\":\"9\"}}", v, why), 1);
    CHECK_STR(v, "3.0.0");
    /* no usable version: each says why */
    CHECK_EQ_INT(parse("{\"name\":\"shop\",\"private\":true}", v, why), 0);
    CHECK_STR(why, "it has no version");
    CHECK_STR(v, "");
    CHECK_EQ_INT(parse("{\"version\":42}", v, why), 0);
    CHECK_STR(why, "its version is not a string");
    CHECK_EQ_INT(parse("{\"version\":{\"major\":1}}", v, why), 0);
    CHECK_STR(why, "its version is not a string");
    CHECK_EQ_INT(parse("{\"version\":\"\"}", v, why), 0);
    CHECK_STR(why, "its version is empty");
    CHECK_EQ_INT(parse("[{\"version\":\"1\"}]", v, why), 0);
    CHECK_STR(why, "it has no version");
    char longv[400];
    snprintf(longv, sizeof(longv), "{\"version\":\"%0300d\"}", 7);
    CHECK_EQ_INT(parse(longv, v, why), 0);
    CHECK_STR(why, "its version is longer than 255 bytes");
    /* malformed: said with the byte at fault */
    CHECK_EQ_INT(parse("{\"version\":\"1.0.0\",}", v, why), 0);
    CHECK(strncmp(why, "malformed JSON at byte ", 23) == 0);
    CHECK_STR(v, "");
    CHECK_EQ_INT(parse("{\"version\":\"1.0.0\"", v, why), 0);
    CHECK(strncmp(why, "malformed JSON", 14) == 0);
    CHECK_EQ_INT(parse("{\"version\":\"\xff\"}", v, why), 0);
    CHECK(strncmp(why, "malformed JSON", 14) == 0);
    CHECK_EQ_INT(parse("\"1.0.0\"", v, why), 0);
    CHECK(strncmp(why, "malformed JSON", 14) == 0);
    /* nesting past the limit */
    char deep[300];
    size_t k = 0;
    k += (size_t)snprintf(deep, sizeof(deep), "{\"a\":");
    for (int i = 0; i < APPVER_MAX_DEPTH + 2; i++)
        deep[k++] = '[';
    deep[k] = '\0';
    CHECK_EQ_INT(parse(deep, v, why), 0);
    CHECK(strncmp(why, "malformed JSON", 14) == 0);
}

static const char *const PKG[] = {"package.json"};

TEST(env_then_package_json)
{
    char *root = tmp_dir(), *fs = tmp_dir();
    static const char cmd[] = "node\0--inspect-port=0\0server.js\0";
    static const char env[] = "PATH=/bin\0APP_VERSION=\0GIT_SHA=abc123\0APP_VERSION2=7.7\0";
    fake_proc(root, 10, fs, "/srv/app", cmd, sizeof(cmd) - 1, env, sizeof(env) - 1);
    text(fs, "srv/app/package.json", "{\"version\":\"4.5.6\"}");
    struct appver v;
    const char *const src1[] = {"env:GIT_SHA", "package.json"};
    CHECK_EQ_INT(find(root, 10, src1, 2, &v), 1);
    CHECK_STR(v.version, "abc123");
    CHECK_STR(v.source, "env:GIT_SHA");
    CHECK_STR(v.file, "");
    /* an empty or absent variable gives way to the next source */
    const char *const src2[] = {"env:APP_VERSION", "env:MISSING", "package.json", "env:GIT_SHA"};
    CHECK_EQ_INT(find(root, 10, src2, 4, &v), 1);
    CHECK_STR(v.version, "4.5.6");
    CHECK_STR(v.source, "package.json");
    CHECK_STR(v.file, "/srv/app/package.json");
    CHECK_STR(v.why, "");
    /* not a Node binary (workerd serve, deno run): its environment only */
    CHECK_EQ_INT(find_as(root, 10, 0, src2, 4, &v), 1);
    CHECK_STR(v.version, "abc123");
    CHECK_STR(v.source, "env:GIT_SHA");
    /* a name is matched whole, not as a prefix */
    const char *const src3[] = {"env:APP"};
    CHECK_EQ_INT(find(root, 10, src3, 1, &v), 0);
    CHECK_STR(v.version, "");
}

TEST(package_json_walks_up)
{
    char *root = tmp_dir(), *fs = tmp_dir();
    /* the script two directories below the package, relative to cwd, with
     * "." and ".." on the way */
    static const char c1[] = "node\0-r\0./trace.js\0--\0./lib/./x/../server/main.js\0a\0";
    fake_proc(root, 20, fs, "/srv/app", c1, sizeof(c1) - 1, "", 0);
    text(fs, "srv/app/package.json", "{\"name\":\"shop\",\"version\":\"3.1.4\"}");
    text(fs, "srv/package.json", "{\"version\":\"0.0.1\"}");
    struct appver v;
    CHECK_EQ_INT(find(root, 20, PKG, 1, &v), 1);
    CHECK_STR(v.version, "3.1.4");
    CHECK_STR(v.file, "/srv/app/package.json");
    /* an absolute script; one under node_modules is the app's */
    static const char c2[] = "node\0/srv/app/node_modules/next/dist/bin/next\0start\0";
    fake_proc(root, 21, fs, "/", c2, sizeof(c2) - 1, "", 0);
    text(fs, "srv/app/node_modules/next/package.json", "{\"version\":\"14.0.0\"}");
    CHECK_EQ_INT(find(root, 21, PKG, 1, &v), 1);
    CHECK_STR(v.version, "3.1.4");
    /* the nearest package.json is the package, version or not */
    static const char c3[] = "node\0/srv/app/tools/gen.js\0";
    fake_proc(root, 22, fs, "/", c3, sizeof(c3) - 1, "", 0);
    text(fs, "srv/app/tools/package.json", "{\"type\":\"module\"}");
    CHECK_EQ_INT(find(root, 22, PKG, 1, &v), 0);
    CHECK_STR(v.why, "/srv/app/tools/package.json: it has no version");
    /* at most APPVER_LEVELS directories: the script's and 4 above */
    static const char c4[] = "node\0/srv/app/a/b/c/d/e/f.js\0";
    fake_proc(root, 23, fs, "/", c4, sizeof(c4) - 1, "", 0);
    CHECK_EQ_INT(find(root, 23, PKG, 1, &v), 0);
    CHECK_STR(v.why, "");
    static const char c5[] = "node\0/srv/app/a/b/c/d/f.js\0";
    fake_proc(root, 24, fs, "/", c5, sizeof(c5) - 1, "", 0);
    CHECK_EQ_INT(find(root, 24, PKG, 1, &v), 1);
    CHECK_STR(v.version, "3.1.4");
    /* no script (-e), none anywhere: nothing, nothing said */
    static const char c6[] = "node\0-e\0";
    fake_proc(root, 25, fs, "/", c6, sizeof(c6) - 1, "", 0);
    CHECK_EQ_INT(find(root, 25, PKG, 1, &v), 0);
    static const char c7[] = "node\0/opt/none/x.js\0";
    fake_proc(root, 26, fs, "/", c7, sizeof(c7) - 1, "", 0);
    CHECK_EQ_INT(find(root, 26, PKG, 1, &v), 0);
    CHECK_STR(v.why, "");
}

TEST(package_json_bad_files)
{
    char *root = tmp_dir(), *fs = tmp_dir();
    struct appver v;
    const char *const src[] = {"package.json", "env:V"};
    /* malformed: said, and the next source is tried */
    static const char c1[] = "node\0/m/x.js\0";
    fake_proc(root, 30, fs, "/", c1, sizeof(c1) - 1, "V=env-1\0", 8);
    text(fs, "m/package.json", "{\"version\": \"1.0.0\" \"name\": 1}");
    CHECK_EQ_INT(find(root, 30, src, 2, &v), 1);
    CHECK_STR(v.version, "env-1");
    CHECK_STR(v.source, "env:V");
    CHECK(strncmp(v.why, "/m/package.json: malformed JSON at byte ", 40) == 0);
    /* huge: refused, not cut, whatever it starts with */
    static const char c2[] = "node\0/h/x.js\0";
    fake_proc(root, 31, fs, "/", c2, sizeof(c2) - 1, "", 0);
    size_t big = APPVER_MAX_FILE + 100;
    char *h = isoprof_malloc(big);
    REQUIRE(h != NULL);
    memset(h, ' ', big);
    memcpy(h, "{\"version\":\"1.0.0\"}", 19);
    file(fs, "h/package.json", h, big);
    isoprof_free(h);
    CHECK_EQ_INT(find(root, 31, PKG, 1, &v), 0);
    CHECK_STR(v.why, "/h/package.json: larger than 64 KiB");
    /* exactly the cap is read */
    char *e = isoprof_malloc(APPVER_MAX_FILE);
    REQUIRE(e != NULL);
    memset(e, ' ', APPVER_MAX_FILE);
    memcpy(e, "{\"version\":\"1.0.0\"}", 19);
    file(fs, "h/ok/package.json", e, APPVER_MAX_FILE);
    isoprof_free(e);
    static const char c3[] = "node\0/h/ok/x.js\0";
    fake_proc(root, 32, fs, "/", c3, sizeof(c3) - 1, "", 0);
    CHECK_EQ_INT(find(root, 32, PKG, 1, &v), 1);
    CHECK_STR(v.version, "1.0.0");
    /* a FIFO: not opened for reading in a way that waits, not read */
    char p[1024];
    mkpath(p, fs, "f/package.json");
    REQUIRE(mkfifo(p, 0644) == 0);
    static const char c4[] = "node\0/f/x.js\0";
    fake_proc(root, 33, fs, "/", c4, sizeof(c4) - 1, "", 0);
    CHECK_EQ_INT(find(root, 33, PKG, 1, &v), 0);
    CHECK_STR(v.why, "/f/package.json: not a regular file");
    /* a directory of that name */
    mkpath(p, fs, "d/package.json/x");
    REQUIRE(mkdir(p, 0755) == 0 || errno == EEXIST);
    static const char c5[] = "node\0/d/x.js\0";
    fake_proc(root, 34, fs, "/", c5, sizeof(c5) - 1, "", 0);
    CHECK_EQ_INT(find(root, 34, PKG, 1, &v), 0);
    CHECK_STR(v.why, "/d/package.json: not a regular file");
    /* a process gone: no root, no cwd */
    CHECK_EQ_INT(find(root, 99, PKG, 1, &v), 0);
    CHECK_STR(v.version, "");
}

TEST(links_stay_inside_the_root)
{
    char *root = tmp_dir(), *fs = tmp_dir(), *host = tmp_dir();
    /* the host's file, outside the process's root */
    text(host, "secret/package.json", "{\"version\":\"host-6.6.6\"}");
    char target[1024];
    snprintf(target, sizeof(target), "%s/secret/package.json", host);
    struct appver v;
    /* an absolute link to the host's path: resolved inside the root,
     * where nothing is */
    static const char c1[] = "node\0/a/x.js\0";
    fake_proc(root, 40, fs, "/", c1, sizeof(c1) - 1, "", 0);
    slink(fs, "a/package.json", target);
    CHECK_EQ_INT(find(root, 40, PKG, 1, &v), 0);
    CHECK_STR(v.version, "");
    /* a relative link climbing out: ".." stops at the root */
    static const char c2[] = "node\0/b/x.js\0";
    fake_proc(root, 41, fs, "/", c2, sizeof(c2) - 1, "", 0);
    char up[1024];
    snprintf(up, sizeof(up), "../../../../../../../../..%s/secret/package.json", host);
    slink(fs, "b/package.json", up);
    CHECK_EQ_INT(find(root, 41, PKG, 1, &v), 0);
    CHECK_STR(v.version, "");
    /* a directory link out of the root, on the script's path */
    static const char c3[] = "node\0/c/secret/x.js\0";
    fake_proc(root, 42, fs, "/", c3, sizeof(c3) - 1, "", 0);
    slink(fs, "c", host);
    CHECK_EQ_INT(find(root, 42, PKG, 1, &v), 0);
    CHECK_STR(v.version, "");
    /* the script's own ".." never climbs past "/" */
    static const char c4[] = "node\0../../../../../../x.js\0";
    fake_proc(root, 43, fs, "/srv", c4, sizeof(c4) - 1, "", 0);
    CHECK_EQ_INT(find(root, 43, PKG, 1, &v), 0);
    /* a link that stays inside, absolute as the process sees it, is
     * followed: a deploy's "current" link */
    text(fs, "releases/42/package.json", "{\"version\":\"42.0.0\"}");
    slink(fs, "current", "/releases/42");
    static const char c5[] = "node\0/current/x.js\0";
    fake_proc(root, 44, fs, "/", c5, sizeof(c5) - 1, "", 0);
    CHECK_EQ_INT(find(root, 44, PKG, 1, &v), 1);
    CHECK_STR(v.version, "42.0.0");
    /* and the host's file is still only the host's */
    CHECK(strstr(v.version, "host") == NULL);
}

/* A whole scan with version_from: found for a new process, not looked for
 * again for one whose version is settled. */
TEST(scan_reads_versions)
{
    char *root = tmp_dir(), *fs = tmp_dir();
    text(root, "net/tcp", "  sl  local_address rem_address   st\n");
    text(fs, "app/package.json", "{\"version\":\"5.0.0\"}");
    for (unsigned pid = 50; pid <= 51; pid++) {
        static const char cmd[] = "node\0/app/main.js\0";
        fake_proc(root, pid, fs, "/", cmd, sizeof(cmd) - 1, "", 0);
        char rel[64], st[256];
        snprintf(rel, sizeof(rel), "%u/exe", pid);
        slink(root, rel, "/usr/bin/node");
        snprintf(rel, sizeof(rel), "%u/status", pid);
        text(root, rel, "Name:\tnode\nUid:\t1000\t1000\t1000\t1000\n");
        snprintf(rel, sizeof(rel), "%u/stat", pid);
        snprintf(st, sizeof(st), "%u (node) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %u 0 0\n", pid,
                 7000 + pid);
        text(root, rel, st);
    }
    const char *exe[] = {"node"};
    struct procscan_key settled[] = {{51, 7051}};
    struct procscan_filter f = {.exe = exe,
                                .nexe = 1,
                                .version_from = PKG,
                                .nversion = 1,
                                .settled = settled,
                                .nsettled = 1};
    struct procscan_result r;
    char why[200];
    REQUIRE(procscan_run(root, &f, &r, why, sizeof(why)) == 0);
    REQUIRE(r.n == 2);
    CHECK(r.p[0].flags & PROCSCAN_VERSION_READ);
    CHECK_STR(r.p[0].version.version, "5.0.0");
    CHECK_STR(r.p[0].version.source, "package.json");
    CHECK(!(r.p[1].flags & PROCSCAN_VERSION_READ));
    CHECK_STR(r.p[1].version.version, "");
    procscan_result_free(&r);
    /* no sources: nothing looked for */
    f.nversion = 0;
    REQUIRE(procscan_run(root, &f, &r, why, sizeof(why)) == 0);
    REQUIRE(r.n == 2);
    CHECK(!(r.p[0].flags & PROCSCAN_VERSION_READ));
    procscan_result_free(&r);
}

int main(void)
{
    RUN(package_json_texts);
    RUN(env_then_package_json);
    RUN(package_json_walks_up);
    RUN(package_json_bad_files);
    RUN(links_stay_inside_the_root);
    RUN(scan_reads_versions);
    TEST_EXIT();
}
