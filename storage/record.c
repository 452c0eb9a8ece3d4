/*
 * record.c - the byte formats of the store: the window key and the record
 * (header + zstd frame), see internal.h for the layout.
 *
 * Everything that reads bytes from the file goes through the two decoders
 * here, which check every length before touching a byte and return
 * ISOPROF_ECORRUPT for anything they do not recognise; a damaged page can
 * therefore cost a query one window, never the process. Compression uses
 * a context whose allocations go through base.h, so the allocation-failure
 * hook reaches zstd too; frames carry their content size and a checksum,
 * which store_check and store_load verify.
 */
#include "internal.h"

#include "base.h"

#include <errno.h>
#include <string.h>

static void *zstd_on_alloc(void *opaque, size_t size)
{
    (void)opaque;
    return isoprof_malloc(size);
}

static void zstd_on_free(void *opaque, void *p)
{
    (void)opaque;
    isoprof_free(p);
}

const ZSTD_customMem store_zstd_mem = {zstd_on_alloc, zstd_on_free, NULL};

size_t store_key_encode(uint8_t *out, size_t cap, const char *worker, const char *version,
                        uint64_t start_ns, uint32_t isolate, uint8_t type)
{
    size_t wl = strlen(worker), vl = strlen(version);
    size_t len = wl + 1 + vl + 1 + STORE_KEY_TAIL;
    if (len > cap || len > STORE_KEY_MAX)
        return 0;
    uint8_t *p = out;
    memcpy(p, worker, wl + 1); /* with its NUL: the separator */
    p += wl + 1;
    memcpy(p, version, vl + 1);
    p += vl + 1;
    store_be64_put(p, start_ns);
    store_be32_put(p + 8, isolate);
    p[12] = type;
    return len;
}

int store_key_decode(const void *key, size_t len, struct store_key *k)
{
    const uint8_t *p = key;
    if (key == NULL || len < 2 + STORE_KEY_TAIL || len > STORE_KEY_MAX)
        return ISOPROF_ECORRUPT;
    const uint8_t *end = p + len - STORE_KEY_TAIL;
    const uint8_t *nul1 = memchr(p, 0, (size_t)(end - p));
    if (nul1 == NULL)
        return ISOPROF_ECORRUPT;
    const uint8_t *v = nul1 + 1;
    const uint8_t *nul2 = memchr(v, 0, (size_t)(end - v));
    /* The version's NUL must be the last byte before the fixed tail. */
    if (nul2 == NULL || nul2 + 1 != end)
        return ISOPROF_ECORRUPT;
    k->worker = (const char *)p;
    k->worker_len = (size_t)(nul1 - p);
    k->version = (const char *)v;
    k->version_len = (size_t)(nul2 - v);
    if (k->worker_len > STORE_WORKER_MAX || k->version_len > STORE_VERSION_MAX)
        return ISOPROF_ECORRUPT;
    k->start_ns = store_be64_get(end);
    k->isolate = store_be32_get(end + 8);
    k->type = end[12];
    if (k->type < STORE_TYPE_CPU || k->type > STORE_TYPE_MAX)
        return ISOPROF_ECORRUPT;
    return 0;
}

/* The names the uploader sets on every series itself (upl_own_labels in
 * uploader/upload.c, less the "__" ones, which no window label may take):
 * a window label named so would make the server refuse the series. */
static const char *const label_reserved[] = {"service_name", "version", "isolate", "runtime",
                                             "thread",       "anomaly", "host"};

/* Is s (len bytes) a window label name: 1 to STORE_WINDOW_LABEL_NAME_MAX
 * bytes of [A-Za-z_][A-Za-z0-9_]*, not "__..." nor a reserved name? The
 * rules of config/upload.c's cfg_upload_check_label for static labels,
 * with the store's shorter bound. */
static int label_name_ok(const char *s, size_t len)
{
    if (len == 0 || len > STORE_WINDOW_LABEL_NAME_MAX || (s[0] >= '0' && s[0] <= '9'))
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
              c == '_'))
            return 0;
    }
    if (len >= 2 && s[0] == '_' && s[1] == '_')
        return 0;
    for (size_t i = 0; i < ISOPROF_ARRAY_SIZE(label_reserved); i++)
        if (strlen(label_reserved[i]) == len && memcmp(label_reserved[i], s, len) == 0)
            return 0;
    return 1;
}

