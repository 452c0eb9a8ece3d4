/* Unit tests for the /proc scan of host process discovery (procscan.h):
 * the parsers of net/tcp, Node's options, cgroup and status, and whole
 * scans of a fake /proc holding what a hostile or racing host can show: a
 * listener on 0.0.0.0, a process that vanished between readdir and its
 * files, a command line of odd bytes, garbage in the socket tables, a
 * process in another network namespace, one of another executable. */
#include "../scratch.h"
#include "../test.h"
#include "base.h"
#include "procscan.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

/* dir/name in p (1 KiB), or abort. */
static void path_(char *p, const char *dir, const char *name)
{
    size_t dl = strlen(dir), nl = strlen(name);
    if (dl + nl + 2 > 1024)
        abort();
    memcpy(p, dir, dl);
    p[dl] = '/';
    memcpy(p + dl + 1, name, nl + 1);
}

static void put(const char *dir, const char *name, const void *data, size_t n)
{
    char p[1024];
    path_(p, dir, name);
    FILE *f = fopen(p, "wb");
    if (f == NULL || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        perror(p);
        abort();
    }
}

static void puts_(const char *dir, const char *name, const char *text)
{
    put(dir, name, text, strlen(text));
}

static void link_(const char *dir, const char *name, const char *target)
{
    char p[1024];
    path_(p, dir, name);
    if (symlink(target, p) != 0) {
        perror(p);
        abort();
    }
}

static void mkdir_(const char *dir, const char *name)
{
    char p[1024];
    path_(p, dir, name);
    if (mkdir(p, 0755) != 0 && errno != EEXIST) {
        perror(p);
        abort();
    }
}

static const char TCP_HEAD[] = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when "
                               "retrnsmt   uid  timeout inode\n";

/* A net/tcp line: addr as the kernel prints it. */
static void tcp_line(char *out, size_t cap, int i, const char *addr, unsigned port, const char *st,
                     unsigned long inode)
{
    snprintf(out, cap,
             "%4d: %s:%04X 00000000:0000 %s 00000000:00000000 00:00000000 00000000     0        0 "
             "%lu 1 0000000000000000 100 0 0 10 0\n",
             i, addr, port, st, inode);
}

/* A process directory: exe link, status (uid, SigCgt), stat, cmdline
 * (argv, NUL-separated, len bytes), fds as socket inodes. */
static void proc(const char *root, unsigned pid, const char *exe, unsigned uid, const char *sigcgt,
                 unsigned long start, const char *cmdline, size_t clen, const unsigned long *inodes,
                 size_t ninodes, const char *netns)
{
    char d[1024], name[64];
    snprintf(name, sizeof(name), "%u", pid);
    mkdir_(root, name);
    path_(d, root, name);
    link_(d, "exe", exe);
    char status[512];
    snprintf(status, sizeof(status),
             "Name:\tnode\nUid:\t%u\t%u\t%u\t%u\nSigBlk:\t0000000000000000\nSigIgn:\t"
             "0000000001001000\nSigCgt:\t%s\n",
             uid, uid, uid, uid, sigcgt);
    puts_(d, "status", status);
    char stat[512];
    snprintf(stat, sizeof(stat),
             "%u (no de) weird) S 1 %u %u 0 -1 4194560 100 0 0 0 5 1 0 0 20 0 11 0 %lu 1000 50 "
             "18446744073709551615 1 1 0 0 0 0 0 16781312 17922 0 0 0 17 1 0 0 0 0 0\n",
             pid, pid, pid, start);
    puts_(d, "stat", stat);
    put(d, "cmdline", cmdline, clen);
    puts_(d, "environ", "PATH=/usr/bin\0NODE_ENV=production\0");
    puts_(d, "cgroup",
          "0::/system.slice/docker-"
          "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope\n");
    mkdir_(d, "ns");
    link_(d, "ns/net", netns);
    mkdir_(d, "fd");
    for (size_t i = 0; i < ninodes; i++) {
        char fdn[32], tgt[64];
        snprintf(fdn, sizeof(fdn), "fd/%zu", i + 3);
        snprintf(tgt, sizeof(tgt), "socket:[%lu]", inodes[i]);
        link_(d, fdn, tgt);
    }
    link_(d, "fd/0", "/dev/null");
}

