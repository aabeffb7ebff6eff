/* The policy file (see policy.h). */
#include "policy.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine.h"
#include "errmsg.h"
#include "log.h"
#include "readfile.h"

/* What separates fields: a CR too, so that CRLF files work. */
#define BLANKS " \t\r"

/* A list of prefixes: `*` (all), or n of the rule set's, from first. */
struct prefixes {
    bool all;
    size_t first, n;
};

struct prefix {
    const char *p;
    size_t n;
};

/* The denials of one identity's rule (or of "*"), kept across reloads so
 * that the metric only ever goes up. */
struct counter {
    _Atomic uint64_t denied;
    char name[];
};

struct policy_rule {
    const char *identity; /* into the set's text */
    int line;
    struct prefixes sessions, owners;
    enum { ADMIN_NONE, ADMIN_READ, ADMIN_WRITE } admin; /* write: and read */
    struct counter *counter; /* set when the set is installed */
    struct ruleset *set;
};

/* One version of the file, never changed once parsed; freed when its
 * last holder (the policy, a List in progress) lets go. */
struct ruleset {
    _Atomic size_t refs;
    char *text; /* the file's text, cut into fields */
    struct prefix *prefixes;
    size_t nprefixes, prefixes_cap;
    struct policy_rule *rules; /* sorted by identity, "*" among them */
    size_t n, cap;
    const struct policy_rule *star; /* the rule of "*", or NULL */
};

struct policy {
    const char *path; /* NULL: parsed from text, nothing to reload */
    pthread_mutex_t lock;
    struct ruleset *current;
    /* The counters of every identity any version named, sorted by
     * name, "*" among them (for identities without a rule, too). */
    struct counter **counters;
    size_t ncounters;
    struct counter *star;
};

static void set_put(struct ruleset *set)
{
    if (set == NULL || atomic_fetch_sub(&set->refs, 1) != 1)
        return;
    free(set->text);
    free(set->prefixes);
    free(set->rules);
    free(set);
}

_Static_assert(IDENTITY_MAX == 256, "parse_line's message says 256");

static bool identity_ok(const char *id)
{
    size_t n = strlen(id);
    if (n > IDENTITY_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)id[i];
        if (c < 0x21 || c > 0x7e || c == '"' || c == '\\' || c == '=')
            return false;
    }
    return true;
}

struct parse {
    const char *name; /* the file, in messages */
    int line;
    char *errmsg;
    size_t len;
};

/* Sets the message: what is wrong on the current line, and detail, from
 * the file, made safe to quote in a log line. */
static int fail(struct parse *ps, const char *what, const char *detail)
{
    char quoted[128];
    log_quotable(quoted, sizeof(quoted), detail, strlen(detail));
    return errmsg_fail(-1, ps->errmsg, ps->len, "%s: line %d: %s%s",
                       ps->name, ps->line, what, quoted);
}

/* array (*cap items of size bytes) with twice the room, or NULL when
 * out of memory (then array and *cap are as they were). */
static void *grow(void *array, size_t *cap, size_t size)
{
    size_t n = *cap > 0 ? 2 * *cap : 16;
    void *p = realloc(array, n * size);
    if (p != NULL)
        *cap = n;
    return p;
}

/* Parses value, the list of key= (sessions or owners, whose strings are
 * at most max bytes), into *out. */
static int parse_prefixes(struct parse *ps, struct ruleset *set,
                          const char *key, char *value, size_t max,
                          struct prefixes *out)
{
    char what[64];
    if (strcmp(value, "*") == 0) {
        out->all = true;
        return 0;
    }
    out->first = set->nprefixes;
    for (char *item = value, *next; item != NULL; item = next) {
        next = strchr(item, ',');
        if (next != NULL)
            *next++ = '\0';
        size_t n = strlen(item);
        snprintf(what, sizeof(what), "%s=: ", key);
        if (n == 0 || strcmp(item, "\"\"") == 0)
            return fail(ps, what, "an empty prefix (write * to allow "
                                  "every one)");
        if (strchr(item, '"') != NULL)
            return fail(ps, what, "prefixes are written without quotes");
        if (strchr(item, '*') != NULL)
            return fail(ps, what, "* stands alone, for every one; a "
                                  "prefix is matched literally");
        if (n > max)
            return fail(ps, what, "a prefix longer than the field may be");
        if (set->nprefixes == set->prefixes_cap) {
            struct prefix *p = grow(set->prefixes, &set->prefixes_cap,
                                    sizeof(*p));
            if (p == NULL)
                return fail(ps, "out of memory", "");
            set->prefixes = p;
        }
        set->prefixes[set->nprefixes++] = (struct prefix){item, n};
        out->n++;
    }
    return 0;
}

/* Parses one field of a rule: sessions=, owners= or admin=. seen says
 * which were given already (bits 1, 2, 4). */
