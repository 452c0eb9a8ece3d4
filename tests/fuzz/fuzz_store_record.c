/*
 * fuzz_store_record - the store's record decoders on arbitrary bytes.
 *
 * The input is tried as a record value (header + zstd frame: decoded, and
 * inflated when it claims at most 1 MiB), as a window key and as a by_time
 * key (8-byte start + window key). A decoder must return ISOPROF_ECORRUPT
 * for anything it does not accept and never read out of bounds; a key it
 * accepts must re-encode to exactly the same bytes, an accepted record's
 * thread label must be a label (1 to STORE_THREAD_MAX bytes of printable
 * ASCII; "main" for versions 1 and 2), its window labels (version 5 only;
 * none and no frame figures before) must lie inside the input before the
 * payload and be what store_labels_check accepts, store_record_fault must
 * agree with the decoder, and an inflated payload must have exactly the
 * size the header claims.
 */
#include "store_internal.h"

#include "base.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void key_round_trip(const uint8_t *key, size_t len)
{
    struct store_key k;
    if (store_key_decode(key, len, &k) != 0)
        return;
    uint8_t again[STORE_KEY_MAX];
    /* The decoded strings end at the key's separators, so they are C strings. */
    size_t n =
        store_key_encode(again, sizeof(again), k.worker, k.version, k.start_ns, k.isolate, k.type);
    if (n != len || memcmp(again, key, len) != 0)
        __builtin_trap();
}

/* The window labels of an accepted header: inside the label bytes (which
 * end where the payload starts), NUL-terminated there, acceptable to
 * store_put; none (and no frame figures) before version 5. */
static void labels_ok(const struct store_rec_hdr *h, const uint8_t *data)
{
    if (h->version < 5 && (h->nlabels != 0 || h->frames_mapped != 0 || h->frames_unmapped != 0))
        __builtin_trap();
    if (h->nlabels > STORE_WINDOW_LABELS_MAX ||
        store_labels_check(h->labels, h->nlabels, NULL) != 0)
        __builtin_trap();
    for (size_t i = 0; i < h->nlabels; i++) {
        const uint8_t *k = (const uint8_t *)h->labels[i].name;
        const uint8_t *v = (const uint8_t *)h->labels[i].value;
        if (k < data + STORE_REC_FIXED || v + strlen((const char *)v) >= h->payload)
            __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct store_rec_hdr h;
    int drc = store_record_decode(data, size, &h);
    if ((drc == 0) != (store_record_fault(data, size) == NULL))
        __builtin_trap();
    if (drc == 0) {
        size_t tl = strlen(h.thread);
        if (h.payload < data || h.payload + h.payload_len != data + size ||
            strlen(h.runtime) > STORE_RUNTIME_MAX || !store_thread_ok(h.thread, tl) ||
            (h.version < 3 && strcmp(h.thread, STORE_THREAD_MAIN) != 0))
            __builtin_trap();
        labels_ok(&h, data);
        if (h.raw_size <= (1u << 20)) {
            void *out = NULL;
            int rc = store_record_inflate(&h, &out);
            if (rc == 0)
                isoprof_free(out);
            else if (rc != ISOPROF_ECORRUPT && rc != -ENOMEM)
                __builtin_trap();
        }
    }
    key_round_trip(data, size);
    if (size >= 8)
        key_round_trip(data + 8, size - 8);
    return 0;
}