/* Is s (len bytes, no NUL inside) a window label value: 1 to
 * STORE_WINDOW_LABEL_VALUE_MAX bytes of valid UTF-8? */
static int label_value_ok(const char *s, size_t len)
{
    return len > 0 && len <= STORE_WINDOW_LABEL_VALUE_MAX &&
           isoprof_utf8_valid_prefix((const uint8_t *)s, len) == len;
}

/* Is name (len bytes) among the first n labels of l? */
static int label_seen(const struct store_label *l, size_t n, const char *name, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strncmp(l[i].name, name, len) == 0 && l[i].name[len] == '\0')
            return 1;
    return 0;
}

int store_labels_check(const struct store_label *labels, size_t n, size_t *bad)
{
    size_t dummy, bytes = 0;
    if (bad == NULL)
        bad = &dummy;
    *bad = n;
    if (n > STORE_WINDOW_LABELS_MAX || (n > 0 && labels == NULL))
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        const char *k = labels[i].name, *v = labels[i].value;
        *bad = i;
        if (k == NULL || v == NULL)
            return -EINVAL;
        size_t kl = strnlen(k, STORE_WINDOW_LABEL_NAME_MAX + 1);
        size_t vl = strnlen(v, STORE_WINDOW_LABEL_VALUE_MAX + 1);
        if (!label_name_ok(k, kl) || !label_value_ok(v, vl) || label_seen(labels, i, k, kl))
            return -EINVAL;
        bytes += kl + 1 + vl + 1;
    }
    *bad = n;
    return bytes <= STORE_WINDOW_LABELS_BYTES ? 0 : -EINVAL;
}

/* Decode the window labels p[0..len) (name \0 value \0 each) into h.
 * *why receives what is wrong on ISOPROF_ECORRUPT. */
static int labels_decode(const uint8_t *p, size_t len, struct store_rec_hdr *h, const char **why)
{
    const uint8_t *end = p + len;
    h->nlabels = 0;
    while (p < end) {
        const uint8_t *kz = memchr(p, 0, (size_t)(end - p));
        const uint8_t *vz = kz != NULL ? memchr(kz + 1, 0, (size_t)(end - kz - 1)) : NULL;
        *why = "window label without its name's or value's NUL";
        if (vz == NULL)
            return ISOPROF_ECORRUPT;
        const char *k = (const char *)p, *v = (const char *)kz + 1;
        size_t kl = (size_t)(kz - p), vl = (size_t)(vz - kz - 1);
        *why = "more than 16 window labels";
        if (h->nlabels == STORE_WINDOW_LABELS_MAX)
            return ISOPROF_ECORRUPT;
        *why = "window label name not [A-Za-z_][A-Za-z0-9_]* of 1 to 64 bytes, or reserved";
        if (!label_name_ok(k, kl))
            return ISOPROF_ECORRUPT;
        *why = "window label name twice";
        if (label_seen(h->labels, h->nlabels, k, kl))
            return ISOPROF_ECORRUPT;
        *why = "window label value empty, over 2048 bytes or not UTF-8";
        if (!label_value_ok(v, vl))
            return ISOPROF_ECORRUPT;
        h->labels[h->nlabels++] = (struct store_label){k, v};
        p = vz + 1;
    }
    return 0;
}

