/* The history of Watch: a ring of the last events, read from a revision
 * with a filter; compacted and ahead revisions said as such; staged
 * events visible only once published, in order; a copy of the database's
 * (the shared mode's: pg_feed.c) restarted when its store's events are
 * gone, and asked before a reader is told it is ahead. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "history.h"
#include "pg_feed.h"

static struct store_event ev(uint64_t revision, const char *session)
{
    struct store_event e = {revision,
                            STORE_GRANTED,
                            {session, strlen(session), "o", 1, revision, 0}};
    return e;
}

struct got {
    int calls;
    size_t n;
    uint64_t revision[64];
    char session[64][16];
    uint64_t seen;
};

static void take(void *arg, const struct store_event *const *evs, size_t n,
                 uint64_t seen)
{
    struct got *g = arg;
    g->calls++;
    g->seen = seen;
    for (size_t i = 0; i < n; i++) {
        g->revision[g->n] = evs[i]->revision;
        snprintf(g->session[g->n], 16, "%.*s", (int)evs[i]->lease.session_len,
                 evs[i]->lease.session);
        g->n++;
    }
}

static enum history_read read_from(struct history *h, uint64_t after,
                                   const char *key, bool prefix, size_t max,
                                   struct got *g, uint64_t *oldest)
{
    memset(g, 0, sizeof(*g));
    struct history_filter f = {key, strlen(key), prefix};
    uint64_t seen = 0;
    enum history_read rc =
        history_read(h, after, &f, max, take, g, &seen, oldest);
    if (rc == HISTORY_READ)
        CHECK_EQ_I64(seen, g->seen);
    return rc;
}

static int wakes;
static void woken(void *arg)
{
    (void)arg;
    wakes++;
}

TEST(reads_what_follows_a_revision_through_a_filter)
{
    struct history *h = history_create(4);
    history_set_wake(h, woken, NULL);
    struct store_event evs[] = {ev(1, "a/1"), ev(2, "b"), ev(3, "a/2"),
                                ev(4, "a")};
    CHECK_EQ_I64(history_append(h, evs, 4), 0);
    CHECK_EQ_I64(wakes, 1);
    struct got g;
    uint64_t oldest;
    CHECK_EQ_I64(read_from(h, 0, "a/", true, 64, &g, &oldest), HISTORY_READ);
    CHECK_EQ_I64(g.n, 2);
    CHECK_STR(g.session[0], "a/1");
    CHECK_EQ_I64(g.revision[1], 3);
    CHECK_EQ_I64(g.seen, 4); /* looked at everything */
    CHECK_EQ_I64(oldest, 1);
    CHECK_EQ_I64(read_from(h, 1, "a", false, 64, &g, &oldest), HISTORY_READ);
    CHECK_EQ_I64(g.n, 1);
    CHECK_EQ_I64(g.revision[0], 4);
    /* max stops at the last event passed, not the last looked at. */
    CHECK_EQ_I64(read_from(h, 0, "", true, 2, &g, &oldest), HISTORY_READ);
    CHECK_EQ_I64(g.n, 2);
    CHECK_EQ_I64(g.seen, 2);
    /* Nothing new: one call, no events. */
    CHECK_EQ_I64(read_from(h, 4, "", true, 64, &g, &oldest), HISTORY_READ);
    CHECK_EQ_I64(g.calls, 1);
    CHECK_EQ_I64(g.n, 0);
    history_destroy(h);
}

