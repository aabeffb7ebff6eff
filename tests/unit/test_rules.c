/*
 * The lease rules (core/rules.h), decision by decision, over an explicit
 * clock: "A holds token 3 until t=30; at t=31 B acquires -> token 4,
 * expiry t=61"; and tests/rules_cases.txt, the table of cases the SQL
 * statement of the rules (storage/pgsql.c) is held to as well. The
 * engine's and the file-lock backend's own tests, the
 * conformance suite and fuzz_engine check the backends that apply them.
 */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "rules.h"
#include "rules_cases.h"

#define S INT64_C(1000000000)
#define TTL (30 * S)

/* A stored row: owner (a C string; "" released), token, expiry in s. */
static struct rules_row row(const char *owner, uint64_t token, int64_t exp)
{
    return (struct rules_row){owner, strlen(owner), token, exp * S, false};
}

static struct rules_request req(const char *owner, uint64_t token)
{
    return (struct rules_request){owner, strlen(owner), token};
}

/* Decides op at t seconds; *out is the outcome. */
static int decide(enum rules_op op, const struct rules_row *r,
                  const char *owner, uint64_t token, int64_t t,
                  struct rules_outcome *out)
{
    struct rules_request q = req(owner, token);
    return rules_decide(op, r, &q, t * S, TTL, out);
}

static bool owner_is(const struct rules_row *r, const char *owner)
{
    return r->owner_len == strlen(owner) &&
           (r->owner_len == 0 || memcmp(r->owner, owner, r->owner_len) == 0);
}

/* A refusal or no-op leaves the outcome empty. */
static void check_empty(const struct rules_outcome *o)
{
    CHECK(!o->takeover && !o->durable);
    CHECK(o->after.owner == NULL && o->after.owner_len == 0);
    CHECK_EQ_U64(o->after.token, 0);
    CHECK_EQ_I64(o->after.expiry_ns, 0);
}

TEST(acquire_free_takes_over_with_the_first_token)
{
    struct rules_outcome o;
    /* No row at all: token 1, expiry now + TTL. */
    CHECK_EQ_I64(decide(RULES_ACQUIRE, NULL, "A", 0, 5, &o), RULES_OK);
    CHECK(o.takeover && o.durable);
    CHECK(owner_is(&o.after, "A"));
    CHECK_EQ_U64(o.after.token, 1);
    CHECK_EQ_I64(o.after.expiry_ns, 5 * S + TTL);
    CHECK(!o.after.quarantined);
    /* A store with a token floor passes a released row at the floor. */
    struct rules_row floor = row("", 41, 0);
    CHECK_EQ_I64(decide(RULES_ACQUIRE, &floor, "A", 0, 5, &o), RULES_OK);
    CHECK(o.takeover);
    CHECK_EQ_U64(o.after.token, 42);
}

TEST(acquire_own_live_lease_keeps_token_and_extends)
{
    struct rules_outcome o;
    struct rules_row r = row("A", 3, 30); /* granted at t=0 */
    CHECK_EQ_I64(decide(RULES_ACQUIRE, &r, "A", 0, 10, &o), RULES_OK);
    CHECK(!o.takeover && !o.durable);
    CHECK(owner_is(&o.after, "A"));
    CHECK(o.after.owner == r.owner); /* the stored one, borrowed */
    CHECK_EQ_U64(o.after.token, 3);
    CHECK_EQ_I64(o.after.expiry_ns, 10 * S + TTL);
    /* Already past now + TTL (extended at this instant before): strictly
     * later all the same. */
    r.expiry_ns = 10 * S + TTL;
    CHECK_EQ_I64(decide(RULES_ACQUIRE, &r, "A", 0, 10, &o), RULES_OK);
    CHECK_EQ_I64(o.after.expiry_ns, 10 * S + TTL + 1);
}

TEST(acquire_expired_lease_takes_over)
{
    struct rules_outcome o;
    struct rules_row r = row("A", 3, 30);
    /* Expiry is exclusive: at t=30 it is over. */
    CHECK_EQ_I64(decide(RULES_ACQUIRE, &r, "B", 0, 30, &o), RULES_OK);
    CHECK(o.takeover && o.durable);
    CHECK(owner_is(&o.after, "B"));
    CHECK_EQ_U64(o.after.token, 4);
    CHECK_EQ_I64(o.after.expiry_ns, 30 * S + TTL);
    /* Its former owner too takes it over anew: a new token. */
    CHECK_EQ_I64(decide(RULES_ACQUIRE, &r, "A", 0, 31, &o), RULES_OK);
    CHECK(o.takeover && o.durable);
    CHECK_EQ_U64(o.after.token, 4);
    CHECK_EQ_I64(o.after.expiry_ns, 31 * S + TTL);
}