/* The decoder. *why receives what is wrong on ISOPROF_ECORRUPT. */
static int record_decode(const void *val, size_t len, struct store_rec_hdr *h, const char **why)
{
    const uint8_t *p = val;
    *why = "shorter than a header";
    if (val == NULL || len < STORE_REC_FIXED_V1)
        return ISOPROF_ECORRUPT;
    *why = "bad magic, version or codec";
    if (p[0] != STORE_REC_MAGIC || p[1] < 1 || p[1] > STORE_REC_VERSION ||
        (p[2] != STORE_CODEC_ZSTD && (p[2] != STORE_CODEC_BLOB || p[1] < 5)))
        return ISOPROF_ECORRUPT;
    int blob = p[2] == STORE_CODEC_BLOB;
    size_t fixed = p[1] == 1   ? STORE_REC_FIXED_V1
                   : p[1] < 4  ? STORE_REC_FIXED_V2
                   : p[1] == 4 ? STORE_REC_FIXED_V4
                               : STORE_REC_FIXED;
    *why = "shorter than a header";
    if (len < fixed)
        return ISOPROF_ECORRUPT; /* before the label lengths are read from it */
    size_t rl = p[3];
    /* Versions 1 and 2 carry no thread: their windows ran on the main
     * thread, the only one isolates were taken from then. Versions 1 to 3
     * carry no pid nor container: nobody looked. Versions 1 to 4 carry no
     * source-map figures nor window labels. */
    size_t tl = p[1] >= 3 ? p[STORE_REC_THREAD_OFF] : 0;
    size_t cl = p[1] >= 4 ? p[STORE_REC_CONTAINER_OFF] : 0;
    size_t ll = p[1] >= 5 ? (size_t)p[STORE_REC_LABELS_OFF] << 8 | p[STORE_REC_LABELS_OFF + 1] : 0;
    *why = "runtime, thread or container label longer than the record";
    if (rl > STORE_RUNTIME_MAX || tl > STORE_THREAD_MAX || cl > STORE_CONTAINER_MAX ||
        len < fixed + rl + tl + cl + 1) /* + at least one frame byte */
        return ISOPROF_ECORRUPT;
    *why = "window labels over 4096 bytes";
    if (ll > STORE_WINDOW_LABELS_BYTES)
        return ISOPROF_ECORRUPT;
    *why = "window labels longer than the record";
    if (len < fixed + rl + tl + cl + ll + 1)
        return ISOPROF_ECORRUPT;
    *why = "NUL in the runtime label";
    if (memchr(p + fixed, 0, rl) != NULL)
        return ISOPROF_ECORRUPT;
    *why = "thread label empty or not printable ASCII";
    if (p[1] >= 3 && !store_thread_ok((const char *)p + fixed + rl, tl))
        return ISOPROF_ECORRUPT;
    *why = "container label not of [0-9A-Za-z_.-]";
    if (!store_container_ok((const char *)p + fixed + rl + tl, cl))
        return ISOPROF_ECORRUPT;
    if (labels_decode(p + fixed + rl + tl + cl, ll, h, why) != 0)
        return ISOPROF_ECORRUPT;
    h->version = p[1];
    h->codec = p[2];
    h->flags = store_be32_get(p + 4);
    h->end_ns = store_be64_get(p + 8);
    h->samples = store_be64_get(p + 16);
    h->interval = store_be64_get(p + 24);
    h->raw_size = store_be64_get(p + 32);
    h->seq = store_be64_get(p + STORE_REC_SEQ_OFF);
    h->anomaly = 0;
    h->dict = 0;
    h->pid = 0;
    h->frames_mapped = h->frames_unmapped = 0;
    memset(&h->mem, 0, sizeof(h->mem));
    if (fixed >= STORE_REC_FIXED_V2) {
        h->anomaly = p[48];
        h->dict = store_be32_get(p + STORE_REC_DICT_OFF);
        *why = "anomaly kind out of range";
        if (h->anomaly > STORE_ANOMALY_MAX)
            return ISOPROF_ECORRUPT;
        h->mem.min = store_be64_get(p + 56);
        h->mem.max = store_be64_get(p + 64);
        h->mem.last = store_be64_get(p + 72);
        h->mem.p999 = store_be64_get(p + 80);
    }
    if (fixed >= STORE_REC_FIXED_V4)
        h->pid = store_be32_get(p + STORE_REC_PID_OFF);
    if (fixed == STORE_REC_FIXED) {
        h->frames_mapped = store_be32_get(p + STORE_REC_MAPPED_OFF);
        h->frames_unmapped = store_be32_get(p + STORE_REC_UNMAPPED_OFF);
    }
    *why = "raw size over the limit, or id 0";
    if (h->raw_size > (blob ? STORE_SNAPSHOT_RAW_MAX : STORE_RAW_MAX) || h->seq == 0)
        return ISOPROF_ECORRUPT;
    memcpy(h->runtime, p + fixed, rl);
    h->runtime[rl] = '\0';
    if (tl > 0) {
        memcpy(h->thread, p + fixed + rl, tl);
        h->thread[tl] = '\0';
    } else {
        memcpy(h->thread, STORE_THREAD_MAIN, sizeof(STORE_THREAD_MAIN));
    }
    memcpy(h->container, p + fixed + rl + tl, cl);
    h->container[cl] = '\0';
    h->payload = p + fixed + rl + tl + cl + ll;
    h->payload_len = len - fixed - rl - tl - cl - ll;
    h->chunks = 0;
    h->blob_bytes = 0;
    if (blob) {
        *why = "snapshot record: blob descriptor not 16 bytes, or its reserved bytes set";
        if (h->payload_len != STORE_BLOB_DESC || store_be32_get(h->payload + 4) != 0)
            return ISOPROF_ECORRUPT;
        h->chunks = store_be32_get(h->payload);
        h->blob_bytes = store_be64_get(h->payload + 8);
        /* Every zstd frame takes a few bytes, and no chunk is empty. */
        *why = "snapshot record: chunk count and compressed size disagree";
        if (h->chunks == 0 || h->blob_bytes < h->chunks ||
            h->blob_bytes > (uint64_t)h->chunks * STORE_BLOB_CHUNK)
            return ISOPROF_ECORRUPT;
        *why = "snapshot record with a dictionary";
        if (h->dict != 0)
            return ISOPROF_ECORRUPT;
    }
    *why = NULL;
    return 0;
}

