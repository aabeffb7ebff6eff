/*
 * The lease engine (see engine.h for the contract and invariants). What
 * Acquire, Renew and Release decide is rules.c's; the engine finds the
 * entry, asks rules_decide(), and applies the answer as a change.
 *
 * Entries live in a chained hash table keyed by session id (SipHash with
 * the caller's key, random in production). An entry is in one of three states:
 *
 *   held      owner_len > 0 and (expiry_ns > now, or quarantined)
 *   expired   owner_len > 0, expiry_ns <= now, not quarantined
 *   released  owner_len == 0
 *
 * Transitions and who makes them:
 *   (none)   -> held      Acquire, token = floor + 1
 *   held     -> held      Acquire by the same owner, Renew (token kept)
 *   expired  -> held      Acquire by anyone (token + 1), Renew by the
 *                         owner with the token (reclaim, token kept)
 *   released -> held      Acquire (token + 1)
 *   held, expired -> released   Release with matching owner and token
 *   released, long-expired -> (none)   engine_collect, floor >= token
 *
 * engine_check(), at the end of this file, lists the invariants of the
 * table and its entries, and holds the engine to them.
 */
#include "engine.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules.h"
#include "siphash.h"

struct engine_entry {
    struct engine_entry *next; /* hash chain */
    uint64_t hash;
    char *owner;               /* owned; NULL when released */
    uint32_t owner_len;
    uint32_t session_len;
    uint64_t token;
    int64_t expiry_ns;
    bool held_at_start;        /* loaded held: quarantined until q_end */
    bool told;                 /* its expiry was told (engine_expiries) */
    uint64_t stamp;            /* engine_stamp: the caller's, or 0 */
    char session[];
};

struct engine {
    struct engine_entry **buckets;
    size_t nbuckets; /* a power of two */
    size_t count;
    size_t gc_cursor; /* next bucket engine_collect looks at */
    size_t census_cursor, census_live; /* engine_census's pass so far */
    size_t expiry_cursor; /* next bucket engine_expiries looks at */
    uint64_t high_water; /* the highest token committed or loaded */
    int64_t ttl_ns;
    int64_t quarantine_end_ns;
    uint64_t floor;
    uint64_t collect_stamp; /* engine_stamp of the last collection */
    size_t unfinished; /* changes made and not yet engine_finish()ed */
    struct siphash_key hash_key;
};

#define INITIAL_BUCKETS 1024
#define GC_SCAN_PER_MAX 16 /* buckets engine_collect looks at, per max */

/* Keyed, so that clients choosing session ids cannot pile them into one
 * chain and slow the loop down for everyone. */
static uint64_t hash_bytes(const struct engine *e, const char *p, size_t n)
{
    return siphash24(&e->hash_key, p, n);
}

struct engine *engine_create(int64_t ttl_ns, int64_t start_ns,
                             const struct siphash_key *hash_key)
{
    assert(ttl_ns > 0);
    struct engine *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return NULL;
    e->buckets = calloc(INITIAL_BUCKETS, sizeof(*e->buckets));
    if (e->buckets == NULL) {
        free(e);
        return NULL;
    }
    e->nbuckets = INITIAL_BUCKETS;
    e->hash_key = *hash_key;
    e->ttl_ns = ttl_ns;
    e->quarantine_end_ns = start_ns + ttl_ns;
    return e;
}

static void entry_free(struct engine_entry *en)
{
    if (en == NULL)
        return;
    free(en->owner);
    free(en);
}

void engine_destroy(struct engine *e)
{
    if (e == NULL)
        return;
    for (size_t i = 0; i < e->nbuckets; i++) {
        struct engine_entry *en = e->buckets[i];
        while (en != NULL) {
            struct engine_entry *next = en->next;
            entry_free(en);
            en = next;
        }
    }
    free(e->buckets);
    free(e);
}

