/*
 * push.h - the body of one Grafana Pyroscope Push request
 * (push.v1.PusherService/Push, Content-Type application/proto): a
 * PushRequest with one RawProfileSeries per profile, each holding the
 * profile's labels and one RawSample (the gzip'd pprof and its ID).
 *
 * The server's limits are checked here, so that a request it would refuse
 * for its labels is never sent: at most PUSH_MAX_LABELS labels a series,
 * names of 1..PUSH_MAX_NAME bytes, values of at most PUSH_MAX_VALUE bytes,
 * all valid UTF-8 without NUL, no name twice in a series, and __name__
 * present.
 *
 * No state, no logging. Thread: any.
 */
#ifndef ISOPROF_PUSH_H
#define ISOPROF_PUSH_H

#include <stddef.h>
#include <stdint.h>

#define PUSH_MAX_LABELS 30
#define PUSH_MAX_NAME 1024
#define PUSH_MAX_VALUE 2048

struct push_label {
    const char *name, *value; /* NUL-terminated */
};

struct push_profile {
    const struct push_label *labels;
    size_t nlabels;
    const void *raw; /* the pprof as sent (gzip'd); borrowed */
    size_t len;
    const char *id; /* the window's id; NUL-terminated */
};

/*
 * push_label_check - 0 if the labels of one series are acceptable (see
 * above), else -EINVAL; *bad (optional) receives the index of the first
 * offending label, or nlabels when __name__ is missing or there are too
 * many.
 */
int push_label_check(const struct push_label *labels, size_t nlabels, size_t *bad);

/*
 * push_encode - the PushRequest for profiles p[0..n). *out receives an
 * allocation (isoprof_free) of *len bytes. n == 0 is -EINVAL (the server
 * answers an empty request with 400). Errors: -EINVAL (n == 0, a NULL
 * pointer, labels push_label_check refuses; *bad_profile, if non-NULL,
 * receives the index of that profile), -ENOMEM, ISOPROF_EPROTOBUF.
 */
int push_encode(const struct push_profile *p, size_t n, uint8_t **out, size_t *len,
                size_t *bad_profile);

#endif
