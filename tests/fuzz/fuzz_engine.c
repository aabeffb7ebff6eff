/*
 * Fuzz target: the lease engine (core/engine.h) against a
 * reference model written here from engine.h's rules.
 *
 * The input is a program over NSESSIONS sessions and NOWNERS owners (a
 * 512-byte session, a 256-byte owner and a session with an embedded NUL
 * among them). Each instruction is one byte, op = byte & 7 and arg =
 * byte >> 3, and Renew and Release take one more byte:
 *
 *   0 Acquire          arg picks session and owner
 *   1 Renew            next byte picks session, owner; arg the token:
 *   2 Release            right, older, newer, last acknowledged, 0, max;
 *                        arg 24..31: Revoke (the session; any owner)
 *   3 engine_collect   up to 64 entries (every bucket) or 1..4 of them
 *   4 clock +1..8 ns, or +250 ms steps up to 6 s
 *   5 clock +5 s steps up to 160 s
 *   6 finish pending changes: commit all in order, undo all in reverse
 *     order, undo the newest, or commit the oldest
 *   7 restart: finish every pending change (commit or undo), then a new
 *     engine (TTL 30 s, 10 s or 1 s) loaded from what was committed: the
 *     rows, the token floor and the restart quarantine
 *
 * Changes stay pending until an instruction finishes them, as in the
 * daemon's batches; the model applies committed ones to its own "store"
 * (checking each change's `before` against it, as storage does) and that
 * store is what a restart loads. After every step engine_check() runs
 * (engine_check_settled() too once every change is finished), and
 * every observable is compared with the model: each result's status,
 * token and expiry, each change's rows and durability, every session's
 * row and liveness, the entry count, the floor, the quarantine end and
 * the high-water mark; and every CENSUS_EVERY steps, a full census. An
 * input runs at most MAX_STEPS instructions.
 *
 * Apart from the model, the promises clients rely on are checked as
 * commits are acknowledged, whatever the model says: a takeover's token
 * is above every token acknowledged for its session before (across
 * collection and restarts), and no takeover lands before the expiry
 * acknowledged to the previous holder unless its release was.
 *
 * The engine hashes with a random key. Which entries a partial collect
 * (fewer than 64 slots, fewer buckets than the table has) reaches
 * depends on it; the model then follows the engine's choice and checks
 * that each entry collected was collectable. A full collect is exact.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "fuzz.h"

#define REQUIRE(cond)                                                      \
    do {                                                                   \
        if (!(cond))                                                       \
            abort();                                                       \
    } while (0)

#define NSESSIONS 4
#define NOWNERS 3
#define MAX_PENDING 64
/* Instructions run per input; the rest is ignored. Each step's checks
 * walk the whole hash table (1024 buckets), so a longer program costs
 * more than the depth it adds. */
#define MAX_STEPS 64
#define CENSUS_EVERY 8
#define FULL_COLLECT 64 /* 64 * 16 buckets: the whole initial table */
#define MS INT64_C(1000000)
#define S (1000 * MS)
#define T0 (INT64_C(1700000000) * S) /* a realistic wall clock */

struct name {
    const char *p;
    size_t len;
};

static struct name sessions[NSESSIONS], owners[NOWNERS];
static const int64_t ttls[] = {30 * S, 10 * S, 1 * S};

/* One entry as the model sees it. */
struct mentry {
    bool exists;
    int owner; /* index into owners[], or -1: released */
    uint64_t token;
    int64_t expiry_ns;
    bool held_at_start; /* loaded held: quarantined */
};

struct pending {
    int session;
    bool is_delete;
    bool takeover; /* a new holder: a new token */
    struct mentry before, after;
    int64_t at_ns;
};

static struct model {
    struct engine *e;
    int64_t now_ns, ttl_ns, quarantine_end_ns;
    int64_t quarantine_ttl_ns; /* stored: the longest TTL still live */
    uint64_t floor;            /* the engine's: collects raise it for good */
    uint64_t high_water;       /* committed or loaded */
    struct mentry cur[NSESSIONS]; /* pending changes included */