static struct engine_entry *find(const struct engine *e, const char *session,
                                 size_t len, uint64_t hash)
{
    struct engine_entry *en = e->buckets[hash & (e->nbuckets - 1)];
    for (; en != NULL; en = en->next) {
        if (en->hash == hash && en->session_len == len &&
            memcmp(en->session, session, len) == 0)
            return en;
    }
    return NULL;
}

/* Doubles the table when it is fuller than one entry per bucket. A failed
 * allocation only leaves the chains longer. */
static void maybe_grow(struct engine *e)
{
    if (e->count < e->nbuckets)
        return;
    size_t n = e->nbuckets * 2;
    struct engine_entry **b = calloc(n, sizeof(*b));
    if (b == NULL)
        return;
    for (size_t i = 0; i < e->nbuckets; i++) {
        struct engine_entry *en = e->buckets[i];
        while (en != NULL) {
            struct engine_entry *next = en->next;
            en->next = b[en->hash & (n - 1)];
            b[en->hash & (n - 1)] = en;
            en = next;
        }
    }
    free(e->buckets);
    e->buckets = b;
    e->nbuckets = n;
    e->census_cursor = e->census_live = 0; /* the pass starts again */
}

static void insert(struct engine *e, struct engine_entry *en)
{
    maybe_grow(e);
    struct engine_entry **head = &e->buckets[en->hash & (e->nbuckets - 1)];
    en->next = *head;
    *head = en;
    e->count++;
}

static void unlink_entry(struct engine *e, struct engine_entry *en)
{
    struct engine_entry **p = &e->buckets[en->hash & (e->nbuckets - 1)];
    while (*p != en) {
        assert(*p != NULL);
        p = &(*p)->next;
    }
    *p = en->next;
    en->next = NULL;
    e->count--;
}

static struct engine_entry *entry_new(const char *session, size_t len,
                                      uint64_t hash)
{
    struct engine_entry *en = calloc(1, sizeof(*en) + len);
    if (en == NULL)
        return NULL;
    en->hash = hash;
    en->session_len = (uint32_t)len;
    memcpy(en->session, session, len);
    return en;
}

