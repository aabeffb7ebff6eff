/* Flat JSON objects for leasectl (see json.h). */
#include "json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

/* Parses the string at p (just after its opening quote) into out, or
 * just skips it when out is NULL. Returns the position after the closing
 * quote, or NULL. */
static const char *string_at(const char *p, char *out, size_t len)
{
    size_t n = 0;
    while (*p != '"') {
        unsigned c = (unsigned char)*p++;
        if (c == '\0' || c < 0x20)
            return NULL;
        char buf[4];
        size_t k = 1;
        buf[0] = (char)c;
        if (c == '\\') {
            c = (unsigned char)*p++;
            const char *simple = strchr("\"\\/bfnrt", (int)c);
            if (c != 'u' && (simple == NULL || c == '\0'))
                return NULL;
            if (c != 'u') {
                buf[0] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            } else {
                char hex[5] = {0};
                memcpy(hex, p, 4);
                char *end;
                unsigned long u = strtoul(hex, &end, 16);
                if (end != hex + 4 || u == 0 || (u >= 0xd800 && u < 0xe000))
                    return NULL; /* no NULs, no surrogate pairs */
                p += 4;
                if (u < 0x80) {
                    buf[0] = (char)u;
                } else if (u < 0x800) {
                    buf[0] = (char)(0xc0 | (u >> 6));
                    buf[1] = (char)(0x80 | (u & 0x3f));
                    k = 2;
                } else {
                    buf[0] = (char)(0xe0 | (u >> 12));
                    buf[1] = (char)(0x80 | ((u >> 6) & 0x3f));
                    buf[2] = (char)(0x80 | (u & 0x3f));
                    k = 3;
                }
            }
        }
        if (out != NULL) {
            if (n + k >= len)
                return NULL;
            memcpy(out + n, buf, k);
        }
        n += k;
    }
    if (out != NULL)
        out[n] = '\0';
    return p + 1;
}

/* The value of member key in the top-level object, or NULL. */
static const char *member(const char *text, const char *key)
{
    const char *p = skip_ws(text);
    if (*p++ != '{')
        return NULL;
    for (;;) {
        p = skip_ws(p);
        if (*p++ != '"')
            return NULL;
        char name[64];
        p = string_at(p, name, sizeof(name));
        if (p == NULL)
            return NULL;
        p = skip_ws(p);
        if (*p++ != ':')
            return NULL;
        p = skip_ws(p);
        if (strcmp(name, key) == 0)
            return p;
        /* Skip a flat value: a string, or anything up to , or }. */
        if (*p == '"') {
            p = string_at(p + 1, NULL, 0);
            if (p == NULL)
                return NULL;
        } else {
            p += strcspn(p, ",}");
        }
        p = skip_ws(p);
        if (*p != ',')
            return NULL;
        p++;
    }
}

bool json_get_string(const char *text, const char *key, char *out,
                     size_t len)
{
    const char *v = member(text, key);
    return v != NULL && *v == '"' && string_at(v + 1, out, len) != NULL;
}

bool json_get_u64(const char *text, const char *key, uint64_t *out)
{
    const char *v = member(text, key);
    if (v == NULL || *v < '0' || *v > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno != 0 || end == v)
        return false;
    *out = n;
    return true;
}

void json_put_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        unsigned char next = (unsigned char)s[1];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            fprintf(f, "\\u%04x", c);
        else if (c == 0xc2 && next >= 0x80 && next <= 0x9f)
            fprintf(f, "\\u%04x", (unsigned char)*++s); /* C1 control */
        else
            fputc(c, f);
    }
    fputc('"', f);
}
