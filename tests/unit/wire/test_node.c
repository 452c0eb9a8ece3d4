/*
 * test_node.c - ws.c and cdp.c against a real Node inspector.
 *
 * Starts `node --inspect=127.0.0.1:0 -e 'setInterval(()=>{},1000)'`, reads
 * the WebSocket URL from its stderr ("Debugger listening on
 * ws://127.0.0.1:PORT/UUID"), and drives one session: Runtime.enable (an
 * event), Runtime.getHeapUsage, an unknown method (an error reply),
 * Profiler.enable/start/stop with CDP_RAW, a reply of several MB (raw, and
 * refused without CDP_RAW), and a clean close. The child is killed by its
 * PID through its own process handle at the end. Exit 77 (skipped) when
 * there is no node to run.
 */
#include "base.h"
#include "cdp.h"
#include "test.h"
#include "ws.h"

#include <errno.h>
#include <signal.h>

struct node_test {
    uv_loop_t loop;
    uv_process_t proc;
    uv_pipe_t err;
    uv_timer_t timer; /* watchdog, then the profiling window */
    uv_timer_t window;
    int proc_open, exited;
    char errbuf[4096];
    size_t errlen;
    int port;
    char path[128];
    struct cdp_session *cdp;
    int step;
    int opened, closed, close_status;
    int events;
    int fired;
    size_t profile_len, big_len;
    uint64_t used_size;
    char why[200];
};

static void nt_next(struct node_test *t);

static void nt_on_proc_close(uv_handle_t *h)
{
    (void)h;
}

static void nt_on_exit(uv_process_t *p, int64_t status, int sig)
{
    (void)status;
    (void)sig;
    struct node_test *t = p->data;
    t->exited = 1;
    uv_close((uv_handle_t *)p, nt_on_proc_close);
}

static void nt_kill(struct node_test *t)
{
    if (t->proc_open && !t->exited) {
        uv_process_kill(&t->proc, SIGKILL); /* this child only, by its PID */
        t->proc_open = 0;
    }
    if (!uv_is_closing((uv_handle_t *)&t->timer))
        uv_close((uv_handle_t *)&t->timer, NULL);
    if (!uv_is_closing((uv_handle_t *)&t->window))
        uv_close((uv_handle_t *)&t->window, NULL);
}

static void nt_on_close(struct cdp_session *s, int status, void *arg)
{
    struct node_test *t = arg;
    t->closed++;
    t->close_status = status;
    snprintf(t->why, sizeof(t->why), "%s", cdp_last_error(s));
    t->cdp = NULL;
    nt_kill(t);
}

static void nt_on_event(struct cdp_session *s, const char *session, const char *method,
                        yajl_val params, void *arg)
{
    (void)session;
    (void)s;
    (void)params;
    struct node_test *t = arg;
    if (strcmp(method, "Runtime.executionContextCreated") == 0)
        t->events++;
}

static yajl_val jget(yajl_val v, const char *k, yajl_type ty)
{
    const char *path[] = {k, NULL};
    return yajl_tree_get(v, path, ty);
}

static void nt_fail(struct node_test *t, const char *what, struct cdp_reply *r)
{
    fprintf(stderr, "step %d (%s): %s %s\n", t->step, what, isoprof_strerror(r->status),
            r->error_message ? r->error_message : "");
    test_failed_ = 1;
    cdp_close(t->cdp);
}