TEST(acquire_released_lease_takes_over_at_now_plus_ttl)
{
    struct rules_outcome o;
    /* Released at t=0, with an expiry still ahead (renewed twice at that
     * instant): a takeover gets now + TTL, not later. */
    struct rules_row r = row("", 3, 0);
    r.expiry_ns = TTL + 1;
    CHECK_EQ_I64(decide(RULES_ACQUIRE, &r, "A", 0, 0, &o), RULES_OK);
    CHECK(o.takeover && o.durable);
    CHECK(owner_is(&o.after, "A"));
    CHECK_EQ_U64(o.after.token, 4);
    CHECK_EQ_I64(o.after.expiry_ns, TTL);
}

TEST(acquire_held_by_another_owner_is_refused)
{
    struct rules_outcome o;
    struct rules_row r = row("A", 3, 30);
    CHECK_EQ_I64(decide(RULES_ACQUIRE, &r, "B", 0, 29, &o), RULES_HELD);
    check_empty(&o);
    CHECK_STR(rules_reason(RULES_HELD), "held by another owner");
    /* Owners are bytes and lengths: a prefix, or the same bytes with more
     * after a NUL, is another owner. */
    struct rules_request q = {"A\0x", 3, 0};
    CHECK_EQ_I64(rules_decide(RULES_ACQUIRE, &r, &q, 29 * S, TTL, &o),
                 RULES_HELD);
    struct rules_row ab = row("AB", 3, 30);
    CHECK_EQ_I64(decide(RULES_ACQUIRE, &ab, "A", 0, 29, &o), RULES_HELD);
}

TEST(quarantined_lease_is_live_past_its_expiry)
{
    struct rules_outcome o;
    struct rules_row r = row("A", 5, -10); /* expired before the restart */
    r.quarantined = true;
    CHECK(rules_live(&r, 0));
    CHECK_EQ_I64(decide(RULES_ACQUIRE, &r, "B", 0, 0, &o), RULES_HELD);
    /* Its owner re-acquires it: kept token, a fresh expiry. */
    CHECK_EQ_I64(decide(RULES_ACQUIRE, &r, "A", 0, 1, &o), RULES_OK);
    CHECK(!o.takeover && !o.durable);
    CHECK_EQ_U64(o.after.token, 5);
    CHECK_EQ_I64(o.after.expiry_ns, 1 * S + TTL);
    CHECK(o.after.quarantined); /* still the row loaded at the restart */
    /* Quarantine over: free again. */
    r.quarantined = false;
    CHECK(!rules_live(&r, 0));
    CHECK_EQ_I64(decide(RULES_ACQUIRE, &r, "B", 0, 0, &o), RULES_OK);
    CHECK(o.takeover && !o.after.quarantined);
    CHECK_EQ_U64(o.after.token, 6);
}

TEST(live_means_owned_and_before_expiry)
{
    struct rules_row r = row("A", 1, 30);
    CHECK(!rules_live(NULL, 0));
    CHECK(rules_live(&r, 30 * S - 1));
    CHECK(!rules_live(&r, 30 * S));
    struct rules_row released = row("", 1, 30);
    CHECK(!rules_live(&released, 0));
    released.quarantined = true; /* nothing held: nothing to quarantine */
    CHECK(!rules_live(&released, 0));
}

TEST(renew_own_lease_keeps_token_and_moves_expiry_strictly)
{
    struct rules_outcome o;
    struct rules_row r = row("A", 3, 30);
    CHECK_EQ_I64(decide(RULES_RENEW, &r, "A", 3, 5, &o), RULES_OK);
    CHECK(!o.takeover && !o.durable);
    CHECK(owner_is(&o.after, "A"));
    CHECK_EQ_U64(o.after.token, 3);
    CHECK_EQ_I64(o.after.expiry_ns, 5 * S + TTL);
    /* Again at the same instant: still strictly later. */
    r = o.after;
    CHECK_EQ_I64(decide(RULES_RENEW, &r, "A", 3, 5, &o), RULES_OK);
    CHECK_EQ_I64(o.after.expiry_ns, 5 * S + TTL + 1);
}