int store_record_decode(const void *val, size_t len, struct store_rec_hdr *h)
{
    const char *why;
    return record_decode(val, len, h, &why);
}

const char *store_record_fault(const void *val, size_t len)
{
    struct store_rec_hdr h;
    const char *why;
    return record_decode(val, len, &h, &why) == 0 ? NULL : why;
}

int store_record_inflate(const struct store_rec_hdr *h, void **out)
{
    return store_record_inflate_dict(h, NULL, 0, out);
}

int store_record_inflate_dict(const struct store_rec_hdr *h, const void *dict, size_t dlen,
                              void **out)
{
    /* A frame made with a dictionary cannot be read without it, nor one
     * made without with it (zstd would not notice: raw content carries no
     * id), so the header's word decides. */
    if ((h->dict != 0) != (dict != NULL) || h->codec != STORE_CODEC_ZSTD)
        return ISOPROF_ECORRUPT; /* a snapshot's descriptor is no frame */
    return store_frame_inflate(h->payload, h->payload_len, h->raw_size, dict, dlen, out);
}

int store_frame_inflate(const void *frame, size_t len, uint64_t raw_size, const void *dict,
                        size_t dlen, void **out)
{
    unsigned long long csize = ZSTD_getFrameContentSize(frame, len);
    if (csize == ZSTD_CONTENTSIZE_ERROR || csize == ZSTD_CONTENTSIZE_UNKNOWN || csize != raw_size)
        return ISOPROF_ECORRUPT;
    size_t fsize = ZSTD_findFrameCompressedSize(frame, len);
    if (ZSTD_isError(fsize) || fsize != len)
        return ISOPROF_ECORRUPT;
    uint8_t *buf = isoprof_malloc((size_t)raw_size);
    if (buf == NULL)
        return -ENOMEM;
    ZSTD_DCtx *d = ZSTD_createDCtx_advanced(store_zstd_mem);
    if (d == NULL) {
        isoprof_free(buf);
        return -ENOMEM;
    }
    size_t got = 0;
    if (dict != NULL)
        /* By reference: the bytes stay mapped for the caller's read txn. */
        got = ZSTD_DCtx_loadDictionary_advanced(d, dict, dlen, ZSTD_dlm_byRef, ZSTD_dct_rawContent);
    if (!ZSTD_isError(got))
        got = ZSTD_decompressDCtx(d, buf, (size_t)raw_size, frame, len);
    ZSTD_freeDCtx(d);
    if (ZSTD_isError(got) || got != raw_size) {
        isoprof_free(buf);
        if (ZSTD_isError(got) && ZSTD_getErrorCode(got) == ZSTD_error_memory_allocation)
            return -ENOMEM;
        return ISOPROF_ECORRUPT;
    }
    *out = buf;
    return 0;
}

ZSTD_CCtx *store_zstd_cctx_new(void)
{
    ZSTD_CCtx *c = ZSTD_createCCtx_advanced(store_zstd_mem);
    if (c == NULL)
        return NULL;
    if (ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, STORE_ZSTD_LEVEL)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 1))) {
        ZSTD_freeCCtx(c);
        return NULL;
    }
    return c;
}

int store_record_build(ZSTD_CCtx *cctx, const struct store_record *r, int queued, uint8_t **val,
                       size_t *vlen)
{
    return store_record_build_dict(cctx, NULL, 0, r, queued, val, vlen);
}

/* Allocate a record of w with room for extra bytes after its header and
 * write the header: raw size raw, codec, dictionary dict, QUEUED as
 * queued says. *hl receives the header's length. NULL on ENOMEM. */
