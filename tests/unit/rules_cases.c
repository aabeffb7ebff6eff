/* The cases of tests/rules_cases.txt (see rules_cases.h). */
#include "rules_cases.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char *const ops[] = {
    [RULES_ACQUIRE] = "acquire",
    [RULES_RENEW] = "renew",
    [RULES_RELEASE] = "release",
    [RULES_REVOKE] = "revoke",
};
static const char *const codes[] = {
    [RULES_OK] = "ok",
    [RULES_HELD] = "held",
    [RULES_LOST] = "lost",
    [RULES_NOOP] = "noop",
};

#define WORDS_MAX 16

struct words {
    char buf[256];
    const char *w[WORDS_MAX];
    size_t n, at;
    char *err;
    size_t len;
    bool failed;
};

static bool fail(struct words *ws, const char *fmt, ...)
{
    if (!ws->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ws->err, ws->len, fmt, ap);
        va_end(ap);
    }
    ws->failed = true;
    return false;
}

static const char *next(struct words *ws)
{
    if (ws->at < ws->n)
        return ws->w[ws->at++];
    fail(ws, "too few words");
    return "";
}

static int64_t number(struct words *ws)
{
    const char *w = next(ws);
    char *end;
    long long v = strtoll(w, &end, 10);
    if (*w == '\0' || *end != '\0')
        fail(ws, "not a number: \"%s\"", w);
    return v;
}

static void owner(struct words *ws, char out[RULES_CASE_OWNER_MAX])
{
    const char *w = next(ws);
    if (strcmp(w, "\"\"") == 0)
        w = "";
    if (strlen(w) >= RULES_CASE_OWNER_MAX || strchr(w, '"') != NULL)
        fail(ws, "not an owner: %s", w);
    else
        strcpy(out, w);
}

static int word_of(struct words *ws, const char *const *names, size_t n)
{
    const char *w = next(ws);
    for (size_t i = 0; i < n; i++)
        if (names[i] != NULL && strcmp(w, names[i]) == 0)
            return (int)i;
    fail(ws, "unknown word \"%s\"", w);
    return -1;
}

int rules_case_parse(const char *line, struct rules_case *c, char *err,
                     size_t len)
{
    struct words ws = {.err = err, .len = len};
    if (strlen(line) >= sizeof(ws.buf)) {
        snprintf(err, len, "line too long");
        return -1;
    }
    strcpy(ws.buf, line);
    ws.buf[strcspn(ws.buf, "#\n")] = '\0';
    for (char *save, *w = strtok_r(ws.buf, " \t", &save); w != NULL;
         w = strtok_r(NULL, " \t", &save)) {
        if (ws.n == WORDS_MAX) {
            snprintf(err, len, "too many words");
            return -1;
        }
        ws.w[ws.n++] = w;
    }
    if (ws.n == 0)
        return 0;

    *c = (struct rules_case){0};
    c->op = (enum rules_op)word_of(&ws, ops, sizeof(ops) / sizeof(*ops));
    if (ws.at < ws.n && strcmp(ws.w[ws.at], "none") == 0) {
        ws.at++;
        c->kind = RULES_CASE_NONE;
    } else if (ws.at < ws.n && strcmp(ws.w[ws.at], "floor") == 0) {
        ws.at++;
        c->kind = RULES_CASE_FLOOR;
        c->row_token = (uint64_t)number(&ws);
    } else {
        c->kind = RULES_CASE_ROW;
        owner(&ws, c->row_owner);
        c->row_token = (uint64_t)number(&ws);
        c->row_expiry = number(&ws);
        const char *q = next(&ws);
        if (strcmp(q, "q") != 0 && strcmp(q, "-") != 0)
            fail(&ws, "not q or -: \"%s\"", q);
        c->row_quarantined = strcmp(q, "q") == 0;
    }
    owner(&ws, c->req_owner);
    c->req_token = (uint64_t)number(&ws);
    c->now = number(&ws);
    c->ttl = number(&ws);
    if (strcmp(next(&ws), "->") != 0)
        fail(&ws, "no -> after the TTL");
    struct rules_answer *a = &c->want;
    a->code = word_of(&ws, codes, sizeof(codes) / sizeof(*codes));
    if (a->code == RULES_OK) {
        owner(&ws, a->owner);
        a->token = (uint64_t)number(&ws);
        a->expiry = number(&ws);
    } else {
        for (int i = 0; i < 3; i++)
            if (strcmp(next(&ws), "-") != 0)
                fail(&ws, "a refusal's row must be - - -");
    }
    a->flags = (int)number(&ws);
    if (!ws.failed && ws.at != ws.n)
        fail(&ws, "words after the flags");
    /* What rules_decide asserts: never ask it that. */
    if (!ws.failed && c->ttl <= 0)
        fail(&ws, "the TTL must be above 0");
    if (!ws.failed && c->op == RULES_ACQUIRE && c->req_owner[0] == '\0')
        fail(&ws, "Acquire needs an owner");
    return ws.failed ? -1 : 1;
}

void rules_case_run(const struct rules_case *c, struct rules_answer *out)
{
    struct rules_row row = {
        .owner = c->row_owner,
        .owner_len = strlen(c->row_owner),
        .token = c->row_token,
        .expiry_ns = c->row_expiry,
        .quarantined = c->row_quarantined,
    };
    struct rules_request req = {c->req_owner, strlen(c->req_owner),
                                c->req_token};
    struct rules_outcome o;
    *out = (struct rules_answer){0};
    out->code = rules_decide(c->op, c->kind == RULES_CASE_NONE ? NULL : &row,
                             &req, c->now, c->ttl, &o);
    if (out->code != RULES_OK)
        return;
    snprintf(out->owner, sizeof(out->owner), "%.*s",
             (int)o.after.owner_len,
             o.after.owner != NULL ? o.after.owner : "");
    out->token = o.after.token;
    out->expiry = o.after.expiry_ns;
    /* The flags as leased_decide reports them, from the outcome as
     * daemon/server.c's count_change() counts takeovers and expiries: a
     * takeover, and whether the row it took had an owner; a reclaim is a
     * renewal of an expired lease. */
    if (o.takeover)
        out->flags = 1 | (row.owner_len > 0 ? 2 : 0);
    else if (c->op == RULES_RENEW && c->row_expiry <= c->now)
        out->flags = 4;
}

static const char *quoted(const char *owner)
{
    return owner[0] != '\0' ? owner : "\"\"";
}

void rules_case_print(FILE *f, const struct rules_case *c,
                      const struct rules_answer *a)
{
    fprintf(f, "%s ", ops[c->op]);
    if (c->kind == RULES_CASE_NONE)
        fprintf(f, "none");
    else if (c->kind == RULES_CASE_FLOOR)
        fprintf(f, "floor %" PRIu64, c->row_token);
    else
        fprintf(f, "%s %" PRIu64 " %" PRId64 " %s", quoted(c->row_owner),
                c->row_token, c->row_expiry, c->row_quarantined ? "q" : "-");
    fprintf(f, " %s %" PRIu64 " %" PRId64 " %" PRId64 " -> %s",
            quoted(c->req_owner), c->req_token, c->now, c->ttl,
            codes[a->code]);
    if (a->code == RULES_OK)
        fprintf(f, " %s %" PRIu64 " %" PRId64, quoted(a->owner), a->token,
                a->expiry);
    else
        fprintf(f, " - - -");
    fprintf(f, " %d\n", a->flags);
}