TEST(renew_after_expiry_reclaims_when_nobody_took_it)
{
    struct rules_outcome o;
    /* Expired at t=30, nobody took it over: same owner, same token. */
    struct rules_row r = row("A", 3, 30);
    CHECK_EQ_I64(decide(RULES_RENEW, &r, "A", 3, 45, &o), RULES_OK);
    CHECK(!o.takeover && !o.durable);
    CHECK_EQ_U64(o.after.token, 3);
    CHECK_EQ_I64(o.after.expiry_ns, 45 * S + TTL);
    CHECK(rules_live(&o.after, 46 * S)); /* held again */
    CHECK_EQ_I64(decide(RULES_ACQUIRE, &o.after, "B", 0, 46, &o),
                 RULES_HELD);
}

TEST(renew_of_a_lost_lease_is_refused)
{
    struct rules_outcome o;
    /* B took it over (token 4): A's token 3 is lost, live or not. */
    struct rules_row taken = row("B", 4, 61);
    CHECK_EQ_I64(decide(RULES_RENEW, &taken, "A", 3, 32, &o), RULES_LOST);
    check_empty(&o);
    CHECK_EQ_I64(decide(RULES_RENEW, &taken, "A", 3, 70, &o), RULES_LOST);
    /* Right owner, wrong token: 0, older, newer. */
    CHECK_EQ_I64(decide(RULES_RENEW, &taken, "B", 0, 32, &o), RULES_LOST);
    CHECK_EQ_I64(decide(RULES_RENEW, &taken, "B", 3, 32, &o), RULES_LOST);
    CHECK_EQ_I64(decide(RULES_RENEW, &taken, "B", 5, 32, &o), RULES_LOST);
    /* Right token, wrong owner. */
    CHECK_EQ_I64(decide(RULES_RENEW, &taken, "C", 4, 32, &o), RULES_LOST);
    /* Released (owner and token were right before), or never held. */
    struct rules_row released = row("", 4, 61);
    CHECK_EQ_I64(decide(RULES_RENEW, &released, "B", 4, 32, &o),
                 RULES_LOST);
    CHECK_EQ_I64(decide(RULES_RENEW, NULL, "B", 0, 32, &o), RULES_LOST);
    CHECK_EQ_I64(decide(RULES_RENEW, NULL, "B", 1, 32, &o), RULES_LOST);
    check_empty(&o);
    CHECK_STR(rules_reason(RULES_LOST),
              "lease lost: owner or token no longer match");
}

TEST(release_own_lease_leaves_a_tombstone)
{
    struct rules_outcome o;
    struct rules_row r = row("A", 3, 30);
    /* Release reads no clock: live or expired, it frees. */
    for (int64_t t = 0; t <= 100; t += 50) {
        CHECK_EQ_I64(decide(RULES_RELEASE, &r, "A", 3, t, &o), RULES_OK);
        CHECK(o.durable && !o.takeover);
        CHECK(o.after.owner_len == 0 && o.after.owner == NULL);
        CHECK_EQ_U64(o.after.token, 3);
        CHECK_EQ_I64(o.after.expiry_ns, 30 * S);
        CHECK(!o.after.quarantined);
        CHECK(!rules_live(&o.after, 0));
    }
}

TEST(release_of_another_owners_or_a_missing_lease_frees_nothing)
{
    struct rules_outcome o;
    struct rules_row r = row("A", 3, 30);
    CHECK_EQ_I64(decide(RULES_RELEASE, &r, "B", 3, 0, &o), RULES_NOOP);
    check_empty(&o);
    CHECK_EQ_I64(decide(RULES_RELEASE, &r, "A", 2, 0, &o), RULES_NOOP);
    CHECK_EQ_I64(decide(RULES_RELEASE, &r, "A", 4, 0, &o), RULES_NOOP);
    CHECK_EQ_I64(decide(RULES_RELEASE, &r, "A", 0, 0, &o), RULES_NOOP);
    /* Released already (idempotent), and never held. */
    struct rules_row released = row("", 3, 30);
    CHECK_EQ_I64(decide(RULES_RELEASE, &released, "A", 3, 0, &o),
                 RULES_NOOP);
    CHECK_EQ_I64(decide(RULES_RELEASE, NULL, "A", 0, 0, &o), RULES_NOOP);
    CHECK_EQ_I64(decide(RULES_RELEASE, NULL, "A", 7, 0, &o), RULES_NOOP);
    check_empty(&o);
    CHECK(rules_reason(RULES_NOOP) == NULL);
    CHECK(rules_reason(RULES_OK) == NULL);
}