static char *dup_bytes(const char *p, size_t n)
{
    char *s = malloc(n + 1);
    if (s == NULL)
        return NULL;
    memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

static void row_of(const struct engine_entry *en, struct lease_row *row)
{
    row->session = en->session;
    row->session_len = en->session_len;
    row->owner = en->owner;
    row->owner_len = en->owner_len;
    row->token = en->token;
    row->expiry_ns = en->expiry_ns;
}

/* The rules' view of en at now_ns; with no entry, a released row at the
 * floor (so that the first takeover gets floor + 1). */
static struct rules_row rules_row_of(const struct engine *e,
                                     const struct engine_entry *en,
                                     int64_t now_ns)
{
    if (en == NULL)
        return (struct rules_row){.token = e->floor};
    return (struct rules_row){
        .owner = en->owner,
        .owner_len = en->owner_len,
        .token = en->token,
        .expiry_ns = en->expiry_ns,
        .quarantined = en->held_at_start && now_ns < e->quarantine_end_ns,
    };
}

static bool is_live(const struct engine *e, const struct engine_entry *en,
                    int64_t now_ns)
{
    struct rules_row row = rules_row_of(e, en, now_ns);
    return rules_live(&row, now_ns);
}

/* Starts a change of `en`: records the row as it is now. */
static void change_begin(struct engine_change *chg, struct engine_entry *en,
                         bool has_before)
{
    memset(chg, 0, sizeof(*chg));
    chg->kind = ENGINE_PUT;
    chg->entry = en;
    chg->has_before = has_before;
    if (has_before)
        row_of(en, &chg->before);
    chg->old_held_at_start = en->held_at_start;
    chg->was_told = en->told;
}

enum engine_result engine_load(struct engine *e, const struct lease_row *row)
{
    assert(row->session_len > 0 && row->session_len <= ENGINE_SESSION_MAX);
    uint64_t hash = hash_bytes(e, row->session, row->session_len);
    assert(find(e, row->session, row->session_len, hash) == NULL);
    struct engine_entry *en = entry_new(row->session, row->session_len, hash);
    if (en == NULL)
        return ENGINE_ENOMEM;
    if (row->owner_len > 0) {
        en->owner = dup_bytes(row->owner, row->owner_len);
        if (en->owner == NULL) {
            free(en);
            return ENGINE_ENOMEM;
        }
        en->owner_len = (uint32_t)row->owner_len;
        en->held_at_start = true;
    }
    en->token = row->token;
    en->expiry_ns = row->expiry_ns;
    if (row->token > e->high_water)
        e->high_water = row->token;
    insert(e, en);
    return ENGINE_OK;
}

uint64_t engine_high_water(const struct engine *e)
{
    return e->high_water > e->floor ? e->high_water : e->floor;
}

bool engine_live(const struct engine *e, const char *session,
                 size_t session_len, int64_t now_ns)
{
    const struct engine_entry *en =
        find(e, session, session_len, hash_bytes(e, session, session_len));
    return en != NULL && is_live(e, en, now_ns);
}

void engine_extend_quarantine(struct engine *e, int64_t end_ns)
{
    if (end_ns > e->quarantine_end_ns)
        e->quarantine_end_ns = end_ns;
}

int64_t engine_quarantine_end(const struct engine *e)
{
    return e->quarantine_end_ns;
}

void engine_raise_floor(struct engine *e, uint64_t floor)
{
    if (floor > e->floor)
        e->floor = floor;
}

uint64_t engine_floor(const struct engine *e)
{
    return e->floor;
}

size_t engine_count(const struct engine *e)
{
    return e->count;
}

/* Makes the change rules_decide() decided (*out, RULES_OK) to en (NULL:
 * no entry yet, so a takeover creates one for session). */
static enum engine_result apply(struct engine *e, struct engine_entry *en,
                                const char *session, size_t session_len,
                                uint64_t hash,
                                const struct rules_outcome *out,
                                struct engine_change *chg)
{
    /* Everything that can fail first: on ENGINE_ENOMEM nothing changed. */
    char *copy = NULL;
    if (out->takeover) {
        copy = dup_bytes(out->after.owner, out->after.owner_len);
        if (copy == NULL)
            return ENGINE_ENOMEM;
    }
    bool created = en == NULL;
    if (created) {
        assert(out->takeover);
        en = entry_new(session, session_len, hash);
        if (en == NULL) {
            free(copy);
            return ENGINE_ENOMEM;
        }
    }
    change_begin(chg, en, !created);
    if (out->durable) { /* a new owner, or none */
        chg->durable = true;
        chg->old_owner = en->owner; /* taken: the change owns it now */
        en->owner = copy;
        en->owner_len = (uint32_t)out->after.owner_len;
        en->held_at_start = false;
    }
    en->token = out->after.token;
    en->expiry_ns = out->after.expiry_ns;
    en->told = false; /* a new expiry, or none: not told */
    if (created)
        insert(e, en);
    row_of(en, &chg->after);
    e->unfinished++;
    return ENGINE_OK;
}

/* Asks the rules about op on session at now_ns, and applies what they
 * decided. Release and Revoke look at no clock (now_ns 0), so neither
 * expiry nor quarantine matter to them. */
static enum engine_result decide(struct engine *e, enum rules_op op,
                                 int64_t now_ns, const char *session,
                                 size_t session_len,
                                 const struct rules_request *req,
                                 struct engine_grant *grant,
                                 struct engine_change *chg)
{
    uint64_t hash = hash_bytes(e, session, session_len);
    struct engine_entry *en = find(e, session, session_len, hash);
    struct rules_row row = rules_row_of(e, en, now_ns);
    struct rules_outcome out;
    enum rules_code code =
        rules_decide(op, &row, req, now_ns, e->ttl_ns, &out);
    if (code != RULES_OK)
        return (enum engine_result)code;
    enum engine_result rc = apply(e, en, session, session_len, hash, &out,
                                  chg);
    if (rc == ENGINE_OK && grant != NULL)
        *grant = (struct engine_grant){out.after.token, out.after.expiry_ns};
    return rc;
}

enum engine_result engine_acquire(struct engine *e, int64_t now_ns,
                                  const char *session, size_t session_len,
                                  const char *owner, size_t owner_len,
                                  struct engine_grant *grant,
                                  struct engine_change *chg)
{
    assert(session_len > 0 && owner_len > 0);
    struct rules_request req = {owner, owner_len, 0};
    return decide(e, RULES_ACQUIRE, now_ns, session, session_len, &req,
                  grant, chg);
}

enum engine_result engine_renew(struct engine *e, int64_t now_ns,
                                const char *session, size_t session_len,
                                const char *owner, size_t owner_len,
                                uint64_t token, struct engine_grant *grant,
                                struct engine_change *chg)
{
    struct rules_request req = {owner, owner_len, token};
    return decide(e, RULES_RENEW, now_ns, session, session_len, &req, grant,
                  chg);
}

enum engine_result engine_release(struct engine *e, const char *session,
                                  size_t session_len, const char *owner,
                                  size_t owner_len, uint64_t token,
                                  struct engine_change *chg)
{
    struct rules_request req = {owner, owner_len, token};
    return decide(e, RULES_RELEASE, 0, session, session_len, &req, NULL,
                  chg);
}

enum engine_result engine_revoke(struct engine *e, const char *session,
                                 size_t session_len, uint64_t token,
                                 struct engine_change *chg)
{
    struct rules_request req = {NULL, 0, token};
    return decide(e, RULES_REVOKE, 0, session, session_len, &req, NULL, chg);
}

static bool collectable(const struct engine *e, const struct engine_entry *en,
                        int64_t now_ns)
{
    if (en->owner_len == 0)
        return true;
    /* Only called after the quarantine ended, so held_at_start no longer
     * matters. */
    return en->expiry_ns < now_ns - e->ttl_ns;
}

size_t engine_collect(struct engine *e, int64_t now_ns,
                      struct engine_change *chgs, size_t max)
{
    if (now_ns < e->quarantine_end_ns || max == 0)
        return 0;
    size_t n = 0;
    /* Look at a bounded number of buckets per call, so that one call
     * never stalls the loop however many entries there are. */
    size_t budget = max * GC_SCAN_PER_MAX;
    for (size_t seen = 0; seen < e->nbuckets && seen < budget && n < max;
         seen++) {
        size_t b = e->gc_cursor++ & (e->nbuckets - 1);
        struct engine_entry *en = e->buckets[b];
        while (en != NULL && n < max) {
            struct engine_entry *next = en->next;
            if (collectable(e, en, now_ns)) {
                struct engine_change *chg = &chgs[n++];
                change_begin(chg, en, true);
                chg->kind = ENGINE_DELETE;
                unlink_entry(e, en);
                engine_raise_floor(e, en->token);
                e->unfinished++;
            }
            en = next;
        }
    }
    return n;
}

/* The live leases of bucket i at now_ns. */
static size_t bucket_live(const struct engine *e, size_t i, int64_t now_ns)
{
    size_t live = 0;
    for (const struct engine_entry *en = e->buckets[i]; en != NULL;
         en = en->next)
        live += is_live(e, en, now_ns);
    return live;
}

bool engine_census(struct engine *e, int64_t now_ns, size_t max,
                   size_t *live)
{
    for (size_t seen = 0; seen < max; seen++) {
        if (e->census_cursor == e->nbuckets) {
            *live = e->census_live;
            e->census_cursor = e->census_live = 0;
            return true;
        }
        e->census_live += bucket_live(e, e->census_cursor++, now_ns);
    }
    return false;
}

size_t engine_expiries(struct engine *e, int64_t now_ns, size_t parts,
                       struct lease_row *out, size_t max)
{
    size_t n = 0, max_buckets = e->nbuckets / parts + 1;
    for (size_t seen = 0; seen < max_buckets && n < max; seen++) {
        if (e->expiry_cursor >= e->nbuckets)
            e->expiry_cursor = 0;
        for (struct engine_entry *en = e->buckets[e->expiry_cursor];
             en != NULL && n < max; en = en->next)
            if (en->owner_len > 0 && !en->told && !is_live(e, en, now_ns)) {
                en->told = true;
                row_of(en, &out[n++]);
            }
        /* A bucket is done once all of it was looked at. */
        if (n < max)
            e->expiry_cursor++;
    }
    return n;
}

bool engine_told(const struct engine *e, const char *session,
                 size_t session_len)
{
    const struct engine_entry *en =
        find(e, session, session_len, hash_bytes(e, session, session_len));
    return en != NULL && en->told;
}

void engine_set_told(struct engine *e, const char *session, size_t session_len,
                     uint64_t token, bool told)
{
    struct engine_entry *en =
        find(e, session, session_len, hash_bytes(e, session, session_len));
    if (en != NULL && en->owner_len > 0 && en->token == token)
        en->told = told;
}

size_t engine_count_live(const struct engine *e, int64_t now_ns)
{
    size_t live = 0;
    for (size_t i = 0; i < e->nbuckets; i++)
        live += bucket_live(e, i, now_ns);
    return live;
}

void engine_finish(struct engine *e, struct engine_change *chg,
                   bool committed)
{
    struct engine_entry *en = chg->entry;
    assert(e->unfinished > 0 && en != NULL); /* finished once, not twice */
    e->unfinished--;
    if (committed) {
        if (chg->kind == ENGINE_PUT && chg->after.token > e->high_water)
            e->high_water = chg->after.token;
        if (chg->kind == ENGINE_DELETE)
            entry_free(en);
        else
            free(chg->old_owner);
    } else if (chg->kind == ENGINE_DELETE) {
        insert(e, en); /* the raised floor stays: only ever safe */
    } else if (!chg->has_before) {
        unlink_entry(e, en);
        entry_free(en);
    } else {
        if (en->owner != chg->before.owner) { /* the owner was replaced */
            free(en->owner);
            en->owner = chg->old_owner;
        }
        en->owner_len = (uint32_t)chg->before.owner_len;
        en->token = chg->before.token;
        en->expiry_ns = chg->before.expiry_ns;
        en->held_at_start = chg->old_held_at_start;
        en->told = chg->was_told;
    }
    memset(chg, 0, sizeof(*chg));
}

void engine_stamp(struct engine *e, struct engine_change *chg,
                  uint64_t stamp)
{
    /* Not undone by engine_finish(…, false): a stamp too new only makes
     * an answer wait for one more sync. */
    chg->entry->stamp = stamp;
    if (chg->kind == ENGINE_DELETE && stamp > e->collect_stamp)
        e->collect_stamp = stamp;
}

uint64_t engine_stamp_of(const struct engine *e, const char *session,
                         size_t session_len)
{
    const struct engine_entry *en =
        find(e, session, session_len, hash_bytes(e, session, session_len));
    return en != NULL ? en->stamp : e->collect_stamp;
}

uint64_t engine_hash(const struct engine *e, const char *session,
                     size_t session_len)
{
    return hash_bytes(e, session, session_len);
}

bool engine_get(const struct engine *e, const char *session,
                size_t session_len, struct lease_row *row)
{
    struct engine_entry *en =
        find(e, session, session_len, hash_bytes(e, session, session_len));
    if (en == NULL)
        return false;
    row_of(en, row);
    return true;
}

/* engine_check()'s failure: names the invariant, then aborts. */
static void check_failed(const char *invariant, int line)
{
    fprintf(stderr, "engine_check: (%s) fails (engine.c:%d)\n", invariant,
            line);
    abort();
}

#define REQUIRE(cond, invariant)                                           \
    do {                                                                   \
        if (!(cond))                                                       \
            check_failed(invariant, __LINE__);                             \
    } while (0)

/*
 * The invariants engine_check() holds the engine to. At every moment,
 * unfinished changes or not:
 *  (a) the table has a power of two buckets, at least INITIAL_BUCKETS:
 *      it starts there and only doubles; `hash & (nbuckets - 1)` relies
 *      on it;
 *  (b) the hash chains are consistent: every entry is in the bucket its
 *      hash names, and its hash is its session's keyed hash, so find()
 *      reaches it;
 *  (c) a session has one entry: find() on an entry's session returns that
 *      entry and no earlier one of its chain;
 *  (d) count (engine_count) equals the number of entries in the chains;
 *  (e) session ids are 1..ENGINE_SESSION_MAX bytes, owners at most
 *      ENGINE_OWNER_MAX;
 *  (f) owner_len == 0 rows are tombstones (released), and only they have
 *      no owner string: owner_len == 0 exactly when owner == NULL;
 *  (g) only a held entry is quarantined: held_at_start is set by
 *      engine_load for rows with an owner and cleared by every change of
 *      owner, a release included;
 *  (h) a held entry's token is at least 1: a takeover gives floor + 1 or
 *      the previous token + 1, a renewal keeps it;
 *  (i) engine_census's pass is within the table: census_cursor <=
 *      nbuckets (maybe_grow restarts it).
 * Between batches, when no change is unfinished:
 *  (j) no entry's token is above the high-water mark (the raw one, not
 *      raised by the floor): a token enters the engine by engine_load,
 *      which raises the mark, or by a change whose commit raises it, and
 *      an undone change puts back the token it had. While a takeover is
 *      unfinished its token is the mark + 1 until it commits, so (j) is
 *      not checked then.
 * What it does not check, for want of the history: that tokens and the
 * floor only rise (invariants (2) and (3) of engine.h; tests and the fuzz
 * target compare them with a model), and the stamps.
 */
void engine_check(const struct engine *e)
{
    REQUIRE(e->ttl_ns > 0, "ttl > 0");
    REQUIRE(e->nbuckets >= INITIAL_BUCKETS &&
                (e->nbuckets & (e->nbuckets - 1)) == 0,
            "a: power of two buckets");
    REQUIRE(e->census_cursor <= e->nbuckets, "i: census within the table");
    size_t count = 0;
    for (size_t i = 0; i < e->nbuckets; i++) {
        for (const struct engine_entry *en = e->buckets[i]; en != NULL;
             en = en->next) {
            count++;
            REQUIRE(en->session_len > 0 &&
                        en->session_len <= ENGINE_SESSION_MAX &&
                        en->owner_len <= ENGINE_OWNER_MAX,
                    "e: lengths");
            REQUIRE((en->hash & (e->nbuckets - 1)) == i &&
                        en->hash ==
                            hash_bytes(e, en->session, en->session_len),
                    "b: in the bucket of its session's hash");
            REQUIRE(find(e, en->session, en->session_len, en->hash) == en,
                    "c: one entry per session");
            REQUIRE((en->owner_len > 0) == (en->owner != NULL),
                    "f: tombstones, and only they, have no owner");
            REQUIRE(!en->held_at_start || en->owner_len > 0,
                    "g: only a held entry is quarantined");
            REQUIRE(en->owner_len == 0 || en->token > 0,
                    "h: a held entry's token is at least 1");
            REQUIRE(e->unfinished > 0 || en->token <= e->high_water,
                    "j: between batches, no token above the high water");
        }
    }
    REQUIRE(count == e->count, "d: count matches the chains");
}

void engine_check_settled(const struct engine *e)
{
    REQUIRE(e->unfinished == 0, "no change unfinished between batches");
    engine_check(e);
}
