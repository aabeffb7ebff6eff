/* String rules for session ids and owners (see validate.h). */
#include "validate.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing
 * above U+10FFFF. */
static bool utf8_valid(const unsigned char *p, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned char c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        uint32_t cp, min;
        if ((c & 0xe0) == 0xc0) {
            n = 1, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            n = 2, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            n = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (len - i <= n)
            return false;
        for (size_t k = 1; k <= n; k++) {
            if ((p[i + k] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (p[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += n + 1;
    }
    return true;
}

const char *validate_string(const unsigned char *p, size_t len, size_t max)
{
    /* The one reason that varies: it names the limit, so that whoever
     * reads it knows how much to cut without looking it up. */
    static _Thread_local char too_long[64];
    if (len == 0)
        return "empty";
    if (len > max) {
        snprintf(too_long, sizeof(too_long),
                 "longer than the limit of %zu bytes", max);
        return too_long;
    }
    for (size_t i = 0; i < len; i++) {
        if (p[i] == 0)
            return "contains a NUL byte";
    }
    if (!utf8_valid(p, len))
        return "not valid UTF-8";
    return NULL;
}
