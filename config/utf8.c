/*
 * utf8.c - the one UTF-8 validator (see base.h).
 *
 * RFC 3629's table of well-formed sequences, checked byte by byte: the
 * lead byte gives the length, and the range allowed for the second byte
 * is narrowed for the four lead bytes that would otherwise admit overlong
 * forms (E0, F0), surrogates (ED) or code points past U+10FFFF (F4). C0,
 * C1 and F5..FF never start a sequence. No code point is decoded, so there
 * is nothing to overflow and nothing to compare after the fact.
 */
#include "base.h"

size_t isoprof_utf8_seq(const uint8_t *s, size_t n)
{
    if (n == 0)
        return 0;
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    unsigned lo = 0x80, hi = 0xbf;
    size_t len;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4;
    else
        return 0;
    if (c == 0xe0)
        lo = 0xa0; /* E0 80..9F would be overlong */
    else if (c == 0xed)
        hi = 0x9f; /* ED A0..BF would be U+D800..U+DFFF */
    else if (c == 0xf0)
        lo = 0x90; /* F0 80..8F would be overlong */
    else if (c == 0xf4)
        hi = 0x8f; /* F4 90.. would be past U+10FFFF */
    if (n < len)
        return 0;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return len;
}

size_t isoprof_utf8_valid_prefix(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        /* An ASCII run is the common case: skip it without the table. */
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = isoprof_utf8_seq(s + i, n - i);
        if (k == 0)
            break;
        i += k;
    }
    return i;
}
