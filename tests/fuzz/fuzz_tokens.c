/*
 * Fuzz target: the bearer-token file parser, tokens_parse()
 * (daemon/tokens.h), which is what tokens_load() runs on a file's
 * contents once it has read them; and tokens_check() on the set it makes.
 *
 * The input is the file's contents. A parser of this file's own, written
 * from tokens.h's rules, says what the set must be: one token per line,
 * alone or after its name (fields separated by blanks), blank lines and
 * '#' lines skipped, trailing spaces, tabs and '\r' trimmed; a token of
 * 1..TOKENS_MAX_LEN characters of [A-Za-z0-9-._~+/=], a name of
 * 1..TOKENS_NAME_MAX of [A-Za-z0-9-._:@] ("token-LINE" when there is
 * none), no name or token twice, at most TOKENS_MAX_COUNT tokens, at
 * least one, and at most 64 KiB of text. Nothing may crash or leak, and:
 *  - the parse succeeds exactly when the reference's does, with the same
 *    number of tokens; a bad line is named by its number, and no token
 *    appears in the message;
 *  - every token is accepted as "Bearer <token>" and gives its name, and
 *    for the first lines of the file tokens_check() agrees with the
 *    reference on the line itself and on "Bearer <line>" as header
 *    values;
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
    enum { BAD_NONE, BAD_SIZE, BAD_LINE, BAD_COUNT, BAD_EMPTY } bad;
    int bad_line;
    size_t n;
    struct span tok[TOKENS_MAX_COUNT];
    char name[TOKENS_MAX_COUNT][TOKENS_NAME_MAX + 1];
};

static bool token_byte(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
           c == '~' || c == '+' || c == '/' || c == '=';
}

static bool name_byte(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
           c == ':' || c == '@';
}

static bool all_of(struct span f, bool (*ok)(unsigned char))
{
    for (size_t i = 0; i < f.len; i++)
        if (!ok((unsigned char)f.p[i]))
            return false;
    return true;
}

/* The line's token (and name, f[0], when it has two fields) into x;
 * false, with x->bad set, when the line is bad. */
static bool reference_line(struct expect *x, int lineno, struct span *f,
                           int nf)
{
    struct span tok = f[nf - 1];
    bool named = nf == 2;
    if (nf > 2 || !all_of(tok, token_byte) || tok.len > TOKENS_MAX_LEN ||
        (named && (!all_of(f[0], name_byte) ||
                   f[0].len > TOKENS_NAME_MAX))) {
        x->bad = BAD_LINE;
        x->bad_line = lineno;
        return false;
    }
    if (x->n == TOKENS_MAX_COUNT) {
        x->bad = BAD_COUNT;
        return false;
    }
    char name[TOKENS_NAME_MAX + 1];
    if (named)
        snprintf(name, sizeof(name), "%.*s", (int)f[0].len, f[0].p);
    else
        snprintf(name, sizeof(name), "token-%d", lineno);
    for (size_t k = 0; k < x->n; k++) {
        if (strcmp(x->name[k], name) == 0 ||
            (x->tok[k].len == tok.len &&
             memcmp(x->tok[k].p, tok.p, tok.len) == 0)) {
            x->bad = BAD_LINE;
            x->bad_line = lineno;
            return false;
        }
    }
    memcpy(x->name[x->n], name, sizeof(name));
    x->tok[x->n++] = tok;
    return true;
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
        size_t b = end;
        while (b > start && (text[b - 1] == ' ' || text[b - 1] == '\t' ||
                             text[b - 1] == '\r'))
            b--;
        struct span f[3];
        int nf = 0;
        for (size_t i = start; i < b && nf < 3;) {
            while (i < b && (text[i] == ' ' || text[i] == '\t'))
                i++;
            size_t j = i;
            while (j < b && text[j] != ' ' && text[j] != '\t')
                j++;
            if (j > i)
                f[nf++] = (struct span){text + i, j - i};
            i = j;
        }
        start = end + 1;
        if (nf == 0 || f[0].p[0] == '#')
            continue;
        if (!reference_line(x, lineno, f, nf))
            return;
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
    REQUIRE(tokens_check(t, v, len, NULL) == reference_check(x, v, len));
    char *h = malloc(len + 7);
    REQUIRE(h != NULL);
    memcpy(h, "Bearer ", 7);
    memcpy(h + 7, v, len);
    REQUIRE(tokens_check(t, h, len + 7, NULL) ==
            reference_check(x, h, len + 7));
    free(h);
}

static void check_message(const struct expect *x, const char *err)
{
    REQUIRE(strncmp(err, "fuzz: ", 6) == 0 ||
            strcmp(err, "out of memory") == 0);
    if (x->bad == BAD_LINE) {
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
        char name[TOKENS_NAME_MAX + 1];
        REQUIRE(tokens_check(t, h, 7 + x.tok[k].len, name));
        REQUIRE(strcmp(name, x.name[k]) == 0);
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
