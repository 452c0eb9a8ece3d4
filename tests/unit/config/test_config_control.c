/*
 * The control section and metrics.listen: defaults, accepted values, every
 * rule with its exact line:col (the socket path fits in sun_path, a group
 * name, a loopback-only metrics address) and the reload check.
 */
#include "../test.h"
#include "helpers.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

TEST(defaults)
{
    struct cfg *c;
    REQUIRE(cfg_defaults(&c) == 0);
    CHECK_STR(c->control.socket, "");
    CHECK_STR(c->control.group, "");
    CHECK_STR(c->metrics.listen, "");
    cfg_free(c);

    char *why;
    c = load("control:\nmetrics: ~\n", &why);
    REQUIRE(c != NULL);
    CHECK_STR(c->control.socket, "");
    CHECK_STR(c->control.group, "");
    CHECK_STR(c->metrics.listen, "");
    cfg_free(c);
}

TEST(accepted_values)
{
    char *why;
    struct cfg *c = load("control:\n"
                         "  socket: /run/isoprof/isoprof.sock\n"
                         "  group: isoprof-users\n"
                         "metrics:\n"
                         "  listen: 127.0.0.1:9464\n",
                         &why);
    if (c == NULL)
        fprintf(stderr, "%s\n", why);
    REQUIRE(c != NULL);
    CHECK_STR(c->control.socket, "/run/isoprof/isoprof.sock");
    CHECK_STR(c->control.group, "isoprof-users");
    CHECK_STR(c->metrics.listen, "127.0.0.1:9464");
    cfg_free(c);

    /* 107 bytes: the longest path sun_path holds with its NUL */
    char text[256];
    char path[108];
    memset(path, 'p', 107);
    path[0] = '/';
    path[107] = '\0';
    snprintf(text, sizeof(text), "control: {socket: '%s'}\n", path);
    c = load(text, &why);
    REQUIRE(c != NULL);
    CHECK_EQ_INT(strlen(c->control.socket), 107);
    cfg_free(c);

    static const char *texts[] = {
        "control: {socket: relative.sock, group: ''}\n",
        "control: {group: _daemon}\n",
        "metrics: {listen: ''}\n",
        "metrics: {listen: '127.0.0.1:1'}\n",
        "metrics: {listen: '127.255.0.9:65535'}\n",
        "metrics: {listen: 'localhost:9464'}\n",
        "metrics: {listen: '[::1]:9464'}\n",
        "metrics: {listen: '[0:0:0:0:0:0:0:1]:9464'}\n",
        /* the DogStatsD listener is held to loopback the same way */
        "anomaly: {latency: {listen: ''}}\n",
        "anomaly: {latency: {listen: '127.0.0.1:8125'}}\n",
        "anomaly: {latency: {listen: '127.0.0.53:8125'}}\n",
        "anomaly: {latency: {listen: 'localhost:8125'}}\n",
        "anomaly: {latency: {listen: '[::1]:8125'}}\n",
    };
    CHECK_EQ_INT(valid_texts_failed(texts, ISOPROF_ARRAY_SIZE(texts), NULL), 0);
}