TEST(revoke_ends_any_holders_lease_as_release_does)
{
    struct rules_outcome o;
    struct rules_row r = row("A", 3, 30);
    /* Whatever owner is presented (an operator is not the holder), live
     * or expired, and with the holder's token or 0 (any). */
    for (int64_t t = 0; t <= 100; t += 50) {
        CHECK_EQ_I64(decide(RULES_REVOKE, &r, "", 0, t, &o), RULES_OK);
        CHECK(o.durable && !o.takeover);
        CHECK(o.after.owner_len == 0 && o.after.owner == NULL);
        CHECK_EQ_U64(o.after.token, 3);
        CHECK_EQ_I64(o.after.expiry_ns, 30 * S);
        CHECK_EQ_I64(decide(RULES_REVOKE, &r, "B", 3, t, &o), RULES_OK);
        CHECK_EQ_U64(o.after.token, 3);
    }
    /* Quarantined: still the holder's, still revocable. */
    r.quarantined = true;
    CHECK_EQ_I64(decide(RULES_REVOKE, &r, "", 0, 0, &o), RULES_OK);
}

TEST(revoke_with_another_token_or_of_no_holder_frees_nothing)
{
    struct rules_outcome o;
    struct rules_row r = row("A", 3, 30);
    CHECK_EQ_I64(decide(RULES_REVOKE, &r, "A", 2, 0, &o), RULES_LOST);
    check_empty(&o);
    CHECK_EQ_I64(decide(RULES_REVOKE, &r, "", 4, 0, &o), RULES_LOST);
    check_empty(&o);
    struct rules_row released = row("", 3, 30);
    CHECK_EQ_I64(decide(RULES_REVOKE, &released, "", 0, 0, &o), RULES_NOOP);
    CHECK_EQ_I64(decide(RULES_REVOKE, &released, "", 3, 0, &o), RULES_NOOP);
    CHECK_EQ_I64(decide(RULES_REVOKE, NULL, "", 0, 0, &o), RULES_NOOP);
    check_empty(&o);
}

/* A session's row, kept as a store would: the outcome of every RULES_OK
 * is what is stored next. */
struct store {
    bool exists;
    char owner[16];
    uint64_t token;
    int64_t expiry_ns;
};

static int step(struct store *st, enum rules_op op, const char *owner,
                uint64_t token, int64_t t_ns, struct rules_outcome *o)
{
    struct rules_row r = {st->owner, strlen(st->owner), st->token,
                          st->expiry_ns, false};
    struct rules_request q = req(owner, token);
    int code = rules_decide(op, st->exists ? &r : NULL, &q, t_ns, TTL, o);
    if (code == RULES_OK) {
        char copy[16] = "";
        memcpy(copy, o->after.owner != NULL ? o->after.owner : "",
               o->after.owner_len);
        memcpy(st->owner, copy, sizeof(copy));
        st->exists = true;
        st->token = o->after.token;
        st->expiry_ns = o->after.expiry_ns;
    }
    return code;
}