static void nt_on_reply(struct cdp_session *s, struct cdp_reply *r, void *arg)
{
    (void)s;
    struct node_test *t = arg;
    switch (t->step) {
    case 0: /* Runtime.enable */
    case 3: /* Profiler.enable */
    case 4: /* Profiler.start */
        if (r->status != 0)
            return nt_fail(t, "enable/start", r);
        break;
    case 1: { /* Runtime.getHeapUsage */
        if (r->status != 0)
            return nt_fail(t, "getHeapUsage", r);
        yajl_val u = jget(r->result, "usedSize", yajl_t_number);
        CHECK(u != NULL && jget(r->result, "totalSize", yajl_t_number) != NULL);
        t->used_size = u ? (uint64_t)YAJL_GET_INTEGER(u) : 0;
        break;
    }
    case 2: /* an unknown method */
        CHECK_EQ_INT(r->status, ISOPROF_ECDP);
        CHECK(r->error_message != NULL && strstr(r->error_message, "Foo.bar") != NULL);
        break;
    case 5: { /* Profiler.stop, raw */
        if (r->status != 0 || r->raw == NULL)
            return nt_fail(t, "Profiler.stop", r);
        CHECK(strncmp(r->raw, "{\"id\":", 6) == 0);
        CHECK(strstr(r->raw, "\"profile\"") != NULL && strstr(r->raw, "\"nodes\"") != NULL &&
              strstr(r->raw, "\"timeDeltas\"") != NULL);
        t->profile_len = r->raw_len;
        char *mine = r->raw;
        r->raw = NULL;
        ws_msg_free(mine);
        break;
    }
    case 6: /* several MB, raw */
        if (r->status != 0 || r->raw == NULL)
            return nt_fail(t, "big raw", r);
        CHECK(r->raw_len > CDP_PARSE_MAX);
        t->big_len = r->raw_len;
        break;
    case 7: /* the same without CDP_RAW */
        CHECK_EQ_INT(r->status, ISOPROF_ETOOBIG);
        break;
    case 8: /* the session survived */
        CHECK_EQ_INT(r->status, 0);
        break;
    }
    t->step++;
    nt_next(t);
}

static void nt_on_window(uv_timer_t *tm)
{
    struct node_test *t = tm->data;
    if (cdp_call(t->cdp, "Profiler.stop", NULL, 10000, CDP_RAW, nt_on_reply, t) != 0) {
        test_failed_ = 1;
        cdp_close(t->cdp);
    }
}

static void nt_next(struct node_test *t)
{
    static const char big[] = "{\"expression\":\"'x'.repeat(3000000)\",\"returnByValue\":true}";
    int rc = 0;
    switch (t->step) {
    case 0:
        rc = cdp_call(t->cdp, "Runtime.enable", NULL, 5000, 0, nt_on_reply, t);
        break;
    case 1:
        rc = cdp_call(t->cdp, "Runtime.getHeapUsage", NULL, 5000, 0, nt_on_reply, t);
        break;
    case 2:
        rc = cdp_call(t->cdp, "Foo.bar", "{\"x\":1}", 5000, 0, nt_on_reply, t);
        break;
    case 3:
        rc = cdp_call(t->cdp, "Profiler.enable", NULL, 5000, 0, nt_on_reply, t);
        break;
    case 4:
        rc = cdp_call(t->cdp, "Profiler.start", NULL, 5000, 0, nt_on_reply, t);
        break;
    case 5:
        uv_timer_start(&t->window, nt_on_window, 200, 0);
        break;
    case 6:
        rc = cdp_call(t->cdp, "Runtime.evaluate", big, 10000, CDP_RAW, nt_on_reply, t);
        break;
    case 7:
        rc = cdp_call(t->cdp, "Runtime.evaluate", big, 10000, 0, nt_on_reply, t);
        break;
    case 8:
        rc = cdp_call(t->cdp, "Runtime.getHeapUsage", NULL, 5000, 0, nt_on_reply, t);
        break;
    default:
        cdp_close(t->cdp);
    }
    if (rc != 0) {
        fprintf(stderr, "cdp_call at step %d: %s\n", t->step, isoprof_strerror(rc));
        test_failed_ = 1;
        cdp_close(t->cdp);
    }
}

static void nt_on_open(struct cdp_session *s, int status, void *arg)
{
    (void)s;
    struct node_test *t = arg;
    t->opened++;
    CHECK_EQ_INT(status, 0);
    if (status == 0)
        nt_next(t);
}

static void nt_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct node_test *t = h->data;
    size_t room = sizeof(t->errbuf) - 1 - t->errlen;
    static char sink[4096];
    if (room == 0)
        *buf = uv_buf_init(sink, sizeof(sink)); /* enough seen: discard the rest */
    else
        *buf = uv_buf_init(t->errbuf + t->errlen, (unsigned)room);
}