static int parse_field(struct parse *ps, struct ruleset *set,
                       struct policy_rule *rule, char *f, unsigned *seen)
{
    static const char *const keys[] = {"sessions", "owners", "admin"};
    char *value = strchr(f, '=');
    if (value == NULL)
        return fail(ps, "want IDENTITY followed by sessions=, owners= or "
                        "admin= fields, not ", f);
    *value++ = '\0';
    unsigned k = 0;
    while (k < 3 && strcmp(f, keys[k]) != 0)
        k++;
    if (k == 3)
        return fail(ps, "unknown field (want sessions=, owners= or "
                        "admin=): ", f);
    if (*seen & (1u << k))
        return fail(ps, "a field given twice: ", f);
    *seen |= 1u << k;
    if (k == 0)
        return parse_prefixes(ps, set, "sessions", value, ENGINE_SESSION_MAX,
                              &rule->sessions);
    if (k == 1)
        return parse_prefixes(ps, set, "owners", value, ENGINE_OWNER_MAX,
                              &rule->owners);
    static const char *const rights[] = {"none", "read", "write"};
    for (unsigned r = 0; r < 3; r++)
        if (strcmp(value, rights[r]) == 0) {
            rule->admin = r;
            return 0;
        }
    return fail(ps, "admin= wants none, read or write", "");
}

/* Parses one line (cut out of set->text) into a new rule, if it holds
 * one. */
static int parse_line(struct parse *ps, struct ruleset *set, char *line)
{
    char *rest = line;
    char *id = readfile_field(&rest, BLANKS);
    if (id == NULL || id[0] == '#')
        return 0;
    if (strchr(id, '=') != NULL)
        return fail(ps, "a rule starts with the identity it is for, not ",
                    id);
    if (!identity_ok(id))
        return fail(ps, "an identity is 1 to 256 printable ASCII "
                        "characters other than \", \\ and =", "");
    if (set->n == set->cap) {
        struct policy_rule *r = grow(set->rules, &set->cap, sizeof(*r));
        if (r == NULL)
            return fail(ps, "out of memory", "");
        set->rules = r;
    }
    struct policy_rule *rule = &set->rules[set->n++];
    memset(rule, 0, sizeof(*rule));
    rule->identity = id;
    rule->line = ps->line;
    rule->set = set;
    unsigned seen = 0;
    for (char *f; (f = readfile_field(&rest, BLANKS)) != NULL &&
                  f[0] != '#';)
        if (parse_field(ps, set, rule, f, &seen) != 0)
            return -1;
    return 0;
}

static int by_identity(const void *a, const void *b)
{
    const struct policy_rule *x = a, *y = b;
    int c = strcmp(x->identity, y->identity);
    return c != 0 ? c : x->line - y->line;
}

/* Parses the text (text_len bytes) into a new rule set. */
static struct ruleset *parse_set(const char *name, const char *text,
                                 size_t text_len, char *errmsg, size_t len)
{
    if (text_len > POLICY_FILE_MAX) {
        snprintf(errmsg, len, "%s: larger than %d bytes", name,
                 POLICY_FILE_MAX);
        return NULL;
    }
    struct ruleset *set = calloc(1, sizeof(*set));
    if (set == NULL || (set->text = malloc(text_len + 1)) == NULL) {
        snprintf(errmsg, len, "out of memory");
        free(set);
        return NULL;
    }
    atomic_init(&set->refs, 1);
    memcpy(set->text, text, text_len);
    set->text[text_len] = '\0';
    struct parse ps = {name, 0, errmsg, len};
    int rc = 0;
    const char *nul = memchr(text, '\0', text_len);
    if (nul != NULL) {
        ps.line = 1;
        for (const char *c = text; c < nul; c++)
            ps.line += *c == '\n';
        rc = fail(&ps, "a NUL byte", "");
    }
    for (char *line = set->text, *next; line != NULL && rc == 0;
         line = next) {
        ps.line++;
        next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        rc = parse_line(&ps, set, line);
    }
    if (rc == 0 && set->n == 0) {
        snprintf(errmsg, len, "%s: no rule in the file (a policy without "
                              "rules would refuse every call)", name);
        rc = -1;
    }
    if (rc == 0) {
        qsort(set->rules, set->n, sizeof(*set->rules), by_identity);
        for (size_t i = 0; i < set->n; i++) {
            const struct policy_rule *r = &set->rules[i];
            if (i > 0 && strcmp(r->identity, r[-1].identity) == 0) {
                ps.line = r->line;
                char first[64];
                snprintf(first, sizeof(first), " (the first is on line %d)",
                         r[-1].line);
                rc = fail(&ps, "a second rule for the same identity", first);
                break;
            }
            if (strcmp(r->identity, "*") == 0)
                set->star = r;
        }
    }
    if (rc != 0) {
        set_put(set);
        return NULL;
    }
    return set;
}

