/*
 * Fuzz target: the policy-file parser, policy_parse() (daemon/policy.h),
 * which is what policy_load() runs on a file's contents once it has read
 * them; and policy_authorize() and policy_visible() on the rules it makes.
 *
 * The input is the file's contents. A parser of this file's own, written
 * from policy.h's rules, says what the rules must be: lines split at
 * '\n', fields at blanks (' ', '\t', '\r'), a field starting with '#'
 * ends its line; the first field is the identity (1..IDENTITY_MAX
 * printable ASCII characters other than '"', '\' and '='), each other one
 * sessions= or owners= (`*` alone, or a comma-separated list of prefixes
 * of 1..ENGINE_SESSION_MAX or 1..ENGINE_OWNER_MAX bytes without '"' or
 * '*') or admin=none|read|write, no key twice; no identity twice, at least one
 * rule, no NUL byte. Nothing may crash or leak, and:
 *  - the parse succeeds exactly when the reference's does, with as many
 *    rules; a failure's message is NUL-terminated, names the file
 *    ("fuzz: ") unless it is "out of memory", and any line it names is
 *    a line of the input;
 *  - for a few callers (the first identities of the file, each less its
 *    last byte, "" and one no rule names) and probe strings (the first
 *    prefixes of the file, each as it is, with "-x" appended and less its
 *    last byte, and a few fixed ones), every call (Acquire, Renew,
 *    Release and Wait with each probe as session and each as owner; Get,
 *    List, Stats, Revoke and Snapshot with each as session) is allowed
 *    exactly when the reference's rules allow it, and a denial says
 * REPLY_DENIED with a reason;
 *  - a List is handed the caller's rule (req.list_rule) exactly when its
 *    prefix lies within none of the caller's; then policy_visible()
 *    agrees with the reference on every probe, and a narrowed prefix is
 *    one of the caller's within the one asked that every other such
 *    prefix starts with (so the narrowing hides nothing the caller may
 *    see);
 *  - the counters policy_write_metrics() prints add up to the denials;
 *  - a parsed policy has no file, so policy_reload() fails.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "fuzz.h"
#include "policy.h"

#define REQUIRE(cond)                                                      \
    do {                                                                   \
        if (!(cond))                                                       \
            abort();                                                       \
    } while (0)

#define CALLERS 6 /* identities of the file probed (each twice) */
#define PROBES 18 /* 3 fixed strings, and 3 for each prefix */

struct span {
    const char *p;
    size_t len;
};

/* A list of prefixes: `*` (all), or n of the model's, from first. */
struct plist {
    bool all;
    size_t first, n;
};

struct mrule {
    struct span id;
    struct plist sessions, owners;
    int admin; /* 0 none, 1 read, 2 write (and read) */
};

/* What the reference makes of a file. */
struct model {
    struct mrule *rules; /* sorted by identity once parsed */
    size_t n;
    struct span *prefixes;
    size_t nprefixes;
};

static bool span_is(struct span s, const char *str)
{
    return s.len == strlen(str) && memcmp(s.p, str, s.len) == 0;
}

static bool starts_with(struct span s, struct span pre)
{
    return pre.len <= s.len && memcmp(s.p, pre.p, pre.len) == 0;
}

static bool blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* The next field of text[*i, end) into *f; false when none is left. */
static bool next_field(const char *text, size_t *i, size_t end,
                       struct span *f)
{
    size_t a = *i;
    while (a < end && blank(text[a]))
        a++;
    size_t b = a;
    while (b < end && !blank(text[b]))
        b++;
    *i = b;
    *f = (struct span){text + a, b - a};
    return b > a;
}

static bool identity_valid(struct span id)
{
    if (id.len > IDENTITY_MAX)
        return false;
    for (size_t i = 0; i < id.len; i++) {
        unsigned char c = (unsigned char)id.p[i];
        if (c <= ' ' || c > '~' || c == '"' || c == '\\' || c == '=')
            return false;
    }
    return true;
}

