/*
 * json.c - writing and sizing JSON text (see base.h).
 *
 * isoprof_json_str is the one JSON string writer: every JSON text isoprof
 * produces (control answers, CLI output, reports) escapes strings the same
 * way, so a label that holds a quote, a control byte or a stray byte of
 * Latin-1 comes out the same, valid, everywhere. Runs of bytes that need
 * no escaping are appended in one piece.
 */
#include "base.h"

#include <string.h>

/* Bytes that pass through unchanged: printable ASCII other than " and \. */
static int json_plain(unsigned c)
{
    return c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
}

int isoprof_json_strn(struct isoprof_buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    if (b->err)
        return b->err;
    size_t start = b->len;
    const uint8_t *p = (const uint8_t *)s;
    isoprof_buf_putc(b, '"');
    size_t i = 0;
    while (i < n && b->err == 0) {
        size_t run = i;
        while (i < n && json_plain(p[i]))
            i++;
        if (i > run) {
            isoprof_buf_append(b, p + run, i - run);
            continue;
        }
        unsigned c = p[i];
        if (c >= 0x80) {
            size_t k = isoprof_utf8_seq(p + i, n - i);
            if (k > 0)
                isoprof_buf_append(b, p + i, k);
            else
                isoprof_buf_append(b, "\xef\xbf\xbd", 3); /* U+FFFD */
            i += k > 0 ? k : 1;
            continue;
        }
        char esc[6] = {'\\', 0, 0, 0, 0, 0};
        size_t elen = 2;
        switch (c) {
        case '"':
        case '\\':
            esc[1] = (char)c;
            break;
        case '\b':
            esc[1] = 'b';
            break;
        case '\f':
            esc[1] = 'f';
            break;
        case '\n':
            esc[1] = 'n';
            break;
        case '\r':
            esc[1] = 'r';
            break;
        case '\t':
            esc[1] = 't';
            break;
        default: /* the other controls, and DEL */
            memcpy(esc + 1, "u00", 3);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 0xf];
            elen = 6;
            break;
        }
        isoprof_buf_append(b, esc, elen);
        i++;
    }
    isoprof_buf_putc(b, '"');
    if (b->err) {
        /* Nothing in part: a cut-off string would leave the text invalid. */
        b->len = start;
        if (b->data != NULL)
            b->data[start] = '\0';
    }
    return b->err;
}

int isoprof_json_str(struct isoprof_buf *b, const char *s)
{
    if (s == NULL)
        return isoprof_buf_append(b, "null", 4);
    return isoprof_json_strn(b, s, strlen(s));
}

unsigned isoprof_json_depth(const char *s, size_t n, unsigned limit)
{
    unsigned depth = 0, max = 0;
    int in_str = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++; /* the escaped character, whatever it is */
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '[' || c == '{') {
            if (++depth > max && (max = depth) > limit)
                return limit + 1;
        } else if ((c == ']' || c == '}') && depth > 0) {
            depth--;
        }
    }
    return max;
}