static struct counter *counter_new(const char *name)
{
    size_t n = strlen(name);
    struct counter *c = calloc(1, sizeof(*c) + n + 1);
    if (c != NULL)
        memcpy(c->name, name, n + 1);
    return c;
}

/* Gives every rule of set its counter, adding those of identities p has
 * none for yet: a merge of two sorted lists, so that a reload of many
 * rules stays linear. Under p->lock. Returns 0, or -1 when out of memory
 * (then p's counters are as they were, and set's rules have none). */
static int attach_counters(struct policy *p, struct ruleset *set)
{
    struct counter **merged =
        malloc((p->ncounters + set->n) * sizeof(*merged));
    if (merged == NULL)
        return -1;
    size_t i = 0, k = 0, n = 0;
    while (i < p->ncounters || k < set->n) {
        struct policy_rule *r = k < set->n ? &set->rules[k] : NULL;
        int c = i == p->ncounters ? 1
                : r == NULL       ? -1
                                  : strcmp(p->counters[i]->name, r->identity);
        if (c < 0) {
            merged[n++] = p->counters[i++];
            continue;
        }
        if (c > 0 && (merged[n++] = counter_new(r->identity)) == NULL) {
            /* Undo: free the counters made here, keep the old list. */
            for (size_t m = 0, j = 0; m + 1 < n; m++) {
                if (j < p->ncounters && merged[m] == p->counters[j])
                    j++;
                else
                    free(merged[m]);
            }
            free(merged);
            for (size_t m = 0; m < set->n; m++)
                set->rules[m].counter = NULL;
            return -1;
        }
        if (c == 0)
            merged[n++] = p->counters[i++];
        r->counter = merged[n - 1];
        k++;
    }
    free(p->counters);
    p->counters = merged;
    p->ncounters = n;
    return 0;
}

/* Makes set the current one (taking it), or frees it when out of
 * memory. */
static int install(struct policy *p, struct ruleset *set, char *errmsg,
                   size_t len)
{
    pthread_mutex_lock(&p->lock);
    int rc = attach_counters(p, set);
    struct ruleset *old = rc == 0 ? p->current : set;
    if (rc == 0)
        p->current = set;
    pthread_mutex_unlock(&p->lock);
    set_put(old);
    if (rc != 0)
        snprintf(errmsg, len, "out of memory");
    return rc;
}

static struct policy *policy_new(const char *path, struct ruleset *set,
                                 char *errmsg, size_t len)
{
    struct policy *p = calloc(1, sizeof(*p));
    if (p != NULL && (p->counters = malloc(sizeof(*p->counters))) != NULL &&
        (p->star = counter_new("*")) != NULL) {
        p->counters[0] = p->star;
        p->ncounters = 1;
    } else {
        snprintf(errmsg, len, "out of memory");
        if (p != NULL)
            free(p->counters);
        free(p);
        set_put(set);
        return NULL;
    }
    p->path = path;
    pthread_mutex_init(&p->lock, NULL);
    if (install(p, set, errmsg, len) != 0) {
        policy_free(p);
        return NULL;
    }
    return p;
}

static struct ruleset *load_set(const char *path, char *errmsg, size_t len)
{
    size_t got = 0;
    char *text = readfile(path, POLICY_FILE_MAX, S_IWGRP | S_IWOTH,
                          "group or others write it", "go-w", &got, errmsg,
                          len);
    if (text == NULL)
        return NULL;
    struct ruleset *set = parse_set(path, text, got, errmsg, len);
    free(text);
    return set;
}

struct policy *policy_load(const char *path, char *errmsg, size_t len)
{
    struct ruleset *set = load_set(path, errmsg, len);
    return set != NULL ? policy_new(path, set, errmsg, len) : NULL;
}

struct policy *policy_parse(const char *name, const char *text,
                            size_t text_len, char *errmsg, size_t len)
{
    struct ruleset *set = parse_set(name, text, text_len, errmsg, len);
    return set != NULL ? policy_new(NULL, set, errmsg, len) : NULL;
}

int policy_reload(struct policy *p, char *errmsg, size_t len)
{
    if (p->path == NULL) {
        snprintf(errmsg, len, "no policy file to reload");
        return -1;
    }
    struct ruleset *set = load_set(p->path, errmsg, len);
    return set != NULL ? install(p, set, errmsg, len) : -1;
}

size_t policy_count(struct policy *p)
{
    pthread_mutex_lock(&p->lock);
    size_t n = p->current->n;
    pthread_mutex_unlock(&p->lock);
    return n;
}