/* The value of sessions= or owners= (prefixes of at most max bytes). */
static bool model_prefixes(struct model *m, struct span v, size_t max,
                           struct plist *out)
{
    if (span_is(v, "*")) {
        out->all = true;
        return true;
    }
    out->first = m->nprefixes;
    for (size_t a = 0;;) {
        const char *comma = memchr(v.p + a, ',', v.len - a);
        size_t b = comma != NULL ? (size_t)(comma - v.p) : v.len;
        struct span item = {v.p + a, b - a};
        if (item.len == 0 || item.len > max ||
            memchr(item.p, '"', item.len) != NULL ||
            memchr(item.p, '*', item.len) != NULL)
            return false;
        m->prefixes[m->nprefixes++] = item;
        out->n++;
        if (comma == NULL)
            return true;
        a = b + 1;
    }
}

/* One KEY=VALUE field of rule r; seen says which keys were given. */
static bool model_field(struct model *m, struct mrule *r, struct span f,
                        unsigned *seen)
{
    const char *eq = memchr(f.p, '=', f.len);
    if (eq == NULL)
        return false;
    struct span key = {f.p, (size_t)(eq - f.p)};
    struct span v = {eq + 1, f.len - key.len - 1};
    unsigned bit = span_is(key, "sessions") ? 1u
                   : span_is(key, "owners") ? 2u
                   : span_is(key, "admin")  ? 4u
                                            : 0u;
    if (bit == 0 || (*seen & bit) != 0)
        return false;
    *seen |= bit;
    if (bit == 1)
        return model_prefixes(m, v, ENGINE_SESSION_MAX, &r->sessions);
    if (bit == 2)
        return model_prefixes(m, v, ENGINE_OWNER_MAX, &r->owners);
    r->admin = span_is(v, "read") ? 1 : span_is(v, "write") ? 2 : 0;
    return r->admin > 0 || span_is(v, "none");
}

static int by_identity(const void *a, const void *b)
{
    struct span x = ((const struct mrule *)a)->id;
    struct span y = ((const struct mrule *)b)->id;
    int c = memcmp(x.p, y.p, x.len < y.len ? x.len : y.len);
    return c != 0 ? c : (x.len > y.len) - (x.len < y.len);
}

/* Whether text is a valid policy file; its rules into m. m->rules has
 * room for one rule a line, m->prefixes for len / 2 + 1 prefixes (each
 * takes a byte and the '=' or ',' before it). */
static bool model_parse(struct model *m, const char *text, size_t len)
{
    if (len > POLICY_FILE_MAX || memchr(text, '\0', len) != NULL)
        return false;
    for (size_t start = 0; start <= len;) {
        const char *nl = memchr(text + start, '\n', len - start);
        size_t end = nl != NULL ? (size_t)(nl - text) : len;
        size_t i = start;
        start = end + 1;
        struct span f;
        if (!next_field(text, &i, end, &f) || f.p[0] == '#')
            continue;
        if (!identity_valid(f))
            return false;
        struct mrule *r = &m->rules[m->n++];
        *r = (struct mrule){.id = f};
        unsigned seen = 0;
        while (next_field(text, &i, end, &f) && f.p[0] != '#') {
            if (!model_field(m, r, f, &seen))
                return false;
        }
    }
    if (m->n == 0)
        return false;
    qsort(m->rules, m->n, sizeof(*m->rules), by_identity);
    for (size_t k = 1; k < m->n; k++) {
        if (by_identity(&m->rules[k - 1], &m->rules[k]) == 0)
            return false;
    }
    return true;
}

/* The rule that decides identity's calls: its own, "*"'s, or NULL. */
static const struct mrule *model_find(const struct model *m,
                                      const char *identity)
{
    const struct mrule *star = NULL;
    for (size_t k = 0; k < m->n; k++) {
        if (span_is(m->rules[k].id, identity))
            return &m->rules[k];
        if (span_is(m->rules[k].id, "*"))
            star = &m->rules[k];
    }
    return star;
}

/* Whether s starts with one of list's prefixes. */
static bool model_match(const struct model *m, const struct plist *list,
                        struct span s)
{
    if (list->all)
        return true;
    for (size_t k = 0; k < list->n; k++) {
        if (starts_with(s, m->prefixes[list->first + k]))
            return true;
    }
    return false;
}