TEST(tokens_rise_on_takeovers_only)
{
    struct store st = {0};
    struct rules_outcome o;
    /* t=0 A acquires -> 1; t=10 A re-acquires -> 1; t=20 A renews -> 1;
     * t=49 B is held; t=50 B acquires -> 2; t=51 A renews: lost;
     * t=52 B releases; t=52 B acquires -> 3; t=90 A acquires -> 4. */
    CHECK_EQ_I64(step(&st, RULES_ACQUIRE, "A", 0, 0, &o), RULES_OK);
    CHECK_EQ_U64(st.token, 1);
    CHECK_EQ_I64(step(&st, RULES_ACQUIRE, "A", 0, 10 * S, &o), RULES_OK);
    CHECK_EQ_U64(st.token, 1);
    CHECK_EQ_I64(step(&st, RULES_RENEW, "A", 1, 20 * S, &o), RULES_OK);
    CHECK_EQ_U64(st.token, 1);
    CHECK_EQ_I64(st.expiry_ns, 50 * S);
    CHECK_EQ_I64(step(&st, RULES_ACQUIRE, "B", 0, 49 * S, &o), RULES_HELD);
    CHECK_EQ_I64(step(&st, RULES_ACQUIRE, "B", 0, 50 * S, &o), RULES_OK);
    CHECK_EQ_U64(st.token, 2);
    CHECK_EQ_I64(step(&st, RULES_RENEW, "A", 1, 51 * S, &o), RULES_LOST);
    CHECK_EQ_I64(step(&st, RULES_RELEASE, "A", 1, 51 * S, &o), RULES_NOOP);
    CHECK_EQ_I64(step(&st, RULES_RELEASE, "B", 2, 52 * S, &o), RULES_OK);
    CHECK_EQ_U64(st.token, 2);
    CHECK_EQ_I64(step(&st, RULES_ACQUIRE, "B", 0, 52 * S, &o), RULES_OK);
    CHECK_EQ_U64(st.token, 3);
    CHECK_EQ_I64(step(&st, RULES_ACQUIRE, "A", 0, 90 * S, &o), RULES_OK);
    CHECK_EQ_U64(st.token, 4);
    CHECK(o.takeover);
}

/* xorshift64*: the same program every run. */
static uint64_t rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1du;
}

/* What docs/protocol.md says each call decides, from the row as stored. */
static int expected(const struct store *st, enum rules_op op,
                    const char *owner, uint64_t token, int64_t now)
{
    bool held = st->exists && st->owner[0] != '\0';
    bool mine = held && strcmp(st->owner, owner) == 0;
    switch (op) {
    case RULES_ACQUIRE:
        return held && now < st->expiry_ns && !mine ? RULES_HELD : RULES_OK;
    case RULES_RENEW:
        return mine && st->token == token ? RULES_OK : RULES_LOST;
    default:
        return mine && st->token == token ? RULES_OK : RULES_NOOP;
    }
}

TEST(tokens_are_monotonic_over_random_programs)
{
    static const char *const owners[] = {"A", "B", "C"};
    uint64_t seed = 0x9e3779b97f4a7c15u;
    int takeovers = 0, refusals = 0, reclaims = 0;
    for (int prog = 0; prog < 200; prog++) {
        struct store st = {0};
        int64_t now = 0;
        uint64_t highest = 0; /* every token the session had */
        for (int i = 0; i < 200; i++) {
            uint64_t x = rnd(&seed);
            now += (int64_t)(x % 20) * S / 2; /* 0 to 9.5 s, often 0 */
            enum rules_op op = (enum rules_op)(RULES_ACQUIRE + (x >> 8) % 3);
            const char *owner = owners[(x >> 16) % 3];
            /* Renew and Release: the token stored, or one off it. */
            uint64_t token = op == RULES_ACQUIRE
                                 ? 0
                                 : st.token + ((x >> 24) % 3) - 1;
            struct store before = st;
            bool was_live = before.exists && before.owner[0] != '\0' &&
                            now < before.expiry_ns;
            struct rules_outcome o;
            int code = step(&st, op, owner, token, now, &o);
            CHECK_EQ_I64(code, expected(&before, op, owner, token, now));
            if (code != RULES_OK) {
                refusals++;
                CHECK(memcmp(&st, &before, sizeof(st)) == 0);
                continue;
            }
            if (o.takeover) {
                /* Never of a live lease; a token above every earlier
                 * one, by one. */
                takeovers++;
                CHECK(!was_live);
                CHECK(st.token > highest);
                CHECK_EQ_U64(st.token, before.token + 1);
                CHECK_EQ_I64(st.expiry_ns, now + TTL);
                highest = st.token;
            } else {
                /* Renewals, refreshes and releases keep it. */
                CHECK_EQ_U64(st.token, before.token);
                reclaims += op == RULES_RENEW && !was_live;
            }
            /* A holder's expiry only moves forward. */
            if (!o.durable)
                CHECK(st.expiry_ns > before.expiry_ns);
        }
    }
    /* The programs reached every kind of decision. */
    CHECK(takeovers > 1000 && refusals > 1000 && reclaims > 10);
}