/* The rule for identity in set: its own, or "*"'s, or NULL. */
static const struct policy_rule *find(const struct ruleset *set,
                                      const char *identity)
{
    size_t lo = 0, hi = set->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(identity, set->rules[mid].identity);
        if (c == 0)
            return &set->rules[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return set->star;
}

/* Whether s (n bytes) starts with one of list's prefixes. */
static bool match(const struct ruleset *set, const struct prefixes *list,
                  const char *s, size_t n)
{
    if (list->all)
        return true;
    for (size_t i = 0; i < list->n; i++) {
        const struct prefix *pre = &set->prefixes[list->first + i];
        if (pre->n <= n && memcmp(pre->p, s, pre->n) == 0)
            return true;
    }
    return false;
}

bool policy_visible(const struct policy_rule *rule, const char *session,
                    size_t n)
{
    return match(rule->set, &rule->sessions, session, n);
}

/* A List of req's prefix by rule's caller: when the prefix lies within
 * one of the caller's, every session it lists is the caller's. Otherwise
 * the caller sees only its own (req->list_rule), and when just one of
 * its prefixes lies within the one asked for, only that one is listed.
 * Returns whether req keeps rule. */
static bool scope_list(const struct policy_rule *rule, struct request *req)
{
    const struct ruleset *set = rule->set;
    if (match(set, &rule->sessions, req->session, req->session_len))
        return false;
    req->list_rule = rule;
    const struct prefix *only = NULL;
    size_t within = 0;
    for (size_t i = 0; i < rule->sessions.n; i++) {
        const struct prefix *pre = &set->prefixes[rule->sessions.first + i];
        if (pre->n >= req->session_len &&
            memcmp(pre->p, req->session, req->session_len) == 0) {
            only = pre;
            within++;
        }
    }
    if (within == 1) {
        req->session = only->p;
        req->session_len = only->n;
    }
    return true;
}

/* Why rule does not allow req, or NULL when it does; a List may keep
 * rule (*keep). */
static const char *refusal(const struct policy_rule *rule,
                           struct request *req, bool *keep)
{
    const struct ruleset *set = rule != NULL ? rule->set : NULL;
    if (rule == NULL)
        return "has no rule in the policy";
    if (request_is_admin(req->op) && rule->admin == ADMIN_NONE)
        return "may not call the admin service";
    if (req->op == OP_REVOKE && rule->admin != ADMIN_WRITE)
        return "may not revoke (admin=write)";
    if (req->op == OP_SNAPSHOT) /* every session's lease, unfiltered */
        return rule->sessions.all ? NULL
                                  : "may not snapshot (sessions=*)";
    if (req->op == OP_LIST) {
        *keep = scope_list(rule, req);
        return NULL;
    }
    if (req->op != OP_STATS &&
        !match(set, &rule->sessions, req->session, req->session_len))
        return "may not use this session_id";
    if (!request_is_admin(req->op) && req->op != OP_WATCH &&
        !match(set, &rule->owners, req->owner, req->owner_len))
        return "may not use this owner";
    return NULL;
}

bool policy_authorize(struct policy *p, struct request *req)
{
    pthread_mutex_lock(&p->lock);
    struct ruleset *set = p->current;
    atomic_fetch_add(&set->refs, 1);
    pthread_mutex_unlock(&p->lock);
    const struct policy_rule *rule = find(set, req->identity);
    bool keep = false;
    const char *why = refusal(rule, req, &keep);
    if (why != NULL) {
        atomic_fetch_add(&(rule != NULL ? rule->counter : p->star)->denied,
                         1);
        req->status = REPLY_DENIED;
        if (req->identity[0] != '\0')
            snprintf(req->reason, sizeof(req->reason),
                     "identity \"%.64s\" %s", req->identity, why);
        else
            snprintf(req->reason, sizeof(req->reason),
                     "a caller without an identity %s", why);
    }
    if (!keep)
        set_put(set);
    return why == NULL;
}

void policy_release(const struct policy_rule *rule)
{
    if (rule != NULL)
        set_put(rule->set);
}

void policy_write_metrics(struct policy *p, FILE *f)
{
    fprintf(f, "# HELP leased_permission_denied_total Calls refused by the "
               "policy, by the identity of the rule that refused them (* "
               "for identities without a rule of their own).\n"
               "# TYPE leased_permission_denied_total counter\n");
    pthread_mutex_lock(&p->lock);
    for (size_t i = 0; i < p->ncounters; i++)
        fprintf(f, "leased_permission_denied_total{identity=\"%s\"} %llu\n",
                p->counters[i]->name,
                (unsigned long long)atomic_load(&p->counters[i]->denied));
    pthread_mutex_unlock(&p->lock);
}

void policy_free(struct policy *p)
{
    if (p == NULL)
        return;
    set_put(p->current);
    for (size_t i = 0; i < p->ncounters; i++)
        free(p->counters[i]);
    free(p->counters);
    pthread_mutex_destroy(&p->lock);
    free(p);
}