TEST(old_revisions_are_compacted_and_later_ones_ahead)
{
    struct history *h = history_create(3);
    struct store_event evs[] = {ev(1, "a"), ev(2, "a"), ev(3, "a"), ev(4, "a"),
                                ev(5, "a")};
    CHECK_EQ_I64(history_append(h, evs, 5), 0);
    struct got g;
    uint64_t oldest;
    CHECK_EQ_I64(read_from(h, 1, "a", false, 64, &g, &oldest),
                 HISTORY_COMPACTED);
    CHECK_EQ_I64(oldest, 3);
    CHECK_EQ_I64(read_from(h, 2, "a", false, 64, &g, &oldest), HISTORY_READ);
    CHECK_EQ_I64(g.n, 3);
    CHECK_EQ_I64(g.revision[0], 3);
    CHECK_EQ_I64(read_from(h, 5, "a", false, 64, &g, &oldest), HISTORY_READ);
    CHECK_EQ_I64(read_from(h, 6, "a", false, 64, &g, &oldest), HISTORY_AHEAD);
    /* A revision that does not follow is refused, and changes nothing. */
    struct store_event gap = ev(7, "a");
    CHECK_EQ_I64(history_append(h, &gap, 1), -1);
    CHECK_EQ_I64(history_newest(h), 5);
    history_destroy(h);
}

TEST(a_history_loaded_from_a_later_revision_starts_there)
{
    struct history *h = history_create(10);
    struct store_event evs[] = {ev(41, "a"), ev(42, "b")};
    CHECK_EQ_I64(history_append(h, evs, 2), 0);
    struct got g;
    uint64_t oldest;
    CHECK_EQ_I64(read_from(h, 39, "", true, 64, &g, &oldest),
                 HISTORY_COMPACTED);
    CHECK_EQ_I64(oldest, 41);
    CHECK_EQ_I64(read_from(h, 40, "", true, 64, &g, &oldest), HISTORY_READ);
    CHECK_EQ_I64(g.n, 2);
    history_destroy(h);
}

TEST(staged_events_are_seen_only_once_published)
{
    struct history *h = history_create(8);
    struct store_event a[] = {ev(1, "a"), ev(2, "b")};
    struct store_event b[] = {ev(3, "c")};
    CHECK_EQ_I64(history_stage(h, a, 2, 10), 0); /* commit 10 */
    CHECK_EQ_I64(history_stage(h, b, 1, 11), 0); /* commit 11 */
    CHECK_EQ_I64(history_newest(h), 0);
    CHECK_EQ_I64(history_publish(h, 9), 0);
    CHECK_EQ_I64(history_newest(h), 0);
    CHECK_EQ_I64(history_publish(h, 10), 0);
    CHECK_EQ_I64(history_newest(h), 2);
    CHECK_EQ_I64(history_publish(h, 11), 0);
    CHECK_EQ_I64(history_newest(h), 3);
    struct got g;
    uint64_t oldest;
    CHECK_EQ_I64(read_from(h, 0, "", true, 64, &g, &oldest), HISTORY_READ);
    CHECK_EQ_I64(g.n, 3);
    CHECK_STR(g.session[2], "c");
    CHECK(history_bytes(h) > 3 * sizeof(struct store_event));
    history_destroy(h);
}

struct sessions {
    int n;
    char session[8][16];
};

static void note(void *arg, const char *session, size_t len)
{
    struct sessions *x = arg;
    snprintf(x->session[x->n++], 16, "%.*s", (int)len, session);
}

/* The sessions that changed after a revision, for waking their watchers;
 * none when that revision is no longer kept. */
TEST(sessions_after_a_revision)
{
    struct history *h = history_create(3);
    struct store_event evs[] = {ev(1, "a"), ev(2, "b"), ev(3, "c"), ev(4, "d")};
    CHECK_EQ_I64(history_append(h, evs, 4), 0);
    struct sessions x = {0};
    uint64_t newest = 0;
    CHECK_EQ_I64(history_sessions(h, 2, note, &x, &newest), HISTORY_READ);
    CHECK_EQ_I64(newest, 4);
    CHECK_EQ_I64(x.n, 2);
    CHECK_STR(x.session[0], "c");
    CHECK_STR(x.session[1], "d");
    memset(&x, 0, sizeof(x));
    CHECK_EQ_I64(history_sessions(h, 0, note, &x, &newest), HISTORY_COMPACTED);
    CHECK_EQ_I64(x.n, 0);
    CHECK_EQ_I64(history_sessions(h, 4, note, &x, &newest), HISTORY_READ);
    CHECK_EQ_I64(x.n, 0);
    history_destroy(h);
}