/* Every case of tests/rules_cases.txt ($RULES_CASES), through
 * rules_decide: its code, the row it makes and the flags. The table
 * must also keep a case of every kind of answer, so that a case deleted
 * with its branch does not go unnoticed. */
TEST(every_case_of_the_table_is_decided_as_written)
{
    const char *path = getenv("RULES_CASES");
    CHECK(path != NULL);
    FILE *f = path != NULL ? fopen(path, "r") : NULL;
    CHECK(f != NULL);
    if (f == NULL)
        return;
    char line[512], err[128];
    int cases = 0;
    bool seen[RULES_REVOKE + 1][RULES_NOOP + 1] = {{false}};
    bool flags[8] = {false};
    for (int n = 1; fgets(line, sizeof(line), f) != NULL; n++) {
        struct rules_case c;
        int rc = rules_case_parse(line, &c, err, sizeof(err));
        if (rc < 0)
            fprintf(stderr, "%s:%d: %s\n", path, n, err);
        CHECK(rc >= 0);
        if (rc <= 0)
            continue;
        cases++;
        struct rules_answer a;
        rules_case_run(&c, &a);
        bool same = a.code == c.want.code &&
                    strcmp(a.owner, c.want.owner) == 0 &&
                    a.token == c.want.token && a.expiry == c.want.expiry &&
                    a.flags == c.want.flags;
        if (!same) {
            fprintf(stderr, "%s:%d: rules_decide answers ", path, n);
            rules_case_print(stderr, &c, &a);
        }
        CHECK(same);
        seen[c.op][c.want.code] = true;
        flags[c.want.flags & 7] = true;
    }
    fclose(f);
    CHECK(cases >= 40);
    CHECK(seen[RULES_ACQUIRE][RULES_OK] && seen[RULES_ACQUIRE][RULES_HELD]);
    CHECK(seen[RULES_RENEW][RULES_OK] && seen[RULES_RENEW][RULES_LOST]);
    CHECK(seen[RULES_RELEASE][RULES_OK] && seen[RULES_RELEASE][RULES_NOOP]);
    CHECK(seen[RULES_REVOKE][RULES_OK] && seen[RULES_REVOKE][RULES_LOST] &&
          seen[RULES_REVOKE][RULES_NOOP]);
    CHECK(flags[0] && flags[1] && flags[3] && flags[4]);
}

/* Runs rules_decide with an op that is not one in a child; returns how
 * the child ended (its wait status). */
static int decide_bad_op(int op)
{
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit none = {0, 0};
        setrlimit(RLIMIT_CORE, &none); /* no core file */
        struct rules_row r = row("A", 3, 30);
        struct rules_request q = req("A", 3);
        struct rules_outcome o;
        rules_decide((enum rules_op)op, &r, &q, 0, TTL, &o);
        _exit(0); /* treated as some op: the test fails */
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    return status;
}

TEST(an_unknown_op_aborts_instead_of_releasing)
{
    int ops[] = {0, RULES_REVOKE + 1, -1, 99};
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        int status = decide_bad_op(ops[i]);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
    }
}

CHECK_MAIN(acquire_free_takes_over_with_the_first_token,
           revoke_ends_any_holders_lease_as_release_does,
           revoke_with_another_token_or_of_no_holder_frees_nothing,
           acquire_own_live_lease_keeps_token_and_extends,
           acquire_expired_lease_takes_over,
           acquire_released_lease_takes_over_at_now_plus_ttl,
           acquire_held_by_another_owner_is_refused,
           quarantined_lease_is_live_past_its_expiry,
           live_means_owned_and_before_expiry,
           renew_own_lease_keeps_token_and_moves_expiry_strictly,
           renew_after_expiry_reclaims_when_nobody_took_it,
           renew_of_a_lost_lease_is_refused,
           release_own_lease_leaves_a_tombstone,
           release_of_another_owners_or_a_missing_lease_frees_nothing,
           tokens_rise_on_takeovers_only,
           tokens_are_monotonic_over_random_programs,
           an_unknown_op_aborts_instead_of_releasing,
           every_case_of_the_table_is_decided_as_written)
