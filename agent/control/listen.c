/*
 * listen.c - the control socket's file and the listeners: the socket made
 * without following a path an attacker could change (see control.c), the
 * metrics.listen TCP address, and control_start / control_stop.
 */
#include "control_internal.h"

#include "control.h"
#include "log.h"

#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <http_parser.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* --- start and stop --- */

/*
 * What is at path? 0: nothing, a socket nobody listens on (a crashed
 * agent's) or a symlink, which sock_create's rename replaces (a symlink is
 * never followed, whatever it names); -EADDRINUSE: an agent listens there;
 * -EEXIST: something else (a file, a directory); another negative errno
 * if it cannot be told.
 */
static int clear_stale(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -errno;
    if (S_ISLNK(st.st_mode))
        return 0;
    if (!S_ISSOCK(st.st_mode))
        return -EEXIST;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    int e = errno;
    close(fd);
    if (rc == 0 || e == EAGAIN || e == EINPROGRESS)
        return -EADDRINUSE; /* listening (EAGAIN: its backlog is full) */
    if (e != ECONNREFUSED)
        return -e;
    return 0;
}

/*
 * Create path as a listening Unix socket, mode 0600 (0660 and group gid
 * when gid is not -1), so that no step follows a name another user could
 * change (chmod and chown on the path would follow a symlink swapped in
 * after bind, and change the mode and group of whatever it names):
 *
 *   1. mkdtemp "<dir>/.isoprof-ctl.XXXXXX" beside the final path: a 0700
 *      directory of ours, opened with O_NOFOLLOW and checked to be ours
 *      and private. Nobody else can create, swap or reach what is in it,
 *      and each later step names its entry through that descriptor.
 *   2. bind "<private>/s" under the umask that gives the final mode (the
 *      mode of a socket file comes from the umask; fchmod on a socket does
 *      not reach the file). If the private directory's name was swapped
 *      meanwhile, the socket lands elsewhere and step 3 fails: nothing is
 *      changed.
 *   3. fstatat (no follow): a socket is there; fchownat(AT_SYMLINK_NOFOLLOW)
 *      for control.group.
 *   4. listen, then renameat into place. rename() replaces what is at the
 *      final path, a symlink included, without following it, and in one
 *      step: a client finds the old entry or the new socket.
 *   5. remove the private directory (rmdir removes only an empty one).
 *
 * *fd_out: the listening socket; *st_out: the socket file (its inode is the
 * same at the final path). 0, or a negative errno with *step naming what
 * failed; on failure nothing is left behind.
 */
static int sock_create(const char *path, gid_t gid, int *fd_out, struct stat *st_out,
                       const char **step)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    int dlen = slash == NULL ? 1 : slash == path ? 1 : (int)(slash - path);
    const char *dir = slash == NULL ? "." : path;
    int rc = 0, pfd = -1, tfd = -1, fd = -1, bound = 0;
    char *tmpl = NULL, *tname;
    *step = "path";
    if (*base == '\0')
        return -EINVAL;
    tmpl = isoprof_asprintf("%.*s/.isoprof-ctl.XXXXXX", dlen, dir);
    if (tmpl == NULL)
        return -ENOMEM;
    tname = tmpl + dlen + 1;
    *step = "open the directory";
    tname[-1] = '\0';
    pfd = open(tmpl, O_PATH | O_DIRECTORY | O_CLOEXEC);
    tname[-1] = '/';
    if (pfd < 0) {
        rc = -errno;
        goto out;
    }
    *step = "make a private directory";
    if (mkdtemp(tmpl) == NULL) {
        rc = -errno;
        goto out;
    }
    tfd = openat(pfd, tname, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (tfd < 0 || fstat(tfd, &st) != 0) {
        rc = -errno;
        goto fail_dir;
    }
    if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
        rc = -EPERM; /* not the directory mkdtemp made */
        goto fail_dir;
    }
    *step = "bind";
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/s", tmpl);
    if (n < 0 || (size_t)n >= sizeof(sa.sun_path)) /* long: the same entry, through tfd */
        snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/s", tfd);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rc = -errno;
        goto fail_dir;
    }
    mode_t old = umask(gid != (gid_t)-1 ? 0117 : 0177);
    int b = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    int e = errno;
    umask(old);
    if (b != 0) {
        rc = -e;
        goto fail_sock;
    }
    bound = 1;
    *step = "check the socket file";
    if (fstatat(tfd, "s", &st, AT_SYMLINK_NOFOLLOW) != 0) {
        rc = -errno;
        goto fail_sock;
    }
    if (!S_ISSOCK(st.st_mode)) {
        rc = -EPERM;
        goto fail_sock;
    }
    if (gid != (gid_t)-1) {
        *step = "give it to control.group";
        if (fchownat(tfd, "s", (uid_t)-1, gid, AT_SYMLINK_NOFOLLOW) != 0) {
            rc = -errno;
            goto fail_sock;
        }
    }
    /* Listening before it is in place, so another agent starting now does
     * not take it for a crashed one's. */
    *step = "listen";
    if (listen(fd, CTL_BACKLOG) != 0) {
        rc = -errno;
        goto fail_sock;
    }
    *step = "move it into place";
    if (renameat(tfd, "s", pfd, base) != 0) {
        rc = -errno;
        goto fail_sock;
    }
    unlinkat(pfd, tname, AT_REMOVEDIR);
    *fd_out = fd;
    *st_out = st;
    goto out;