static uint8_t *record_head(const struct store_window *w, uint64_t raw, int queued, uint8_t codec,
                            uint32_t dict, size_t extra, size_t *hl)
{
    size_t rl = strlen(w->runtime);
    const char *thread = store_thread_of(w->thread);
    size_t tl = strlen(thread); /* 1 to STORE_THREAD_MAX: the caller checked it */
    const char *container = w->container ? w->container : "";
    size_t cl = strlen(container); /* 0 to STORE_CONTAINER_MAX: checked too */
    size_t ll = 0;                 /* at most STORE_WINDOW_LABELS_BYTES: checked too */
    for (size_t i = 0; i < w->nlabels; i++)
        ll += strlen(w->labels[i].name) + 1 + strlen(w->labels[i].value) + 1;
    /* Each length fits its field (store_window_check holds them to far
     * less before a record is stored; the tests build some past those
     * limits, for the decoder to refuse). */
    ISOPROF_ASSERT(rl <= UINT8_MAX && tl >= 1 && tl <= UINT8_MAX && cl <= UINT8_MAX);
    ISOPROF_ASSERT(ll <= UINT16_MAX);
    *hl = STORE_REC_FIXED + rl + tl + cl + ll;
    uint8_t *buf = isoprof_malloc(*hl + extra);
    if (buf == NULL)
        return NULL;
    buf[0] = STORE_REC_MAGIC;
    buf[1] = STORE_REC_VERSION;
    buf[2] = codec;
    buf[3] = (uint8_t)rl;
    /* QUEUED is the store's to say (input ignored). */
    uint32_t flags = w->flags & ~STORE_FLAG_QUEUED;
    store_be32_put(buf + 4, queued ? flags | STORE_FLAG_QUEUED : flags);
    store_be64_put(buf + 8, w->end_ns);
    store_be64_put(buf + 16, w->samples);
    store_be64_put(buf + 24, w->interval);
    store_be64_put(buf + 32, raw);
    store_be64_put(buf + STORE_REC_SEQ_OFF, 0); /* set in the write txn */
    memset(buf + 48, 0, 8);
    buf[48] = w->anomaly;
    buf[STORE_REC_THREAD_OFF] = (uint8_t)tl;
    buf[STORE_REC_CONTAINER_OFF] = (uint8_t)cl;
    store_be32_put(buf + STORE_REC_DICT_OFF, dict);
    store_be64_put(buf + 56, w->mem.min);
    store_be64_put(buf + 64, w->mem.max);
    store_be64_put(buf + 72, w->mem.last);
    store_be64_put(buf + 80, w->mem.p999);
    store_be32_put(buf + STORE_REC_PID_OFF, w->pid);
    store_be32_put(buf + STORE_REC_MAPPED_OFF, w->frames_mapped);
    store_be32_put(buf + STORE_REC_UNMAPPED_OFF, w->frames_unmapped);
    buf[STORE_REC_LABELS_OFF] = (uint8_t)(ll >> 8);
    buf[STORE_REC_LABELS_OFF + 1] = (uint8_t)ll;
    buf[STORE_REC_LABELS_OFF + 2] = buf[STORE_REC_LABELS_OFF + 3] = 0; /* reserved */
    memcpy(buf + STORE_REC_FIXED, w->runtime, rl);
    memcpy(buf + STORE_REC_FIXED + rl, thread, tl);
    memcpy(buf + STORE_REC_FIXED + rl + tl, container, cl);
    uint8_t *q = buf + STORE_REC_FIXED + rl + tl + cl;
    for (size_t i = 0; i < w->nlabels; i++) {
        /* name and value with their NULs */
        size_t kl = strlen(w->labels[i].name) + 1, vl = strlen(w->labels[i].value) + 1;
        memcpy(q, w->labels[i].name, kl);
        memcpy(q + kl, w->labels[i].value, vl);
        q += kl + vl;
    }
    ISOPROF_ASSERT(q == buf + *hl);
    return buf;
}

int store_record_build_blob(const struct store_window *w, uint8_t **val, size_t *vlen)
{
    size_t hl;
    uint8_t *buf = record_head(w, 0, 0, STORE_CODEC_BLOB, 0, STORE_BLOB_DESC, &hl);
    if (buf == NULL)
        return -ENOMEM;
    memset(buf + hl, 0, STORE_BLOB_DESC);
    *val = buf;
    *vlen = hl + STORE_BLOB_DESC;
    return 0;
}