static const char *NS = "net:[4026531840]";

static char *fake_proc(void)
{
    char *root = tmp_dir();
    mkdir_(root, "net");
    mkdir_(root, "self");
    mkdir_(root, "self/ns");
    link_(root, "self/ns/net", NS);
    char tcp[8192], line[256];
    snprintf(tcp, sizeof(tcp), "%s", TCP_HEAD);
    /* 127.0.0.1:9229 listen (inode 100), 0.0.0.0:9230 listen (101),
     * 127.0.0.1:3000 listen (102), an established one (103), garbage. */
    tcp_line(line, sizeof(line), 0, "0100007F", 9229, "0A", 100);
    strcat(tcp, line);
    tcp_line(line, sizeof(line), 1, "00000000", 9230, "0A", 101);
    strcat(tcp, line);
    tcp_line(line, sizeof(line), 2, "0100007F", 3000, "0A", 102);
    strcat(tcp, line);
    tcp_line(line, sizeof(line), 3, "0100007F", 9229, "01", 103);
    strcat(tcp, line);
    strcat(tcp, "   4: zzzzzzzz:GGGG 00000000:0000 0A\n\n\xff\xfe garbage\n");
    tcp_line(line, sizeof(line), 5, "0100007F", 4000, "0A", 104);
    strcat(tcp, line);
    puts_(root, "net/tcp", tcp);
    snprintf(tcp, sizeof(tcp), "%s", TCP_HEAD);
    /* [::1]:9231 (200), [::]:9232 (201) */
    tcp_line(line, sizeof(line), 0, "00000000000000000000000001000000", 9231, "0A", 200);
    strcat(tcp, line);
    tcp_line(line, sizeof(line), 1, "00000000000000000000000000000000", 9232, "0A", 201);
    strcat(tcp, line);
    puts_(root, "net/tcp6", tcp);

    static const char c1[] = "node\0--inspect=127.0.0.1:9229\0app.js\0";
    unsigned long i1[] = {100, 102, 103};
    proc(root, 101, "/usr/bin/node", 1000, "0000000100004602", 5000, c1, sizeof(c1) - 1, i1, 3, NS);
    /* On 0.0.0.0 and [::]: never reported as loopback ports. */
    static const char c2[] = "node\0--inspect=0.0.0.0:9230\0app.js\0";
    unsigned long i2[] = {101, 201};
    proc(root, 102, "/usr/bin/node", 1000, "0000000100004602", 5001, c2, sizeof(c2) - 1, i2, 2, NS);
    /* Opted in, no listener yet; a command line of odd bytes. */
    static const char c3[] = "node\0--inspect-port=0\0/srv/\xff\n\x01"
                             "app \"x\".js\0--inspect-port=9\xff\0";
    proc(root, 103, "/usr/local/bin/node (deleted)", 1001, "0000000100004602", 5002, c3,
         sizeof(c3) - 1, NULL, 0, NS);
    /* Not a node executable, listening on loopback. */
    static const char c4[] = "python3\0-m\0http.server\0";
    unsigned long i4[] = {104};
    proc(root, 104, "/usr/bin/python3", 1000, "0000000000004002", 5003, c4, sizeof(c4) - 1, i4, 1,
         NS);
    /* Another network namespace, with the ::1 listener's inode. */
    static const char c5[] = "node\0--inspect-port=0\0x.js\0";
    unsigned long i5[] = {200};
    proc(root, 105, "/usr/bin/node", 1000, "0000000100004602", 5004, c5, sizeof(c5) - 1, i5, 1,
         "net:[4026532000]");
    /* Vanished mid-scan: its directory is there, its files are not. */
    mkdir_(root, "106");
    /* A kernel thread: no exe. */
    mkdir_(root, "2");
    puts_(root, "2/status", "Name:\tkthreadd\nUid:\t0\t0\t0\t0\n");
    /* Not a process. */
    mkdir_(root, "sys");
    return root;
}