/* policy.h's rule for a call by a caller whose rule is r. */
static bool model_allows(const struct model *m, const struct mrule *r,
                         const struct request *req)
{
    struct span session = {req->session, req->session_len};
    struct span owner = {req->owner, req->owner_len};
    if (r == NULL || (request_is_admin(req->op) && r->admin == 0))
        return false;
    if (req->op == OP_REVOKE && r->admin != 2)
        return false;
    if (req->op == OP_SNAPSHOT)
        return r->sessions.all;
    if (req->op == OP_LIST || req->op == OP_STATS)
        return true;
    if (!model_match(m, &r->sessions, session))
        return false;
    return request_is_admin(req->op) || model_match(m, &r->owners, owner);
}

struct probe {
    char s[ENGINE_SESSION_MAX + 8];
    size_t len;
};

struct run {
    struct policy *p;
    const struct model *m;
    struct probe probe[PROBES];
    size_t nprobe;
    uint64_t denied;
};

static void add_probe(struct run *run, struct span s, const char *suffix)
{
    struct probe *pr = &run->probe[run->nprobe++];
    size_t n = strlen(suffix);
    memcpy(pr->s, s.p, s.len);
    memcpy(pr->s + s.len, suffix, n);
    pr->len = s.len + n;
}

/* A List allowed to rule r's caller, which asked for asked: its rule
 * and prefix as the call left them. */
static void check_list(struct run *run, const struct mrule *r,
                       const struct request *req, struct span asked)
{
    const struct model *m = run->m;
    bool within = model_match(m, &r->sessions, asked);
    REQUIRE((req->list_rule == NULL) == within);
    if (within) {
        REQUIRE(req->session == asked.p && req->session_len == asked.len);
        return;
    }
    for (size_t k = 0; k < run->nprobe; k++) {
        struct span s = {run->probe[k].s, run->probe[k].len};
        REQUIRE(policy_visible(req->list_rule, s.p, s.len) ==
                model_match(m, &r->sessions, s));
    }
    if (req->session == asked.p && req->session_len == asked.len)
        return;
    struct span narrowed = {req->session, req->session_len};
    bool theirs = false;
    for (size_t k = 0; k < r->sessions.n; k++) {
        struct span pre = m->prefixes[r->sessions.first + k];
        if (!starts_with(pre, asked))
            continue;
        theirs = theirs || (pre.len == narrowed.len &&
                            memcmp(pre.p, narrowed.p, pre.len) == 0);
        REQUIRE(starts_with(pre, narrowed));
    }
    REQUIRE(theirs);
}

/* One call by identity (whose rule, for the reference, is r). */
static void call(struct run *run, const struct mrule *r,
                 const char identity[IDENTITY_MAX + 1], enum request_op op,
                 const struct probe *session, const struct probe *owner)
{
    struct request req;
    memset(&req, 0, sizeof(req));
    req.op = op;
    memcpy(req.identity, identity, sizeof(req.identity));
    req.session = session->s;
    req.session_len = session->len;
    if (owner != NULL) {
        req.owner = owner->s;
        req.owner_len = owner->len;
    }
    bool want = model_allows(run->m, r, &req);
    REQUIRE(policy_authorize(run->p, &req) == want);
    if (!want) {
        run->denied++;
        REQUIRE(req.status == REPLY_DENIED && req.list_rule == NULL);
        REQUIRE(req.reason[0] != '\0' &&
                memchr(req.reason, '\0', sizeof(req.reason)) != NULL);
    } else if (op == OP_LIST) {
        REQUIRE(req.status == REPLY_OK);
        check_list(run, r, &req, (struct span){session->s, session->len});
    } else {
        REQUIRE(req.status == REPLY_OK && req.list_rule == NULL);
        REQUIRE(req.session == session->s);
    }
    policy_release(req.list_rule);
}

static const enum request_op lease_ops[] = {OP_ACQUIRE, OP_RENEW, OP_RELEASE,
                                            OP_WAIT};
#define LEASE_OPS (sizeof(lease_ops) / sizeof(lease_ops[0]))

