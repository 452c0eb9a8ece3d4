/*
 * push.c - PushRequest encoding (see push.h).
 *
 * The generated message structs point at the caller's strings and bytes;
 * only the pointer arrays are allocated, all in one block, which is freed
 * once the request is packed.
 */
#include "push.h"

#include "base.h"
#include "push.pb-c.h"
#include "types.pb-c.h"

#include <errno.h>
#include <string.h>

/* Well-formed UTF-8 (isoprof_utf8_valid_prefix), no NUL, of at most max
 * bytes. */
static int utf8_ok(const char *s, size_t max)
{
    size_t n = strnlen(s, max + 1);
    return n <= max && isoprof_utf8_valid_prefix((const uint8_t *)s, n) == n;
}

int push_label_check(const struct push_label *labels, size_t nlabels, size_t *bad)
{
    size_t dummy;
    if (bad == NULL)
        bad = &dummy;
    *bad = nlabels;
    if (nlabels > PUSH_MAX_LABELS || (nlabels > 0 && labels == NULL))
        return -EINVAL;
    int have_name = 0;
    for (size_t i = 0; i < nlabels; i++) {
        const char *k = labels[i].name, *v = labels[i].value;
        *bad = i;
        if (k == NULL || v == NULL || k[0] == '\0' || !utf8_ok(k, PUSH_MAX_NAME) ||
            !utf8_ok(v, PUSH_MAX_VALUE))
            return -EINVAL;
        for (size_t j = 0; j < i; j++)
            if (strcmp(labels[j].name, k) == 0)
                return -EINVAL;
        have_name |= strcmp(k, "__name__") == 0 && v[0] != '\0';
    }
    *bad = nlabels;
    return have_name ? 0 : -EINVAL;
}

int push_encode(const struct push_profile *p, size_t n, uint8_t **out, size_t *len,
                size_t *bad_profile)
{
    if (p == NULL || n == 0 || out == NULL || len == NULL)
        return -EINVAL;
    size_t nl = 0;
    for (size_t i = 0; i < n; i++) {
        if (push_label_check(p[i].labels, p[i].nlabels, NULL) != 0 || p[i].id == NULL ||
            (p[i].len > 0 && p[i].raw == NULL)) {
            if (bad_profile != NULL)
                *bad_profile = i;
            return -EINVAL;
        }
        nl += p[i].nlabels;
    }
    /* One block: n series, n samples, nl label pairs, and the pointer
     * arrays that reference them. */
    size_t bytes = n * (sizeof(Push__V1__RawProfileSeries) + sizeof(Push__V1__RawProfileSeries *) +
                        sizeof(Push__V1__RawSample) + sizeof(Push__V1__RawSample *)) +
                   nl * (sizeof(Types__V1__LabelPair) + sizeof(Types__V1__LabelPair *));
    uint8_t *block = isoprof_malloc(bytes);
    if (block == NULL)
        return -ENOMEM;
    Push__V1__RawProfileSeries *series = (void *)block;
    Push__V1__RawSample *samples = (void *)(series + n);
    Types__V1__LabelPair *pairs = (void *)(samples + n);
    Push__V1__RawProfileSeries **series_p = (void *)(pairs + nl);
    Push__V1__RawSample **samples_p = (void *)(series_p + n);
    Types__V1__LabelPair **pairs_p = (void *)(samples_p + n);
    size_t li = 0;
    for (size_t i = 0; i < n; i++) {
        push__v1__raw_profile_series__init(&series[i]);
        push__v1__raw_sample__init(&samples[i]);
        samples[i].raw_profile.data = (uint8_t *)p[i].raw;
        samples[i].raw_profile.len = p[i].len;
        samples[i].id = (char *)p[i].id;
        samples_p[i] = &samples[i];
        series[i].samples = &samples_p[i];
        series[i].n_samples = 1;
        series[i].labels = &pairs_p[li];
        series[i].n_labels = p[i].nlabels;
        for (size_t j = 0; j < p[i].nlabels; j++, li++) {
            types__v1__label_pair__init(&pairs[li]);
            pairs[li].name = (char *)p[i].labels[j].name;
            pairs[li].value = (char *)p[i].labels[j].value;
            pairs_p[li] = &pairs[li];
        }
        series_p[i] = &series[i];
    }
    Push__V1__PushRequest req = PUSH__V1__PUSH_REQUEST__INIT;
    req.series = series_p;
    req.n_series = n;
    size_t sz = push__v1__push_request__get_packed_size(&req);
    uint8_t *buf = isoprof_malloc(sz ? sz : 1);
    int rc = 0;
    if (buf == NULL) {
        rc = -ENOMEM;
    } else if (push__v1__push_request__pack(&req, buf) != sz) {
        isoprof_free(buf);
        rc = ISOPROF_EPROTOBUF;
    } else {
        *out = buf;
        *len = sz;
    }
    isoprof_free(block);
    return rc;
}