TEST(parse_tcp)
{
    char text[2048], line[256];
    snprintf(text, sizeof(text), "%s", TCP_HEAD);
    tcp_line(line, sizeof(line), 0, "0100007F", 9229, "0A", 7);
    strcat(text, line);
    tcp_line(line, sizeof(line), 1, "0100000A", 80, "0A", 8); /* 10.0.0.1 */
    strcat(text, line);
    tcp_line(line, sizeof(line), 2, "0105007F", 81, "0A", 9); /* 127.0.5.1 */
    strcat(text, line);
    strcat(text, "x\n 3: 0100007F:1F90 0\n");
    struct procscan_listener l[4];
    size_t n = 0, bad = 0;
    size_t over = procscan_parse_tcp(text, strlen(text), 0, l, &n, 2, &bad);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(over, 1);
    CHECK_EQ_INT(bad, 2);
    CHECK_EQ_INT(l[0].port, 9229);
    CHECK_EQ_INT(l[0].inode, 7);
    CHECK_EQ_INT(l[0].loopback, 1);
    CHECK_EQ_INT(l[1].loopback, 0);
    /* v4-mapped ::ffff:127.0.0.1 is loopback, ::ffff:10.0.0.1 is not */
    snprintf(text, sizeof(text), "%s", TCP_HEAD);
    tcp_line(line, sizeof(line), 0, "0000000000000000FFFF00000100007F", 1, "0A", 11);
    strcat(text, line);
    tcp_line(line, sizeof(line), 1, "0000000000000000FFFF00000100000A", 2, "0A", 12);
    strcat(text, line);
    n = bad = 0;
    procscan_parse_tcp(text, strlen(text), 1, l, &n, 4, &bad);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(l[0].loopback, 1);
    CHECK_EQ_INT(l[1].loopback, 0);
    /* an empty text, a header alone, no newline at the end */
    n = bad = 0;
    procscan_parse_tcp("", 0, 0, l, &n, 4, &bad);
    procscan_parse_tcp(TCP_HEAD, strlen(TCP_HEAD) - 1, 0, l, &n, 4, &bad);
    CHECK_EQ_INT(n, 0);
    CHECK_EQ_INT(bad, 0);
}

static unsigned opts(const char *cmd, size_t n, const char *env, char *optin)
{
    return procscan_options(cmd, n, env, env ? strlen(env) : 0, optin, 64);
}
#define OPTS(lit, env, optin) opts(lit, sizeof(lit) - 1, env, optin)