TEST(each_rule_at_its_position)
{
    static char long_socket[200];
    char path[109];
    memset(path, 'p', 108);
    path[0] = '/';
    path[108] = '\0';
    snprintf(long_socket, sizeof(long_socket), "control: {socket: '%s'}\n", path);
    const struct one_error cases[] = {
        {long_socket, "t.yaml:1:19: control.socket is longer than 107 bytes"},
        {"control: {socket: \"a\\tb\"}\n",
         "t.yaml:1:19: control.socket must not contain control characters ('a\\x09b')"},
        {"control:\n  socket: [a]\n", "t.yaml:2:11: control.socket must be a string, not a list"},
        {"control: {group: -wheel}\n",
         "t.yaml:1:18: control.group '-wheel' is not a group name (it starts with '-')"},
        {"control: {group: 'a:b'}\n",
         "t.yaml:1:18: control.group 'a:b' is not a group name (no spaces, ':', '/' or ',')"},
        {"control: {group: 'a b'}\n",
         "t.yaml:1:18: control.group 'a b' is not a group name (no spaces, ':', '/' or ',')"},
        {"control: {group: abcdefghijklmnopqrstuvwxyz0123456}\n",
         "t.yaml:1:18: control.group is longer than 32 bytes"},
        {"control: {user: x}\n", NULL},
        {"metrics: {listen: '0.0.0.0:9464'}\n",
         "t.yaml:1:19: metrics.listen '0.0.0.0:9464' is not a loopback address (127.0.0.0/8, "
         "[::1] or localhost)"},
        {"metrics:\n  listen: '10.1.2.3:9464'\n",
         "t.yaml:2:11: metrics.listen '10.1.2.3:9464' is not a loopback address (127.0.0.0/8, "
         "[::1] or localhost)"},
        {"metrics: {listen: '[::]:9464'}\n",
         "t.yaml:1:19: metrics.listen '[::]:9464' is not a loopback address (127.0.0.0/8, [::1] "
         "or localhost)"},
        {"metrics: {listen: '[::ffff:127.0.0.1]:9464'}\n",
         "t.yaml:1:19: metrics.listen '[::ffff:127.0.0.1]:9464' is not a loopback address "
         "(127.0.0.0/8, [::1] or localhost)"},
        {"metrics: {listen: 'prometheus.internal:9464'}\n",
         "t.yaml:1:19: metrics.listen 'prometheus.internal:9464' is not ip:port, localhost:port "
         "or [v6]:port: the host must be an IP address or localhost (nothing is resolved) (\"\" "
         "turns it off)"},
        {"metrics: {listen: '127.0.0.1'}\n",
         "t.yaml:1:19: metrics.listen '127.0.0.1' is not ip:port, localhost:port or [v6]:port: no "
         "':port' (\"\" turns it off)"},
        {"metrics: {listen: '127.0.0.1:0'}\n",
         "t.yaml:1:19: metrics.listen '127.0.0.1:0' is not ip:port, localhost:port or [v6]:port: "
         "the port must be a number from 1 to 65535 (\"\" turns it off)"},
        {"metrics: {port: 9464}\n", NULL},
    };
    /* unknown keys: whatever the loader says about them, at their position */
    struct one_error known[ISOPROF_ARRAY_SIZE(cases)];
    size_t n = 0;
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(cases); i++) {
        if (cases[i].line != NULL) {
            known[n++] = cases[i];
            continue;
        }
        char *why = NULL;
        struct cfg *c = NULL;
        CHECK_EQ_INT(cfg_load_buffer("t.yaml", cases[i].text, strlen(cases[i].text), &c, &why),
                     ISOPROF_ECONFIG);
        CHECK(c == NULL);
        CHECK(has_prefix(why, "t.yaml:1:11: unknown key"));
        if (!has_prefix(why, "t.yaml:1:11: unknown key"))
            fprintf(stderr, "case %zu: %s\n", i, why ? why : "(null)");
        isoprof_free(why);
    }
    CHECK_EQ_INT(one_errors_failed(known, n), 0);
}

TEST(problems_together)
{
    char *why;
    struct cfg *c = load("control: {socket: \"\\x01\", group: -g}\n"
                         "metrics: {listen: '192.168.1.1:1'}\n",
                         &why);
    CHECK(c == NULL);
    CHECK_EQ_INT(count_lines(why), 3);
    CHECK(has_prefix(why, "t.yaml:1:19: control.socket"));
    CHECK(has_prefix(why, "t.yaml:1:34: control.group"));
    CHECK(has_prefix(why, "t.yaml:2:19: metrics.listen"));
    isoprof_free(why);
}

