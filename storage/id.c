/*
 * id.c - the external form of window ids.
 *
 * Inside a store a window is a sequence number; outside (logs, the CLI,
 * upload labels) it is a UUID in the RFC 9562 version 8 layout, so that an
 * id pasted from one host's log cannot silently name a window of another
 * store. Of the 122 free bits, 60 carry the store's random instance id
 * (its top 60 bits) and 62 the sequence number:
 *
 *   bytes 0-5   instance bits 63..16            (custom_a, 48 bits)
 *   byte 6      0x80 | instance bits 15..12     (version 8 + custom_b)
 *   byte 7      instance bits 11..4
 *   byte 8      0x80 | seq bits 61..56          (variant 10 + custom_c)
 *   bytes 9-15  seq bits 55..0
 */
#include "internal.h"

#include "base.h"

#include <errno.h>
#include <string.h>

#define SEQ_MASK ((1ull << 62) - 1)

static void id_bytes(uint64_t instance, uint64_t seq, uint8_t b[16])
{
    b[0] = (uint8_t)(instance >> 56);
    b[1] = (uint8_t)(instance >> 48);
    b[2] = (uint8_t)(instance >> 40);
    b[3] = (uint8_t)(instance >> 32);
    b[4] = (uint8_t)(instance >> 24);
    b[5] = (uint8_t)(instance >> 16);
    b[6] = (uint8_t)(0x80 | ((instance >> 12) & 0x0f));
    b[7] = (uint8_t)(instance >> 4);
    seq &= SEQ_MASK;
    b[8] = (uint8_t)(0x80 | (seq >> 56));
    for (int i = 0; i < 7; i++)
        b[9 + i] = (uint8_t)(seq >> (48 - 8 * i));
}

void store_id_format(const struct store *s, uint64_t id, char out[STORE_ID_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    uint8_t b[16];
    id_bytes(s ? s->instance : 0, id, b);
    char *p = out;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *p++ = '-';
        *p++ = hex[b[i] >> 4];
        *p++ = hex[b[i] & 0x0f];
    }
    *p = '\0';
}

static int parse_decimal(const char *t, uint64_t *id)
{
    uint64_t v = 0;
    if (*t == '\0')
        return -EINVAL;
    for (; *t; t++) {
        if (*t < '0' || *t > '9')
            return -EINVAL;
        unsigned d = (unsigned)(*t - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -EINVAL;
        v = v * 10 + d;
    }
    if (v == 0)
        return -EINVAL;
    *id = v;
    return 0;
}

int store_id_parse(const struct store *s, const char *text, uint64_t *id)
{
    if (s == NULL || text == NULL || id == NULL)
        return -EINVAL;
    size_t n = strlen(text);
    if (n != STORE_ID_LEN)
        return parse_decimal(text, id);
    uint8_t b[16];
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (text[i] != '-')
                return -EINVAL;
            continue;
        }
        int hi = isoprof_hexval(text[i]), lo = isoprof_hexval(text[i + 1]);
        if (hi < 0 || lo < 0)
            return -EINVAL;
        b[j++] = (uint8_t)(hi << 4 | lo);
        i++;
    }
    if ((b[6] & 0xf0) != 0x80 || (b[8] & 0xc0) != 0x80)
        return -EINVAL;
    uint64_t seq = (uint64_t)(b[8] & 0x3f) << 56;
    for (int i = 0; i < 7; i++)
        seq |= (uint64_t)b[9 + i] << (48 - 8 * i);
    uint8_t mine[16];
    id_bytes(s->instance, seq, mine);
    if (memcmp(mine, b, 8) != 0)
        return ISOPROF_ENOTFOUND;
    if (seq == 0)
        return -EINVAL;
    *id = seq;
    return 0;
}