/* A copy that may lag its store: a reader ahead of it is ahead for sure
 * only once a read of the store begun after it asked was appended. */
TEST(a_copy_is_asked_before_a_reader_is_ahead)
{
    struct history *plain = history_create(4);
    CHECK_EQ_I64(history_ask(plain), 0); /* no copy: ahead is ahead */
    history_destroy(plain);

    struct history *h = history_create(4);
    history_set_copy(h);
    wakes = 0;
    history_set_wake(h, woken, NULL);
    uint64_t before = history_asked(h); /* a read begins, then one asks */
    uint64_t ticket = history_ask(h);
    CHECK(ticket > before);
    CHECK(!history_answered(h, ticket));
    history_answer(h, before); /* that read began before the question */
    CHECK(!history_answered(h, ticket));
    CHECK_EQ_I64(wakes, 0);
    uint64_t next = history_asked(h);
    history_answer(h, next);
    CHECK(history_answered(h, ticket));
    CHECK_EQ_I64(wakes, 1);
    history_destroy(h);
}

static struct feed fed(uint64_t top, uint64_t first, size_t n)
{
    struct feed f = {0};
    for (size_t i = 0; i < n; i++) {
        struct store_event e = ev(first + i, "s");
        CHECK_EQ_I64(feed_add(&f, &e), 0);
    }
    f.top = top;
    return f;
}

/* What a read of the database's events gives goes into the copy: after
 * its newest, or, when the events after it are gone, from where they
 * are; a database behind the copy (a restored backup) restarts it. */
TEST(a_feed_applies_what_the_database_gave)
{
    struct history *h = history_create(8);
    struct got g;
    uint64_t oldest;
    struct feed f = fed(3, 1, 3);
    CHECK_EQ_I64(feed_apply(&f, h, 0), 0);
    CHECK_EQ_I64(history_newest(h), 3);
    feed_free(&f);
    /* Events 4..6 deleted before this replica read them. */
    f = fed(8, 7, 2);
    CHECK_EQ_I64(feed_apply(&f, h, 3), 0);
    CHECK_EQ_I64(history_newest(h), 8);
    CHECK_EQ_I64(read_from(h, 3, "", true, 64, &g, &oldest),
                 HISTORY_COMPACTED);
    CHECK_EQ_I64(oldest, 7);
    CHECK_EQ_I64(read_from(h, 6, "", true, 64, &g, &oldest), HISTORY_READ);
    CHECK_EQ_I64(g.n, 2);
    feed_free(&f);
    /* Nothing new: unchanged. */
    f = fed(8, 0, 0);
    CHECK_EQ_I64(feed_apply(&f, h, 8), 0);
    CHECK_EQ_I64(read_from(h, 6, "", true, 64, &g, &oldest), HISTORY_READ);
    /* Every event after the newest is gone: it starts at the store's. */
    f.top = 12;
    CHECK_EQ_I64(feed_apply(&f, h, 8), 0);
    CHECK_EQ_I64(history_newest(h), 12);
    CHECK_EQ_I64(read_from(h, 11, "", true, 64, &g, &oldest),
                 HISTORY_COMPACTED);
    /* The store is behind the copy: a reader past it is ahead. */
    f.top = 5;
    CHECK_EQ_I64(feed_apply(&f, h, 12), 0);
    CHECK_EQ_I64(history_newest(h), 5);
    CHECK_EQ_I64(read_from(h, 6, "", true, 64, &g, &oldest), HISTORY_AHEAD);
    feed_free(&f);
    history_destroy(h);
}

CHECK_MAIN(reads_what_follows_a_revision_through_a_filter,
           a_copy_is_asked_before_a_reader_is_ahead,
           a_feed_applies_what_the_database_gave,
           sessions_after_a_revision,
           old_revisions_are_compacted_and_later_ones_ahead,
           a_history_loaded_from_a_later_revision_starts_there,
           staged_events_are_seen_only_once_published)