    /* Storage: committed changes only. */
    struct mentry store[NSESSIONS];
    uint64_t store_floor;

    /* What clients were told, by session. */
    struct acked {
        int owner; /* -1: none, or released */
        int64_t expiry_ns;
        uint64_t max_token;
    } acked[NSESSIONS];

    /* Pending changes, oldest at head. */
    size_t head, tail;
    struct pending pend[MAX_PENDING];
    struct engine_change chg[MAX_PENDING];
} m;

static void init_names(void)
{
    static char long_session[ENGINE_SESSION_MAX];
    static char long_owner[ENGINE_OWNER_MAX];
    if (sessions[0].p != NULL)
        return;
    memset(long_session, 's', sizeof(long_session));
    memset(long_owner, 'o', sizeof(long_owner));
    sessions[0] = (struct name){"a", 1};
    sessions[1] = (struct name){"b", 1};
    sessions[2] = (struct name){"a\0b", 3}; /* not "a" */
    sessions[3] = (struct name){long_session, sizeof(long_session)};
    owners[0] = (struct name){"A", 1};
    owners[1] = (struct name){"B", 1};
    owners[2] = (struct name){long_owner, sizeof(long_owner)};
}

static bool same_bytes(const char *p, size_t len, struct name n)
{
    return len == n.len && (len == 0 || memcmp(p, n.p, len) == 0);
}

static int session_of(const char *p, size_t len)
{
    for (int s = 0; s < NSESSIONS; s++) {
        if (same_bytes(p, len, sessions[s]))
            return s;
    }
    abort();
}

static bool is_live(const struct mentry *en)
{
    return en->exists && en->owner >= 0 &&
           (m.now_ns < en->expiry_ns ||
            (en->held_at_start && m.now_ns < m.quarantine_end_ns));
}

static bool collectable(const struct mentry *en)
{
    return en->exists &&
           (en->owner < 0 || en->expiry_ns < m.now_ns - m.ttl_ns);
}

/* A renewal's expiry: now + TTL, and strictly later than before. */
static int64_t extend(const struct mentry *en)
{
    int64_t expiry = m.now_ns + m.ttl_ns;
    return expiry > en->expiry_ns ? expiry : en->expiry_ns + 1;
}

/* A row from the engine against the model's entry of session s. */
static void require_row(const struct lease_row *row, int s,
                        const struct mentry *en)
{
    REQUIRE(same_bytes(row->session, row->session_len, sessions[s]));
    if (en->owner < 0)
        REQUIRE(row->owner_len == 0);
    else
        REQUIRE(same_bytes(row->owner, row->owner_len, owners[en->owner]));
    REQUIRE(row->token == en->token);
    REQUIRE(row->expiry_ns == en->expiry_ns);
}