TEST(options)
{
    char v[64];
    CHECK_EQ_INT(OPTS("node\0--inspect-port=0\0app.js\0", NULL, v), PROCSCAN_OPTIN);
    CHECK_STR(v, "0");
    CHECK_EQ_INT(OPTS("node\0--inspect-port\0"
                      "127.0.0.1:0\0app.js\0",
                      NULL, v),
                 PROCSCAN_OPTIN);
    CHECK_STR(v, "127.0.0.1:0");
    CHECK_EQ_INT(OPTS("node\0--inspect_port=localhost:9230\0a.js\0", NULL, v), PROCSCAN_OPTIN);
    CHECK_EQ_INT(OPTS("node\0--inspect-port=[::1]:0\0a.js\0", NULL, v), PROCSCAN_OPTIN);
    CHECK_EQ_INT(OPTS("node\0--debug-port=9229\0a.js\0", NULL, v), PROCSCAN_OPTIN);
    /* not loopback, or not a port */
    CHECK_EQ_INT(OPTS("node\0--inspect-port=0.0.0.0:0\0a.js\0", NULL, v), PROCSCAN_OPTIN_REFUSED);
    CHECK_STR(v, "0.0.0.0:0");
    CHECK_EQ_INT(OPTS("node\0--inspect-port=10.1.2.3:0\0a.js\0", NULL, v), PROCSCAN_OPTIN_REFUSED);
    CHECK_EQ_INT(OPTS("node\0--inspect-port=127.0.0.1.evil.com:0\0a.js\0", NULL, v),
                 PROCSCAN_OPTIN_REFUSED);
    CHECK_EQ_INT(OPTS("node\0--inspect-port=70000\0a.js\0", NULL, v), PROCSCAN_OPTIN_REFUSED);
    CHECK_EQ_INT(OPTS("node\0--inspect-port=\0a.js\0", NULL, v), PROCSCAN_OPTIN_REFUSED);
    /* after the script: the app's argument, not Node's option */
    CHECK_EQ_INT(OPTS("node\0app.js\0--inspect-port=0\0", NULL, v), 0);
    CHECK_EQ_INT(OPTS("node\0--\0--inspect-port=0\0", NULL, v), 0);
    /* a value option's value is skipped, not taken for the script */
    CHECK_EQ_INT(OPTS("node\0-r\0./tracing.js\0--inspect-port=0\0app.js\0", NULL, v),
                 PROCSCAN_OPTIN);
    CHECK_EQ_INT(OPTS("node\0--inspect\0app.js\0", NULL, v), PROCSCAN_INSPECT);
    CHECK_EQ_INT(OPTS("node\0--inspect-brk=127.0.0.1:0\0app.js\0", NULL, v), PROCSCAN_INSPECT);
    CHECK_EQ_INT(OPTS("node\0--disable-sigusr1\0--inspect-port=0\0a.js\0", NULL, v),
                 PROCSCAN_NO_SIGUSR1 | PROCSCAN_OPTIN);
    /* NODE_OPTIONS, the command line winning */
    CHECK_EQ_INT(OPTS("node\0app.js\0", "--max-old-space-size=100 --inspect-port=0", v),
                 PROCSCAN_OPTIN);
    CHECK_EQ_INT(OPTS("node\0app.js\0", "--inspect-port 127.0.0.1:9000", v), PROCSCAN_OPTIN);
    CHECK_STR(v, "127.0.0.1:9000");
    CHECK_EQ_INT(OPTS("node\0app.js\0", "--title \"a --inspect-port=0 b\"", v), 0);
    CHECK_EQ_INT(OPTS("node\0--inspect-port=0\0app.js\0", "--inspect-port=0.0.0.0:1", v),
                 PROCSCAN_OPTIN);
    CHECK_EQ_INT(OPTS("node\0--inspect-port=0.0.0.0:1\0app.js\0", "--inspect-port=0", v),
                 PROCSCAN_OPTIN_REFUSED);
    CHECK_EQ_INT(OPTS("node\0app.js\0", "\"--inspect-port=\\\"0\\\"\"", v), PROCSCAN_OPTIN_REFUSED);
    /* degenerate command lines */
    CHECK_EQ_INT(opts("", 0, NULL, v), 0);
    CHECK_EQ_INT(opts("node", 4, NULL, v), 0);
    CHECK_EQ_INT(OPTS("node\0--inspect-port", NULL, v), PROCSCAN_OPTIN_REFUSED);
    /* an --inspect-port value far over the kept length is cut, not overrun */
    char big[300];
    memcpy(big, "node\0--inspect-port=", 20);
    memset(big + 20, '1', sizeof(big) - 21);
    big[sizeof(big) - 1] = '\0';
    CHECK_EQ_INT(opts(big, sizeof(big), NULL, v), PROCSCAN_OPTIN_REFUSED);
    CHECK_EQ_INT(strlen(v), 63);

    size_t vl;
    const char *no = procscan_node_options("A=1\0NODE_OPTIONS=--x\0B=2", 25, &vl);
    REQUIRE(no != NULL);
    CHECK_EQ_INT(vl, 3);
    CHECK(procscan_node_options("A=1\0NODE_OPTIONSX=1\0", 20, &vl) == NULL);
    CHECK(procscan_node_options("NODE_OPTIONS", 12, &vl) == NULL);
}