TEST(reload_needs_a_restart)
{
    char *why;
    struct cfg *a = load("control: {socket: /run/a.sock}\n", &why);
    struct cfg *b = load("control: {socket: /run/b.sock, group: adm}\n"
                         "metrics: {listen: 'localhost:9464'}\n",
                         &why);
    REQUIRE(a != NULL && b != NULL);
    CHECK_EQ_INT(cfg_check_reload(a, a, &why), 0);
    CHECK_EQ_INT(cfg_check_reload(a, b, &why), ISOPROF_ECONFIG);
    CHECK_EQ_INT(count_lines(why), 3);
    CHECK(has_line(why, "t.yaml: control.socket changed (/run/a.sock -> /run/b.sock); restart "
                        "to apply"));
    CHECK(has_prefix(why, "t.yaml: control.group changed"));
    CHECK(has_prefix(why, "t.yaml: metrics.listen changed"));
    isoprof_free(why);
    cfg_free(a);
    cfg_free(b);
}

/* The one socket-path rule of the daemon and its clients: an explicit
 * path first (for a client, $ISOPROF_SOCKET before it falls back), then
 * $RUNTIME_DIRECTORY, the store's directory, and for a client the
 * packaged service's socket; a client takes the first that exists. */
TEST(control_socket_path)
{
    char dir[] = "/tmp/isoprof-sock-XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    char *out = NULL;
    unsetenv("ISOPROF_SOCKET");
    unsetenv("RUNTIME_DIRECTORY");
    /* The daemon: control.socket wins; then the store's directory. */
    CHECK_EQ_INT(cfg_control_socket_path("/x/c.sock", dir, 0, &out), 0);
    CHECK_STR(out, "/x/c.sock");
    isoprof_free(out);
    CHECK_EQ_INT(cfg_control_socket_path("", dir, 0, &out), 0);
    char want[128];
    snprintf(want, sizeof(want), "%s/control.sock", dir);
    CHECK_STR(out, want);
    isoprof_free(out);
    out = NULL;
    CHECK_EQ_INT(cfg_control_socket_path(NULL, NULL, 0, &out), -ENOENT);
    CHECK(out == NULL);
    /* $RUNTIME_DIRECTORY (its first entry) before the store. */
    setenv("RUNTIME_DIRECTORY", "/run/a:/run/b", 1);
    CHECK_EQ_INT(cfg_control_socket_path(NULL, dir, 0, &out), 0);
    CHECK_STR(out, "/run/a/isoprof.sock");
    isoprof_free(out);
    /* A client: the first candidate that exists, else the first. */
    CHECK_EQ_INT(cfg_control_socket_path(NULL, dir, CFG_SOCKET_CLIENT, &out), 0);
    CHECK_STR(out, "/run/a/isoprof.sock"); /* none exists */
    isoprof_free(out);
    FILE *f = fopen(want, "w");
    REQUIRE(f != NULL);
    fclose(f);
    CHECK_EQ_INT(cfg_control_socket_path(NULL, dir, CFG_SOCKET_CLIENT, &out), 0);
    CHECK_STR(out, want); /* the store's exists, the runtime one does not */
    isoprof_free(out);
    /* $ISOPROF_SOCKET for a client without --socket, not for the daemon. */
    setenv("ISOPROF_SOCKET", "/e/s.sock", 1);
    CHECK_EQ_INT(cfg_control_socket_path(NULL, dir, CFG_SOCKET_CLIENT, &out), 0);
    CHECK_STR(out, "/e/s.sock");
    isoprof_free(out);
    CHECK_EQ_INT(cfg_control_socket_path("/x/c.sock", dir, CFG_SOCKET_CLIENT, &out), 0);
    CHECK_STR(out, "/x/c.sock");
    isoprof_free(out);
    CHECK_EQ_INT(cfg_control_socket_path(NULL, dir, 0, &out), 0);
    CHECK_STR(out, "/run/a/isoprof.sock");
    isoprof_free(out);
    unsetenv("ISOPROF_SOCKET");
    unsetenv("RUNTIME_DIRECTORY");
    unlink(want);
    rmdir(dir);
}

int main(void)
{
    RUN(defaults);
    RUN(accepted_values);
    RUN(each_rule_at_its_position);
    RUN(problems_together);
    RUN(reload_needs_a_restart);
    RUN(control_socket_path);
    TEST_EXIT();
}