static void check_caller(struct run *run,
                         const char identity[IDENTITY_MAX + 1])
{
    const struct mrule *r = model_find(run->m, identity);
    for (size_t i = 0; i < run->nprobe; i++) {
        const struct probe *s = &run->probe[i];
        for (int op = OP_GET; op <= OP_SNAPSHOT; op++)
            call(run, r, identity, (enum request_op)op, s, NULL);
        for (size_t j = 0; j < run->nprobe; j++)
            call(run, r, identity, lease_ops[(i + j) % LEASE_OPS], s,
                 &run->probe[j]);
    }
}

/* The sum of the counters policy_write_metrics() prints. */
static uint64_t denials_counted(struct policy *p)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    REQUIRE(f != NULL);
    policy_write_metrics(p, f);
    REQUIRE(fclose(f) == 0);
    uint64_t total = 0;
    for (char *line = text, *nl; *line != '\0'; line = nl + 1) {
        nl = strchr(line, '\n');
        REQUIRE(nl != NULL);
        *nl = '\0';
        if (line[0] == '#')
            continue;
        char *value = strrchr(line, ' '); /* identities have no blanks */
        REQUIRE(value != NULL);
        total += strtoull(value + 1, NULL, 10);
    }
    free(text);
    return total;
}

static void check_rules(struct policy *p, const struct model *m)
{
    struct run run = {.p = p, .m = m};
    static const char *const fixed[] = {"", "a", "nobody-XYZ"};
    for (size_t k = 0; k < 3; k++)
        add_probe(&run, (struct span){fixed[k], strlen(fixed[k])}, "");
    for (size_t k = 0; k < m->nprefixes && run.nprobe + 3 <= PROBES; k++) {
        struct span pre = m->prefixes[k];
        add_probe(&run, pre, "");
        add_probe(&run, pre, "-x");
        add_probe(&run, (struct span){pre.p, pre.len - 1}, "");
    }

    char identity[IDENTITY_MAX + 1] = "";
    check_caller(&run, identity);
    snprintf(identity, sizeof(identity), "nobody-XYZ");
    check_caller(&run, identity);
    for (size_t k = 0; k < m->n && k < CALLERS; k++) {
        struct span id = m->rules[k].id;
        memset(identity, 0, sizeof(identity));
        memcpy(identity, id.p, id.len);
        check_caller(&run, identity);
        identity[id.len - 1] = '\0';
        check_caller(&run, identity);
    }
    REQUIRE(denials_counted(p) == run.denied);
}

static void check_message(const char *err, size_t size, size_t lines)
{
    REQUIRE(memchr(err, '\0', size) != NULL && err[0] != '\0');
    if (strcmp(err, "out of memory") == 0)
        return;
    REQUIRE(strncmp(err, "fuzz: ", 6) == 0);
    /* The line, when named, comes first ("fuzz: line N: ..."); what
     * follows may quote the input, which can say anything. */
    if (strncmp(err, "fuzz: line ", 11) == 0) {
        REQUIRE(err[11] >= '1' && err[11] <= '9');
        unsigned long n = strtoul(err + 11, NULL, 10);
        REQUIRE(n >= 1 && n <= lines);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    size_t lines = 1;
    for (size_t i = 0; i < size; i++)
        lines += text[i] == '\n';
    struct model m = {
        .rules = malloc(lines * sizeof(*m.rules)),
        .prefixes = malloc((size / 2 + 1) * sizeof(*m.prefixes)),
    };
    REQUIRE(m.rules != NULL && m.prefixes != NULL);
    bool valid = model_parse(&m, text, size);

    char err[512];
    err[0] = '\0';
    struct policy *p = policy_parse("fuzz", text, size, err, sizeof(err));
    if (p == NULL) {
        check_message(err, sizeof(err), lines);
        REQUIRE(!valid || strcmp(err, "out of memory") == 0);
    } else {
        REQUIRE(valid);
        REQUIRE(policy_count(p) == m.n);
        check_rules(p, &m);
        REQUIRE(policy_reload(p, err, sizeof(err)) == -1);
        policy_free(p);
    }
    free(m.rules);
    free(m.prefixes);
    return 0;
}