static void nt_on_err_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct node_test *t = st->data;
    if (nread < 0) {
        uv_close((uv_handle_t *)st, NULL);
        return;
    }
    if (buf->base < t->errbuf || buf->base >= t->errbuf + sizeof(t->errbuf))
        return;
    t->errlen += (size_t)nread;
    t->errbuf[t->errlen] = '\0';
    if (t->port != 0)
        return;
    const char *p = strstr(t->errbuf, "ws://127.0.0.1:");
    if (p == NULL || strchr(p, '\n') == NULL)
        return;
    p += strlen("ws://127.0.0.1:");
    char *end;
    long port = strtol(p, &end, 10);
    size_t pl = strcspn(end, "\r\n");
    if (port <= 0 || port > 65535 || *end != '/' || pl >= sizeof(t->path)) {
        fprintf(stderr, "cannot parse: %s\n", t->errbuf);
        test_failed_ = 1;
        nt_kill(t);
        return;
    }
    t->port = (int)port;
    memcpy(t->path, end, pl);
    t->path[pl] = '\0';
    int rc = cdp_open(&t->loop, "127.0.0.1", (uint16_t)t->port, t->path, 0, NULL, nt_on_open, nt_on_event,
                      nt_on_close, t, &t->cdp);
    if (rc != 0) {
        fprintf(stderr, "cdp_open: %s\n", isoprof_strerror(rc));
        test_failed_ = 1;
        nt_kill(t);
    }
}

static void nt_on_watchdog(uv_timer_t *tm)
{
    struct node_test *t = tm->data;
    t->fired = 1;
    fprintf(stderr, "watchdog fired at step %d; node said: %s\n", t->step, t->errbuf);
    if (t->cdp)
        cdp_close(t->cdp);
    else
        nt_kill(t);
}

TEST(node_inspector)
{
    static struct node_test t;
    memset(&t, 0, sizeof(t));
    REQUIRE(uv_loop_init(&t.loop) == 0);
    uv_pipe_init(&t.loop, &t.err, 0);
    t.err.data = &t;
    uv_timer_init(&t.loop, &t.timer);
    uv_timer_init(&t.loop, &t.window);
    t.timer.data = t.window.data = &t;
    t.proc.data = &t;

    char *args[] = {"node", "--inspect=127.0.0.1:0", "-e", "setInterval(()=>{},1000)", NULL};
    uv_stdio_container_t stdio[3] = {
        {.flags = UV_IGNORE},
        {.flags = UV_IGNORE},
        {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&t.err},
    };
    uv_process_options_t po = {
        .file = "node", .args = args, .exit_cb = nt_on_exit, .stdio = stdio, .stdio_count = 3};
    int rc = uv_spawn(&t.loop, &t.proc, &po);
    if (rc != 0) {
        fprintf(stderr, "cannot run node: %s (skipped)\n", uv_strerror(rc));
        uv_close((uv_handle_t *)&t.proc, NULL);
        uv_close((uv_handle_t *)&t.err, NULL);
        uv_close((uv_handle_t *)&t.timer, NULL);
        uv_close((uv_handle_t *)&t.window, NULL);
        uv_run(&t.loop, UV_RUN_DEFAULT);
        uv_loop_close(&t.loop);
        exit(77);
    }
    t.proc_open = 1;
    uv_read_start((uv_stream_t *)&t.err, nt_on_alloc, nt_on_err_read);
    uv_timer_start(&t.timer, nt_on_watchdog, 30000, 0);
    uv_run(&t.loop, UV_RUN_DEFAULT);
    CHECK(!t.fired);
    CHECK(t.exited);
    CHECK_EQ_INT(uv_loop_close(&t.loop), 0);
    CHECK_EQ_INT(t.opened, 1);
    CHECK_EQ_INT(t.closed, 1);
    CHECK_EQ_INT(t.close_status, 0);
    CHECK_EQ_INT(t.step, 9);
    CHECK(t.events >= 1);
    CHECK(t.used_size > 0);
    CHECK(t.profile_len > 100);
    CHECK(t.big_len > 3000000);
    if (test_failed_)
        fprintf(stderr, "why: %s\n", t.why);
}

int main(void)
{
    RUN(node_inspector);
    TEST_EXIT();
}
