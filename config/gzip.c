/*
 * gzip.c - gzip compression and bounded decompression (see base.h).
 *
 * zlib allocates through the project's wrapper, so a test that fails the
 * Nth allocation reaches zlib's own allocations too. zlib counts in uInt:
 * compression refuses inputs past UINT32_MAX (no profile comes near), and
 * decompression feeds input and output space in chunks of at most 1 GiB.
 */
#include "base.h"

#include <errno.h>
#include <string.h>
#include <zlib.h>

/* zlib counts in uInt; feed it at most this much at a time */
#define Z_CHUNK ((size_t)1 << 30)

/* deflateInit2/inflateInit2 windowBits: 15, plus 16 for a gzip wrapper */
#define GZIP_WBITS (15 + 16)

static voidpf z_alloc(voidpf opaque, uInt items, uInt size)
{
    (void)opaque;
    if (size && items > SIZE_MAX / size)
        return Z_NULL;
    return isoprof_malloc((size_t)items * size);
}

static void z_free(voidpf opaque, voidpf ptr)
{
    (void)opaque;
    isoprof_free(ptr);
}

int isoprof_gzip(const void *in, size_t len, uint8_t **out, size_t *outlen)
{
    if ((in == NULL && len > 0) || out == NULL || outlen == NULL || len > UINT32_MAX)
        return -EINVAL;
    z_stream z;
    memset(&z, 0, sizeof(z));
    z.zalloc = z_alloc;
    z.zfree = z_free;
    int zr = deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, GZIP_WBITS, 8, Z_DEFAULT_STRATEGY);
    if (zr != Z_OK)
        return zr == Z_MEM_ERROR ? -ENOMEM : -EINVAL;
    /* deflateBound is exact enough that one Z_FINISH call always ends the
     * stream; the slack covers the gzip header and trailer. */
    size_t cap = deflateBound(&z, (uLong)len) + 64;
    uint8_t *buf = isoprof_malloc(cap);
    if (buf == NULL) {
        deflateEnd(&z);
        return -ENOMEM;
    }
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)len;
    z.next_out = buf;
    z.avail_out = (uInt)cap;
    zr = deflate(&z, Z_FINISH);
    size_t done = cap - z.avail_out;
    deflateEnd(&z);
    if (zr != Z_STREAM_END) {
        isoprof_free(buf);
        return zr == Z_MEM_ERROR ? -ENOMEM : -EINVAL;
    }
    *out = buf;
    *outlen = done;
    return 0;
}

int isoprof_gunzip(const void *in, size_t len, size_t cap, uint8_t **out, size_t *outlen)
{
    z_stream z;
    if ((in == NULL && len) || out == NULL || outlen == NULL)
        return -EINVAL;
    if (len == 0)
        return ISOPROF_ECORRUPT;
    memset(&z, 0, sizeof(z));
    z.zalloc = z_alloc;
    z.zfree = z_free;
    int zr = inflateInit2(&z, GZIP_WBITS);
    if (zr != Z_OK)
        return zr == Z_MEM_ERROR ? -ENOMEM : -EINVAL;
    /* One byte beyond cap tells "exactly cap" from "more than cap". */
    size_t limit = cap < SIZE_MAX ? cap + 1 : cap;
    size_t bcap = len < limit / 4 ? len * 4 : limit;
    if (bcap < 256)
        bcap = limit < 256 ? limit : 256;
    uint8_t *buf = isoprof_malloc(bcap ? bcap : 1);
    size_t done = 0;
    int rc = 0;
    if (buf == NULL) {
        inflateEnd(&z);
        return -ENOMEM;
    }
    const uint8_t *src = in;
    size_t left = len;
    for (;;) {
        if (z.avail_in == 0 && left) {
            size_t chunk = left < Z_CHUNK ? left : Z_CHUNK;
            z.next_in = (Bytef *)(uintptr_t)src;
            z.avail_in = (uInt)chunk;
            src += chunk;
            left -= chunk;
        }
        if (done == bcap) {
            uint8_t *nb = isoprof_grow(buf, &bcap, limit, &rc);
            if (nb == NULL)
                break;
            buf = nb;
        }
        size_t room = bcap - done < Z_CHUNK ? bcap - done : Z_CHUNK;
        z.next_out = buf + done;
        z.avail_out = (uInt)room;
        zr = inflate(&z, Z_NO_FLUSH);
        done += room - z.avail_out;
        if (zr == Z_STREAM_END) {
            if (z.avail_in || left)
                rc = ISOPROF_ECORRUPT; /* bytes after the member */
            else if (done > cap)
                rc = ISOPROF_ETOOBIG;
            break;
        }
        if (zr == Z_MEM_ERROR) {
            rc = -ENOMEM;
            break;
        }
        if (zr != Z_OK && !(zr == Z_BUF_ERROR && z.avail_out == 0)) {
            rc = ISOPROF_ECORRUPT; /* bad data, or input ended inside the member */
            break;
        }
    }
    inflateEnd(&z);
    if (rc != 0) {
        isoprof_free(buf);
        return rc;
    }
    *out = buf;
    *outlen = done;
    return 0;
}