fail_sock:
    close(fd);
    if (bound)
        unlinkat(tfd, "s", 0);
fail_dir:
    unlinkat(pfd, tname, AT_REMOVEDIR);
out:
    if (tfd >= 0)
        close(tfd);
    if (pfd >= 0)
        close(pfd);
    isoprof_free(tmpl);
    return rc;
}

/* "127.0.0.1:9464", "[::1]:9464", "localhost:9464" -> addr (the config
 * loader checked the form and that it is loopback). */
static int metrics_addr(const char *listen, struct sockaddr_storage *ss)
{
    char host[64];
    const char *h = listen, *he, *ps;
    if (listen[0] == '[') {
        h = listen + 1;
        he = strchr(listen, ']');
        if (he == NULL || he[1] != ':')
            return -EINVAL;
        ps = he + 2;
    } else {
        he = strrchr(listen, ':');
        if (he == NULL)
            return -EINVAL;
        ps = he + 1;
    }
    size_t hl = (size_t)(he - h);
    if (hl >= sizeof(host))
        return -EINVAL;
    memcpy(host, h, hl);
    host[hl] = '\0';
    uint64_t port = 0;
    if (ctl_parse_uint(ps, 65535, &port) != 0 || port == 0)
        return -EINVAL;
    if (strcmp(host, "localhost") == 0)
        memcpy(host, "127.0.0.1", sizeof("127.0.0.1"));
    if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)ss) == 0)
        return 0;
    if (uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)ss) == 0)
        return 0;
    return -EINVAL;
}

