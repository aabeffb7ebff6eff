/*
 * Fuzz target: the bearer-token file parser, tokens_parse()
 * (daemon/tokens.h), which is what tokens_load() runs on a file's
 * contents once it has read them; and tokens_check() on the set it makes.
 *
 * The input is the file's contents. A parser of this file's own, written
 * from tokens.h's rules, says what the set must be: one token per line,
 * blank lines and '#' lines skipped, spaces and tabs trimmed (and a
 * trailing '\r'), 1..TOKENS_MAX_LEN characters of [A-Za-z0-9-._~+/=],
 * at most TOKENS_MAX_COUNT tokens, at least one, and at most 64 KiB of
 * text. Nothing may crash or leak, and:
 *  - the parse succeeds exactly when the reference's does, with the same
 *    number of tokens; a bad line is named by its number, and no token
 *    appears in the message;
 *  - every token is accepted as "Bearer <token>", and for the first lines
 *    of the file tokens_check() agrees with the reference on the line
 *    itself and on "Bearer <line>" as header values;
 *  - a parsed set has no file, so tokens_reload() fails.
 *
 * One behaviour tokens.h does not state is modelled as it is: the text
 * ends at its first NUL byte (the parser works on C strings), so a NUL
 * silently drops the rest of the file instead of refusing a bad line.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "tokens.h"

#define REQUIRE(cond)                                                      \
    do {                                                                   \
        if (!(cond))                                                       \
            abort();                                                       \
    } while (0)

#define TEXT_MAX (64 * 1024)
#define HEADER_LINES 16 /* lines whose header forms are checked */

struct span {
    const char *p;
    size_t len;
};

/* What the reference makes of a file. */
struct expect {
    bool ok;
    enum { BAD_NONE, BAD_SIZE, BAD_CHAR, BAD_LONG, BAD_COUNT, BAD_EMPTY } bad;
    int bad_line;
    size_t n;
    struct span tok[TOKENS_MAX_COUNT];
};

static bool token_byte(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
           c == '~' || c == '+' || c == '/' || c == '=';
}

static void reference(const char *text, size_t len, struct expect *x)
{
    memset(x, 0, sizeof(*x));
    if (len > TEXT_MAX) {
        x->bad = BAD_SIZE;
        return;
    }
    const char *nul = memchr(text, '\0', len);
    if (nul != NULL)
        len = (size_t)(nul - text);
    int lineno = 0;
    for (size_t start = 0; start <= len;) {
        lineno++;
        const char *nl = memchr(text + start, '\n', len - start);
        size_t end = nl != NULL ? (size_t)(nl - text) : len;
        size_t a = start, b = end;
        while (b > a && (text[b - 1] == ' ' || text[b - 1] == '\t' ||
                         text[b - 1] == '\r'))
            b--;
        while (a < b && (text[a] == ' ' || text[a] == '\t'))
            a++;
        start = end + 1;
        if (a == b || text[a] == '#')
            continue;
        for (size_t i = a; i < b; i++) {
            if (!token_byte((unsigned char)text[i])) {
                x->bad = BAD_CHAR;
                x->bad_line = lineno;
                return;
            }
        }
        if (b - a > TOKENS_MAX_LEN) {
            x->bad = BAD_LONG;
            x->bad_line = lineno;
            return;
        }
        if (x->n == TOKENS_MAX_COUNT) {
            x->bad = BAD_COUNT;
            return;
        }
        x->tok[x->n++] = (struct span){text + a, b - a};
    }
    if (x->n == 0) {
        x->bad = BAD_EMPTY;
        return;
    }
    x->ok = true;
}

/* tokens.h's header rule: "Bearer" in any case, one or more spaces, and a
 * token of the set, byte for byte. */
static bool reference_check(const struct expect *x, const char *v,
                            size_t len)
{
    static const char bearer[] = "bearer";
    if (len < 7 || v[6] != ' ')
        return false;
    for (size_t i = 0; i < 6; i++) {
        char c = v[i] >= 'A' && v[i] <= 'Z' ? (char)(v[i] + 32) : v[i];
        if (c != bearer[i])
            return false;
    }
    size_t i = 6;
    while (i < len && v[i] == ' ')
        i++;
    for (size_t k = 0; k < x->n; k++) {
        if (x->tok[k].len == len - i &&
            memcmp(x->tok[k].p, v + i, len - i) == 0)
            return true;
    }
    return false;
}

/* Checks tokens_check() against the reference on v, and on "Bearer v". */
static void check_header(struct tokens *t, const struct expect *x,
                         const char *v, size_t len)
{
    REQUIRE(tokens_check(t, v, len) == reference_check(x, v, len));
    char *h = malloc(len + 7);
    REQUIRE(h != NULL);
    memcpy(h, "Bearer ", 7);
    memcpy(h + 7, v, len);
    REQUIRE(tokens_check(t, h, len + 7) == reference_check(x, h, len + 7));
    free(h);
}

static void check_message(const struct expect *x, const char *err)
{
    REQUIRE(strncmp(err, "fuzz: ", 6) == 0 ||
            strcmp(err, "out of memory") == 0);
    if (x->bad == BAD_CHAR || x->bad == BAD_LONG) {
        char want[32];
        snprintf(want, sizeof(want), "line %d:", x->bad_line);
        REQUIRE(strstr(err, want) != NULL);
    }
    /* Long tokens cannot appear in a message's fixed words by chance. */
    for (size_t k = 0; k < x->n; k++) {
        if (x->tok[k].len >= 16)
            REQUIRE(memmem(err, strlen(err), x->tok[k].p, x->tok[k].len) ==
                    NULL);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    struct expect x;
    reference(text, size, &x);
    char err[512];
    err[0] = '\0';
    struct tokens *t = tokens_parse("fuzz", text, size, err, sizeof(err));
    if (t == NULL) {
        REQUIRE(!x.ok);
        REQUIRE(memchr(err, '\0', sizeof(err)) != NULL);
        check_message(&x, err);
        return 0;
    }
    REQUIRE(x.ok);
    REQUIRE(tokens_count(t) == x.n);
    for (size_t k = 0; k < x.n; k++) {
        if (k >= HEADER_LINES && k != x.n - 1)
            continue; /* each check costs TOKENS_MAX_COUNT comparisons */
        char h[7 + TOKENS_MAX_LEN];
        memcpy(h, "Bearer ", 7);
        memcpy(h + 7, x.tok[k].p, x.tok[k].len);
        REQUIRE(tokens_check(t, h, 7 + x.tok[k].len));
    }
    size_t start = 0;
    for (int line = 0; line < HEADER_LINES && start < size; line++) {
        const char *nl = memchr(text + start, '\n', size - start);
        size_t end = nl != NULL ? (size_t)(nl - text) : size;
        check_header(t, &x, text + start, end - start);
        start = end + 1;
    }
    REQUIRE(tokens_reload(t, err, sizeof(err)) == -1);
    tokens_free(t);
    return 0;
}