static bool same_stored(const struct mentry *a, const struct mentry *b)
{
    if (!a->exists || !b->exists)
        return a->exists == b->exists;
    return a->owner == b->owner && a->token == b->token &&
           a->expiry_ns == b->expiry_ns;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

/* Compares everything the engine shows with the model; with census, a
 * full census too (a pass over every bucket, as costly as engine_check():
 * done every CENSUS_EVERY steps). */
static void check_all(bool census)
{
    engine_check(m.e);
    size_t count = 0, live = 0;
    for (int s = 0; s < NSESSIONS; s++) {
        const struct mentry *en = &m.cur[s];
        struct lease_row row;
        bool found = engine_get(m.e, sessions[s].p, sessions[s].len, &row);
        REQUIRE(found == en->exists);
        if (found)
            require_row(&row, s, en);
        REQUIRE(engine_live(m.e, sessions[s].p, sessions[s].len, m.now_ns) ==
                is_live(en));
        count += en->exists;
        live += is_live(en);
    }
    REQUIRE(engine_count(m.e) == count);
    REQUIRE(engine_floor(m.e) == m.floor);
    REQUIRE(engine_quarantine_end(m.e) == m.quarantine_end_ns);
    REQUIRE(engine_high_water(m.e) == max_u64(m.high_water, m.floor));
    if (census) {
        size_t counted = 0;
        /* Unbounded: one call completes a whole pass. */
        REQUIRE(engine_census(m.e, m.now_ns, SIZE_MAX, &counted));
        REQUIRE(counted == live);
    }
}

/* Storage's side of a commit: the change applies only over its `before`;
 * then the promises made to clients are checked. */
static void commit_model(const struct pending *p)
{
    int s = p->session;
    struct mentry *st = &m.store[s];
    struct acked *a = &m.acked[s];
    REQUIRE(same_stored(st, &p->before));
    if (p->is_delete) {
        st->exists = false;
        m.store_floor = max_u64(m.store_floor, p->before.token);
        return;
    }
    *st = p->after;
    m.high_water = max_u64(m.high_water, p->after.token);
    if (p->takeover) {
        REQUIRE(p->after.token > a->max_token);
        REQUIRE(a->owner < 0 || p->at_ns >= a->expiry_ns);
    } else {
        REQUIRE(p->after.token == p->before.token);
    }
    a->max_token = max_u64(a->max_token, p->after.token);
    a->owner = p->after.owner;
    a->expiry_ns = p->after.expiry_ns;
}

static void commit_oldest(void)
{
    REQUIRE(m.head < m.tail);
    commit_model(&m.pend[m.head]);
    engine_finish(m.e, &m.chg[m.head], true);
    m.head++;
}

static void undo_newest(void)
{
    REQUIRE(m.head < m.tail);
    m.tail--;
    const struct pending *p = &m.pend[m.tail];
    m.cur[p->session] = p->before;
    engine_finish(m.e, &m.chg[m.tail], false);
}

static void finish_all(bool committed)
{
    while (m.head < m.tail) {
        if (committed)
            commit_oldest();
        else
            undo_newest();
    }
    m.head = m.tail = 0;
    engine_check_settled(m.e); /* between batches: nothing unfinished */
}

/* Room for a few more pending changes: commits them when the list is
 * nearly full (a batch the daemon would have ended). */
static void make_room(void)
{
    if (m.tail + NSESSIONS > MAX_PENDING)
        finish_all(true);
    if (m.head == m.tail)
        m.head = m.tail = 0;
}

/* Records a PUT change the engine made for session s, checking its
 * rows. */
static void push_put(int s, const struct mentry *before,
                     const struct mentry *after, bool takeover)
{
    const struct engine_change *c = &m.chg[m.tail];
    REQUIRE(c->kind == ENGINE_PUT);
    REQUIRE(c->has_before == before->exists);
    REQUIRE(c->durable == (takeover || after->owner < 0));
    if (c->has_before)
        require_row(&c->before, s, before);
    require_row(&c->after, s, after);
    m.pend[m.tail] = (struct pending){
        .session = s, .takeover = takeover, .before = *before,
        .after = *after, .at_ns = m.now_ns};
    m.tail++;
    m.cur[s] = *after;
}

static void do_acquire(int s, int o)
{
    make_room();
    struct mentry before = m.cur[s], after = before;
    bool takeover = false;
    int want = ENGINE_OK;
    if (is_live(&before)) {
        if (before.owner != o)
            want = ENGINE_HELD;
        else
            after.expiry_ns = extend(&before);
    } else {
        takeover = true;
        after = (struct mentry){
            .exists = true, .owner = o,
            .token = (before.exists ? before.token : m.floor) + 1,
            .expiry_ns = m.now_ns + m.ttl_ns};
    }
    struct engine_grant g;
    int rc = engine_acquire(m.e, m.now_ns, sessions[s].p, sessions[s].len,
                            owners[o].p, owners[o].len, &g, &m.chg[m.tail]);
    REQUIRE(rc == want);
    if (rc != ENGINE_OK)
        return;
    REQUIRE(g.token == after.token && g.expiry_ns == after.expiry_ns);
    push_put(s, &before, &after, takeover);
}

/* The token a Renew or Release presents. */
static uint64_t pick_token(int s, unsigned kind)
{
    uint64_t cur = m.cur[s].exists ? m.cur[s].token : 1;
    switch (kind % 6) {
    case 0: return cur;
    case 1: return cur - 1; /* an earlier holder's */
    case 2: return cur + 1;
    case 3: return m.acked[s].max_token;
    case 4: return 0;
    default: return UINT64_MAX;
    }
}

static bool holds(int s, int o, uint64_t token)
{
    const struct mentry *en = &m.cur[s];
    return en->exists && en->owner >= 0 && en->owner == o &&
           en->token == token;
}

static void do_renew(int s, int o, uint64_t token)
{
    make_room();
    struct mentry before = m.cur[s], after = before;
    bool ok = holds(s, o, token);
    struct engine_grant g;
    int rc = engine_renew(m.e, m.now_ns, sessions[s].p, sessions[s].len,
                          owners[o].p, owners[o].len, token, &g,
                          &m.chg[m.tail]);
    REQUIRE(rc == (ok ? ENGINE_OK : ENGINE_LOST));
    if (!ok)
        return;
    after.expiry_ns = extend(&before);
    REQUIRE(g.token == after.token && g.expiry_ns == after.expiry_ns);
    REQUIRE(g.expiry_ns > before.expiry_ns);
    push_put(s, &before, &after, false);
}

static void do_release(int s, int o, uint64_t token)
{
    make_room();
    struct mentry before = m.cur[s], after = before;
    bool ok = holds(s, o, token);
    int rc = engine_release(m.e, sessions[s].p, sessions[s].len, owners[o].p,
                            owners[o].len, token, &m.chg[m.tail]);
    REQUIRE(rc == (ok ? ENGINE_OK : ENGINE_NOOP));
    if (!ok)
        return;
    after.owner = -1;
    after.held_at_start = false;
    push_put(s, &before, &after, false);
}

/* An operator's Revoke: any holder, with its token or token 0. */
static void do_revoke(int s, uint64_t token)
{
    make_room();
    struct mentry before = m.cur[s], after = before;
    bool held = before.exists && before.owner >= 0;
    bool ok = held && (token == 0 || token == before.token);
    int rc = engine_revoke(m.e, sessions[s].p, sessions[s].len, token,
                           &m.chg[m.tail]);
    REQUIRE(rc == (ok ? ENGINE_OK : held ? ENGINE_LOST : ENGINE_NOOP));
    if (!ok)
        return;
    after.owner = -1;
    after.held_at_start = false;
    push_put(s, &before, &after, false);
}

static void do_collect(size_t max)
{
    /* The daemon's gc timer: once the quarantine is over, only the
     * current TTL is one a restart must wait for. */
    if (m.now_ns >= m.quarantine_end_ns)
        m.quarantine_ttl_ns = m.ttl_ns;
    /* engine.h: no collect may take an entry a pending change points to
     * (a pending PUT's entry is its session's current one). */
    for (size_t i = m.head; i < m.tail; i++) {
        if (!m.pend[i].is_delete && collectable(&m.cur[m.pend[i].session]))
            return;
    }
    make_room();
    size_t expect = 0;
    for (int s = 0; s < NSESSIONS; s++)
        expect += collectable(&m.cur[s]);
    if (m.now_ns < m.quarantine_end_ns)
        expect = 0;
    struct engine_change out[FULL_COLLECT];
    size_t n = engine_collect(m.e, m.now_ns, out, max);
    REQUIRE(n <= max && n <= expect);
    if (max == FULL_COLLECT)
        REQUIRE(n == expect);
    for (size_t i = 0; i < n; i++) {
        const struct engine_change *c = &out[i];
        REQUIRE(c->kind == ENGINE_DELETE && c->has_before);
        int s = session_of(c->before.session, c->before.session_len);
        struct mentry *en = &m.cur[s];
        REQUIRE(collectable(en)); /* and not collected twice */
        require_row(&c->before, s, en);
        m.pend[m.tail] = (struct pending){
            .session = s, .is_delete = true, .before = *en,
            .at_ns = m.now_ns};
        m.chg[m.tail++] = *c;
        en->exists = false;
        m.floor = max_u64(m.floor, c->before.token);
    }
}

static void do_finish(unsigned how)
{
    switch (how % 4) {
    case 0: finish_all(true); break;
    case 1: finish_all(false); break;
    case 2: if (m.head < m.tail) undo_newest(); break;
    default: if (m.head < m.tail) commit_oldest(); break;
    }
    if (m.head == m.tail)
        m.head = m.tail = 0;
}

/* A new engine loaded from storage, as the daemon starts one. */
static void start_engine(int64_t ttl_ns)
{
    m.ttl_ns = ttl_ns;
    if (m.quarantine_ttl_ns < ttl_ns)
        m.quarantine_ttl_ns = ttl_ns;
    static const struct siphash_key key = {1, 2}; /* a run replays */
    m.e = engine_create(ttl_ns, m.now_ns, &key);
    REQUIRE(m.e != NULL);
    m.high_water = 0;
    for (int s = 0; s < NSESSIONS; s++) {
        const struct mentry *st = &m.store[s];
        m.cur[s] = *st;
        m.cur[s].held_at_start = st->exists && st->owner >= 0;
        if (!st->exists)
            continue;
        struct lease_row row = {
            sessions[s].p, sessions[s].len,
            st->owner >= 0 ? owners[st->owner].p : "",
            st->owner >= 0 ? owners[st->owner].len : 0,
            st->token, st->expiry_ns};
        REQUIRE(engine_load(m.e, &row) == ENGINE_OK);
        m.high_water = max_u64(m.high_water, st->token);
    }
    engine_raise_floor(m.e, m.store_floor);
    m.floor = m.store_floor;
    engine_extend_quarantine(m.e, m.now_ns + m.quarantine_ttl_ns);
    m.quarantine_end_ns = m.now_ns + m.quarantine_ttl_ns;
}

static void do_restart(unsigned arg)
{
    finish_all(arg & 1);
    engine_destroy(m.e);
    m.now_ns += (int64_t)(arg >> 3) * S; /* the restart takes time */
    start_engine(ttls[(arg >> 1) % 3]);
}

/* Which session and owner an instruction's byte names. */
static int session_arg(unsigned v)
{
    return (int)(v % NSESSIONS);
}

static int owner_arg(unsigned v)
{
    return (int)(v / NSESSIONS % NOWNERS);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    init_names();
    memset(&m, 0, sizeof(m));
    for (int s = 0; s < NSESSIONS; s++)
        m.acked[s].owner = -1;
    m.now_ns = T0;
    start_engine(ttls[0]);
    check_all(true);
    for (size_t i = 0, step = 1; i < size && step <= MAX_STEPS; step++) {
        unsigned op = data[i] & 7, arg = data[i] >> 3;
        i++;
        switch (op) {
        case 0:
            do_acquire(session_arg(arg), owner_arg(arg));
            break;
        case 1:
        case 2: {
            if (i == size)
                break;
            int s = session_arg(data[i]), o = owner_arg(data[i]);
            i++;
            if (op == 1)
                do_renew(s, o, pick_token(s, arg));
            else if (arg < 24)
                do_release(s, o, pick_token(s, arg));
            else
                do_revoke(s, pick_token(s, arg));
            break;
        }
        case 3:
            do_collect(arg < 16 ? FULL_COLLECT : 1 + arg % 4);
            break;
        case 4:
            m.now_ns += arg < 8 ? (int64_t)arg + 1
                                : (int64_t)(arg - 7) * 250 * MS;
            break;
        case 5:
            m.now_ns += (int64_t)(arg + 1) * 5 * S;
            break;
        case 6:
            do_finish(arg);
            break;
        default:
            do_restart(arg);
            break;
        }
        check_all(step % CENSUS_EVERY == 0);
    }
    finish_all(true);
    check_all(true);
    engine_destroy(m.e);
    m.e = NULL;
    return 0;
}