static int listen_metrics(struct control *ctl, const char *listen)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    if (metrics_addr(listen, &ss) != 0) {
        log_error("cannot serve metrics: bad metrics.listen", "listen=%s", listen);
        return -EINVAL;
    }
    struct ctl_listener *l = &ctl->metrics;
    int rc = uv_tcp_init(ctl->host.loop, &l->h.tcp);
    if (rc != 0)
        return rc;
    l->open = 1;
    l->h.handle.data = l;
    rc = uv_tcp_bind(&l->h.tcp, (const struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen(&l->h.stream, CTL_BACKLOG, ctl_listener_on_connection);
    if (rc != 0) {
        log_error("cannot serve metrics", "listen=%s err=%s", listen, uv_strerror(rc));
        return rc;
    }
    log_info("serving metrics", "listen=%s", listen);
    return 0;
}

static void control_close(struct control *ctl)
{
    ctl->stopping = 1;
    while (ctl->conns) {
        struct ctl_conn *c = ctl->conns;
        if (c->st == C_BUSY && c->waiter != NULL) {
            /* Its window may still be merged in the pool after the loop is
             * told to stop: say why now. A short answer goes out at once
             * (uv_write tries the socket first), before the close. */
            ctl->host.cancel(c->waiter);
            c->waiter = NULL;
            ctl_conn_error(c, 503, 1, "isoprofd is stopping");
        }
        ctl_conn_close(c);
    }
    struct ctl_listener *ls[2] = {&ctl->sock, &ctl->metrics};
    for (int i = 0; i < 2; i++) {
        if (ls[i]->open) {
            ls[i]->open = 0;
            ctl->closes++;
            uv_close(&ls[i]->h.handle, ctl_listener_on_close);
        }
    }
    if (ctl->made) {
        /* Only the file we made: a newer agent may have taken the path. */
        struct stat st;
        if (lstat(ctl->path, &st) == 0 && st.st_dev == ctl->dev && st.st_ino == ctl->ino)
            unlink(ctl->path);
        ctl->made = 0;
    }
    ctl_maybe_free(ctl);
}

int control_start(const struct ctl_host *host, const struct cfg *cfg, struct control **out)
{
    *out = NULL;
    struct control *ctl = isoprof_calloc(1, sizeof(*ctl));
    if (ctl == NULL)
        return -ENOMEM;
    ctl->host = *host;
    ctl->sock.ctl = ctl->metrics.ctl = ctl;
    ctl->metrics.metrics_only = 1;
    /* control.socket, else the automatic path (the rule isoprof shares) */
    int rc = cfg_control_socket_path(cfg->control.socket, cfg->store.path, 0, &ctl->path);
    if (rc != 0)
        goto fail;
    struct sockaddr_un sun;
    if (strlen(ctl->path) >= sizeof(sun.sun_path)) {
        log_error("control socket path too long (set control.socket to a shorter path)",
                  "path=%s max_bytes=%u", ctl->path, (unsigned)(sizeof(sun.sun_path) - 1));
        rc = -ENAMETOOLONG;
        goto fail;
    }
    gid_t gid = (gid_t)-1;
    const char *group = cfg->control.group;
    if (group != NULL && group[0] != '\0') {
        struct group gr, *found = NULL;
        char buf[4096];
        int e = getgrnam_r(group, &gr, buf, sizeof(buf), &found);
        if (found == NULL) {
            log_error("control.group: no such group", "group=%s err=%e", group, e ? -e : -ENOENT);
            rc = e ? -e : -ENOENT;
            goto fail;
        }
        gid = gr.gr_gid;
    }
    rc = clear_stale(ctl->path);
    if (rc == -EADDRINUSE) {
        log_error("another isoprofd listens on the control socket; stop it or set control.socket",
                  "path=%s", ctl->path);
        goto fail;
    }
    if (rc == -EEXIST) {
        log_error("the control socket path exists and is not a socket; not touching it", "path=%s",
                  ctl->path);
        goto fail;
    }
    if (rc != 0) {
        log_error("cannot check the control socket path", "path=%s err=%e", ctl->path, rc);
        goto fail;
    }

    int fd = -1;
    struct stat st = {0};
    const char *step = "";
    rc = sock_create(ctl->path, gid, &fd, &st, &step);
    if (rc != 0) {
        log_error("cannot create the control socket", "path=%s step=%s err=%e", ctl->path, step,
                  rc);
        goto fail;
    }
    ctl->made = 1;
    ctl->dev = st.st_dev;
    ctl->ino = st.st_ino;
    struct ctl_listener *l = &ctl->sock;
    rc = uv_pipe_init(ctl->host.loop, &l->h.pipe, 0);
    if (rc != 0) {
        close(fd);
        goto fail;
    }
    l->open = 1;
    l->h.handle.data = l;
    /* Opened, not bound by libuv: libuv would unlink the name it bound at
     * close, whoever's file is there by then. */
    rc = uv_pipe_open(&l->h.pipe, fd);
    if (rc != 0) {
        close(fd);
        log_error("cannot listen on the control socket", "path=%s err=%s", ctl->path,
                  uv_strerror(rc));
        goto fail;
    }
    rc = uv_listen(&l->h.stream, CTL_BACKLOG, ctl_listener_on_connection);
    if (rc != 0) {
        log_error("cannot listen on the control socket", "path=%s err=%s", ctl->path,
                  uv_strerror(rc));
        goto fail;
    }
    if (cfg->metrics.listen != NULL && cfg->metrics.listen[0] != '\0') {
        rc = listen_metrics(ctl, cfg->metrics.listen);
        if (rc != 0)
            goto fail;
    }
    log_info("control socket listening", "path=%s mode=%s group=%s", ctl->path,
             gid != (gid_t)-1 ? "0660" : "0600", gid != (gid_t)-1 ? group : "");
    *out = ctl;
    return 0;

fail:
    /* Whatever was opened closes; the loop frees ctl in the last callback. */
    if (rc == 0)
        rc = -EIO;
    control_close(ctl);
    return rc;
}

void control_stop(struct control *ctl)
{
    if (ctl != NULL)
        control_close(ctl);
}

void control_counters(const struct control *ctl, struct ctl_counters *out)
{
    *out = ctl->n;
}