TEST(container_status_names)
{
    char c[PROCSCAN_CONTAINER_LEN + 1];
    const char *k8s =
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/"
        "cri-containerd-"
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.scope\n";
    CHECK_EQ_INT(procscan_container(k8s, strlen(k8s), c), 1);
    CHECK_EQ_INT(strlen(c), 64);
    CHECK(c[0] == 'a');
    const char *v1 =
        "12:memory:/docker/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\n"
        "0::/\n";
    CHECK_EQ_INT(procscan_container(v1, strlen(v1), c), 1);
    CHECK(c[0] == 'b');
    const char *host = "0::/user.slice/user-1000.slice/session-2.scope\n";
    CHECK_EQ_INT(procscan_container(host, strlen(host), c), 0);
    CHECK_STR(c, "");
    /* 65 hex digits is not an id */
    const char *longer = "0::/x/"
                         "ccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc\n";
    CHECK_EQ_INT(procscan_container(longer, strlen(longer), c), 0);
    CHECK_EQ_INT(procscan_container("garbage without colons", 22, c), 0);

    CHECK(procscan_is_node("node"));
    CHECK(procscan_is_node("nodejs"));
    CHECK(procscan_is_node("node20"));
    CHECK(procscan_is_node("node-18.19.0"));
    CHECK(!procscan_is_node("nodemon"));
    CHECK(!procscan_is_node("node-exporter"));
    CHECK(!procscan_is_node("deno"));
    CHECK(!procscan_is_node("no"));

    uint32_t uid = 7;
    const char *st =
        "Uid:\t1000\t1000\t1000\t1000\nSigIgn:\t0000000000000000\nSigCgt:\t0000000000000200\n";
    CHECK_EQ_INT(procscan_status(st, strlen(st), &uid), PROCSCAN_SIGUSR1);
    CHECK_EQ_INT(uid, 1000);
    /* caught but ignored, not caught, or no masks: no handler */
    st = "SigIgn:\t0000000000000200\nSigCgt:\t0000000000000200\n";
    CHECK_EQ_INT(procscan_status(st, strlen(st), &uid), 0);
    st = "SigIgn:\t0000000000000000\nSigCgt:\t0000000000004002\n";
    CHECK_EQ_INT(procscan_status(st, strlen(st), &uid), 0);
    st = "SigCgt:\tzzzz\n";
    CHECK_EQ_INT(procscan_status(st, strlen(st), &uid), 0);
}

static const struct procscan_proc *find(const struct procscan_result *r, uint32_t pid)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->p[i].pid == pid)
            return &r->p[i];
    return NULL;
}

