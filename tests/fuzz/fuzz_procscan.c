/*
 * fuzz_procscan - libFuzzer target for what host process discovery reads
 * of other processes in /proc (agent/daemon/procscan.c): the socket
 * tables, a command line and NODE_OPTIONS, a cgroup file and a status
 * file; and the package.json a version is read from (appversion.c). Any local user can shape their own process's command line,
 * environment and cgroup path, so every byte of them is hostile.
 *
 * The first byte picks: 't' net/tcp, 'u' net/tcp6, 'c' a command line,
 * 'e' a NODE_OPTIONS value, 'g' a cgroup file, 's' a status file, 'p' a
 * package.json. The
 * promises checked: the listener table never exceeds its cap and holds
 * only nonzero ports and inodes; an opt-in value is NUL-terminated within
 * its buffer and OPTIN / OPTIN_REFUSED are never both set; a container id
 * is 64 hex digits or empty; a command line's script lies inside it and
 * holds no NUL; a package.json's version is found with no reason given,
 * or empty with one, and never longer than APPVER_VERSION_MAX.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "procscan.h"

#define CAP 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    /* An exact-size copy, so reading one byte past the input is caught. */
    size_t n = size - 1;
    char *text = isoprof_malloc(n ? n : 1);
    if (text == NULL)
        return 0;
    memcpy(text, data + 1, n);
    switch (data[0]) {
    case 't':
    case 'u': {
        struct procscan_listener l[CAP];
        size_t got = 0, bad = 0;
        procscan_parse_tcp(text, n, data[0] == 'u', l, &got, CAP, &bad);
        if (got > CAP)
            abort();
        for (size_t i = 0; i < got; i++)
            if (l[i].port == 0 || l[i].inode == 0 || l[i].loopback > 1)
                abort();
        break;
    }
    case 'c':
    case 'e': {
        char optin[64];
        memset(optin, 'x', sizeof(optin));
        unsigned f = data[0] == 'c'
                         ? procscan_options(text, n, NULL, 0, optin, sizeof(optin))
                         : procscan_options("node\0app.js", 12, text, n, optin, sizeof(optin));
        if (memchr(optin, '\0', sizeof(optin)) == NULL)
            abort();
        if ((f & PROCSCAN_OPTIN) && (f & PROCSCAN_OPTIN_REFUSED))
            abort();
        size_t vl;
        const char *v = procscan_node_options(text, n, &vl);
        if (v != NULL && (v < text || v + vl > text + n))
            abort();
        const char *sc = procscan_script(text, n, &vl);
        if (sc != NULL && (sc < text || vl == 0 || sc + vl > text + n || memchr(sc, '\0', vl)))
            abort();
        break;
    }
    case 'g': {
        char c[PROCSCAN_CONTAINER_LEN + 1];
        int found = procscan_container(text, n, c);
        size_t cl = strlen(c);
        if (found ? cl != PROCSCAN_CONTAINER_LEN : cl != 0)
            abort();
        for (size_t i = 0; i < cl; i++)
            if (isoprof_hexval((unsigned char)c[i]) < 0)
                abort();
        break;
    }
    case 's': {
        uint32_t uid = 0;
        unsigned f = procscan_status(text, n, &uid);
        if (f & ~(unsigned)PROCSCAN_SIGUSR1)
            abort();
        break;
    }
    case 'p': {
        char v[APPVER_VERSION_MAX + 1], why[200];
        int found = appver_package_json_parse(text, n, v, sizeof(v), why, sizeof(why));
        size_t vl = strnlen(v, sizeof(v));
        if (vl == sizeof(v) || (found ? vl == 0 || why[0] != '\0' : vl != 0 || why[0] == '\0'))
            abort();
        break;
    }
    default:
        break;
    }
    isoprof_free(text);
    return 0;
}
