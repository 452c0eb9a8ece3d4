/*
 * libFuzzer target: arbitrary bytes as the server side of a WebSocket
 * stream - the HTTP upgrade response, then frames - fed into the client's
 * receive path (ws_test_feed, the same code uv_read's data goes through).
 *
 * The first input byte steers the run so that the fuzzer does not have to
 * discover the Sec-WebSocket-Accept value by itself:
 *   bit 0     prepend a valid 101 response (the rest is frames)
 *   bits 1-2  how the bytes are split into reads: whole, 1 byte, 7 bytes,
 *             or sizes taken from the data itself
 *   bits 3-4  the message cap: 512 MiB (default), 1000, 65536, 1 byte
 * Whatever the input, the client delivers NUL-terminated messages no larger
 * than the cap, returns an error or keeps going, and frees everything.
 */
#include "base.h"
#include "ws.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define KEY "dGhlIHNhbXBsZSBub25jZQ=="
static const char ok101[] = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                            "Connection: Upgrade\r\n"
                            "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";

struct run {
    size_t cap;
    size_t messages;
};

static void check(int ok)
{
    if (!ok)
        abort();
}

static void on_message(struct ws_client *ws, char *msg, size_t len, void *arg)
{
    (void)ws;
    struct run *r = arg;
    check(msg != NULL && msg[len] == '\0' && len <= r->cap);
    r->messages++;
    ws_msg_free(msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    static const size_t caps[4] = {(size_t)512 << 20, 1000, 65536, 1};
    uint8_t mode = data[0];
    data++;
    size--;
    struct run r = {.cap = caps[(mode >> 3) & 3]};
    struct ws_client *ws = ws_test_new(r.cap, KEY, on_message, &r);
    if (ws == NULL)
        return 0;
    int rc = 0;
    if (mode & 1)
        rc = ws_test_feed(ws, (const uint8_t *)ok101, sizeof(ok101) - 1);
    check(rc == 0);
    int split = (mode >> 1) & 3;
    size_t off = 0, i = 0;
    while (off < size && rc == 0) {
        size_t n;
        switch (split) {
        case 0:
            n = size - off;
            break;
        case 1:
            n = 1;
            break;
        case 2:
            n = 7;
            break;
        default:
            n = (size_t)data[i++ % size] + 1;
        }
        if (n > size - off)
            n = size - off;
        rc = ws_test_feed(ws, data + off, n);
        off += n;
    }
    /* a frame that announces more than it brings never grows the buffer
     * past twice what arrived (or the minimum growth step) */
    check(ws_test_msg_cap(ws) <= 2 * size + (64u << 10) + 2);
    if (rc != 0) /* once failed, it stays failed */
        check(ws_test_feed(ws, (const uint8_t *)"x", 1) != 0);
    ws_test_free(ws);
    return 0;
}