TEST(scan_fake_proc)
{
    char *root = fake_proc();
    const char *exe[] = {"node"};
    struct procscan_filter f = {.exe = exe, .nexe = 1};
    struct procscan_result r;
    char why[200];
    REQUIRE(procscan_run(root, &f, &r, why, sizeof(why)) == 0);
    CHECK_EQ_INT(r.listeners, 6);
    CHECK_EQ_INT(r.n, 4); /* 101, 102, 103, 105 */
    CHECK_EQ_INT(r.vanished, 1);
    CHECK(r.entries >= 7);
    for (size_t i = 1; i < r.n; i++)
        CHECK(r.p[i - 1].pid < r.p[i].pid);

    const struct procscan_proc *p = find(&r, 101);
    REQUIRE(p != NULL);
    CHECK_EQ_INT(p->nports, 2); /* 9229 and 3000; the established socket is not a listener */
    CHECK_EQ_INT(p->ports[0], 3000);
    CHECK_EQ_INT(p->ports[1], 9229);
    CHECK_EQ_INT(p->uid, 1000);
    CHECK_EQ_INT(p->start_ticks, 5000);
    CHECK(p->flags & PROCSCAN_NODE);
    CHECK(p->flags & PROCSCAN_SIGUSR1);
    CHECK(p->flags & PROCSCAN_INSPECT);
    CHECK(!(p->flags & PROCSCAN_OPTIN));
    CHECK_STR(p->container, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");

    p = find(&r, 102);
    REQUIRE(p != NULL);
    CHECK_EQ_INT(p->nports, 0); /* 0.0.0.0 and [::]: not loopback */
    CHECK_EQ_INT(p->other_listeners, 2);

    p = find(&r, 103);
    REQUIRE(p != NULL);
    CHECK_STR(p->exe, "node"); /* " (deleted)" is cut */
    CHECK(p->flags & PROCSCAN_OPTIN);
    CHECK_STR(p->optin, "0");
    CHECK_EQ_INT(p->nports, 0);

    p = find(&r, 105);
    REQUIRE(p != NULL);
    CHECK(p->flags & PROCSCAN_OTHER_NETNS);
    CHECK_EQ_INT(p->nports, 0); /* its inode is in our table, but not its loopback */
    CHECK(find(&r, 104) == NULL);
    procscan_result_free(&r);

    /* python3 listed too: found, with its loopback port, not a Node binary */
    const char *exe2[] = {"node", "python3"};
    f.exe = exe2;
    f.nexe = 2;
    REQUIRE(procscan_run(root, &f, &r, why, sizeof(why)) == 0);
    p = find(&r, 104);
    REQUIRE(p != NULL);
    CHECK(!(p->flags & PROCSCAN_NODE));
    CHECK(!(p->flags & PROCSCAN_SIGUSR1));
    CHECK_EQ_INT(p->nports, 1);
    CHECK_EQ_INT(p->ports[0], 4000);
    procscan_result_free(&r);

    /* users: only uid 1001's */
    uint32_t uids[] = {1001};
    f.exe = exe;
    f.nexe = 1;
    f.uids = uids;
    f.nuids = 1;
    REQUIRE(procscan_run(root, &f, &r, why, sizeof(why)) == 0);
    CHECK_EQ_INT(r.n, 1);
    CHECK(find(&r, 103) != NULL);
    procscan_result_free(&r);

    /* the agent itself is never reported */
    f.uids = NULL;
    f.nuids = 0;
    f.self_pid = 101;
    REQUIRE(procscan_run(root, &f, &r, why, sizeof(why)) == 0);
    CHECK(find(&r, 101) == NULL);
    procscan_result_free(&r);

    uint64_t st;
    CHECK_EQ_INT(procscan_start_ticks(root, 103, &st), 0);
    CHECK_EQ_INT(st, 5002);
    CHECK_EQ_INT(procscan_start_ticks(root, 106, &st), -ENOENT);
}

TEST(scan_errors)
{
    char why[200];
    const char *exe[] = {"node"};
    struct procscan_filter f = {.exe = exe, .nexe = 1};
    struct procscan_result r;
    /* no net/tcp: the scan cannot tell listeners, an error with a reason */
    char *root = tmp_dir();
    CHECK_EQ_INT(procscan_run(root, &f, &r, why, sizeof(why)), -ENOENT);
    CHECK(strstr(why, "net/tcp") != NULL);
    /* allocation failures: an error, nothing leaked (ASan checks) */
    char *fake = fake_proc();
    unsigned long before = isoprof_alloc_count();
    REQUIRE(procscan_run(fake, &f, &r, why, sizeof(why)) == 0);
    unsigned long used = isoprof_alloc_count() - before;
    procscan_result_free(&r);
    for (unsigned long k = 0; k < used; k++) {
        isoprof_alloc_fail_after((long)k);
        int rc = procscan_run(fake, &f, &r, why, sizeof(why));
        isoprof_alloc_fail_after(-1);
        CHECK(rc == 0 || rc == -ENOMEM);
        if (rc == 0)
            procscan_result_free(&r);
    }
}

/* The real /proc: this process's own listener is found under its pid
 * when its executable is listed (the test binary's name). */
TEST(scan_real_proc)
{
    char exe_path[4096];
    ssize_t n = readlink("/proc/self/exe", exe_path, sizeof(exe_path) - 1);
    REQUIRE(n > 0);
    exe_path[n] = '\0';
    const char *base = strrchr(exe_path, '/') + 1;
    const char *exe[] = {base};
    struct procscan_filter f = {.exe = exe, .nexe = 1};
    struct procscan_result r;
    char why[200];
    REQUIRE(procscan_run("/proc", &f, &r, why, sizeof(why)) == 0);
    const struct procscan_proc *me = find(&r, (uint32_t)getpid());
    REQUIRE(me != NULL);
    CHECK(me->start_ticks > 0);
    CHECK(r.cpu_ns > 0);
    procscan_result_free(&r);
}

int main(void)
{
    RUN(parse_tcp);
    RUN(options);
    RUN(container_status_names);
    RUN(scan_fake_proc);
    RUN(scan_errors);
    RUN(scan_real_proc);
    TEST_EXIT();
}