void store_record_blob_finish(uint8_t *val, size_t vlen, uint64_t end_ns, uint64_t raw_size,
                              uint64_t seq, uint32_t chunks, uint64_t bytes)
{
    ISOPROF_ASSERT(vlen >= STORE_REC_FIXED + STORE_BLOB_DESC);
    uint8_t *desc = val + vlen - STORE_BLOB_DESC;
    store_be64_put(val + 8, end_ns);
    store_be64_put(val + 32, raw_size);
    store_be64_put(val + STORE_REC_SEQ_OFF, seq);
    store_be32_put(desc, chunks);
    store_be32_put(desc + 4, 0);
    store_be64_put(desc + 8, bytes);
}

int store_record_build_dict(ZSTD_CCtx *cctx, const ZSTD_CDict *cd, uint32_t dict_id,
                            const struct store_record *r, int queued, uint8_t **val, size_t *vlen)
{
    size_t hl;
    size_t bound = ZSTD_compressBound(r->len);
    uint8_t *buf = record_head(&r->w, (uint64_t)r->len, queued, STORE_CODEC_ZSTD, cd ? dict_id : 0,
                               bound, &hl);
    if (buf == NULL)
        return -ENOMEM;
    /* An empty pprof is still one (empty) frame, so every record has one. */
    static const uint8_t none[1];
    /* The dictionary is referenced for this frame only; the parameters set
     * on cctx (level, checksum, content size) apply either way. */
    size_t got = ZSTD_CCtx_reset(cctx, ZSTD_reset_session_only);
    if (!ZSTD_isError(got))
        got = ZSTD_CCtx_refCDict(cctx, cd);
    if (!ZSTD_isError(got))
        got = ZSTD_compress2(cctx, buf + hl, bound, r->len ? r->pprof : none, r->len);
    if (cd != NULL) {
        /* A failed frame can leave the session open, where the reference
         * cannot be dropped: close it first. */
        ZSTD_CCtx_reset(cctx, ZSTD_reset_session_only);
        ZSTD_CCtx_refCDict(cctx, NULL);
    }
    if (ZSTD_isError(got)) {
        isoprof_free(buf);
        return ZSTD_getErrorCode(got) == ZSTD_error_memory_allocation ? -ENOMEM : ISOPROF_EZSTD;
    }
    *val = buf;
    *vlen = hl + got;
    return 0;
}

void store_window_fill(struct store_window *w, const struct store_key *k,
                       const struct store_rec_hdr *h, size_t klen, size_t vlen)
{
    memset(w, 0, sizeof(*w));
    w->id = h->seq;
    w->worker = k->worker;
    w->version = k->version;
    w->runtime = h->runtime;
    w->thread = h->thread;
    w->pid = h->pid;
    w->container = h->container;
    w->frames_mapped = h->frames_mapped;
    w->frames_unmapped = h->frames_unmapped;
    w->labels = h->nlabels ? h->labels : NULL;
    w->nlabels = h->nlabels;
    w->start_ns = k->start_ns;
    w->end_ns = h->end_ns;
    w->isolate = k->isolate;
    w->type = k->type;
    w->flags = h->flags;
    w->samples = h->samples;
    w->interval = h->interval;
    w->anomaly = h->anomaly;
    w->mem = h->mem;
    w->raw_size = h->raw_size;
    w->stored_size = store_window_size(klen, vlen, h);
}

static const char *const type_names[STORE_TYPE_MAX + 1] = {NULL, "cpu", "heap", "retained",
                                                           "snapshot"};

const char *store_type_name(unsigned type)
{
    return type <= STORE_TYPE_MAX ? type_names[type] : NULL;
}

static const char *const anomaly_names[STORE_ANOMALY_MAX + 1] = {
    "", "memory_near_limit", "oom_suspected", "latency_p999_spike", "memory_growth",
    "version_regression"};

const char *store_anomaly_name(unsigned kind)
{
    return kind <= STORE_ANOMALY_MAX ? anomaly_names[kind] : NULL;
}

unsigned store_anomaly_parse(const char *name)
{
    for (unsigned k = 1; name != NULL && k <= STORE_ANOMALY_MAX; k++)
        if (strcmp(name, anomaly_names[k]) == 0)
            return k;
    return STORE_ANOMALY_NONE;
}
