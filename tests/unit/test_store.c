/* The SQLite store on a temporary file: conditional writes, atomic
 * batches, the token floor, reopening, schema version, busy. */
#include <sqlite3.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "store.h"

static char dir[] = "/tmp/leased-store-XXXXXX";
static char path[256];

static struct store *open_store(void)
{
    char err[256];
    struct store *s = NULL;
    int rc = store_open(path, 200, &s, err, sizeof(err));
    if (rc != STORE_OK)
        fprintf(stderr, "store_open: %s\n", err);
    CHECK_EQ_I64(rc, STORE_OK);
    return s;
}

static void remove_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

static void fresh(void)
{
    if (dir[strlen(dir) - 1] == 'X') {
        CHECK(mkdtemp(dir) != NULL);
        atexit(remove_dir);
    }
    snprintf(path, sizeof(path), "%s/leased.db", dir);
    unlink(path);
    char wal[300];
    snprintf(wal, sizeof(wal), "%s-wal", path);
    unlink(wal);
    snprintf(wal, sizeof(wal), "%s-shm", path);
    unlink(wal);
}

static struct engine_change put(const char *session, const char *owner,
                                uint64_t token, int64_t expiry)
{
    struct engine_change c;
    memset(&c, 0, sizeof(c));
    c.kind = ENGINE_PUT;
    c.after = (struct lease_row){session, strlen(session), owner,
                                 strlen(owner), token, expiry};
    return c;
}

static struct engine_change update(struct engine_change prev,
                                   const char *owner, uint64_t token,
                                   int64_t expiry)
{
    struct engine_change c = put(prev.after.session, owner, token, expiry);
    c.has_before = true;
    c.before = prev.after;
    return c;
}

struct loaded {
    int n;
    char session[8][64];
    char owner[8][64];
    uint64_t token[8];
    int64_t expiry[8];
};

static int collect(void *arg, const struct lease_row *row)
{
    struct loaded *l = arg;
    if (l->n == 8)
        return -1;
    snprintf(l->session[l->n], 64, "%.*s", (int)row->session_len,
             row->session);
    snprintf(l->owner[l->n], 64, "%.*s", (int)row->owner_len, row->owner);
    l->token[l->n] = row->token;
    l->expiry[l->n] = row->expiry_ns;
    l->n++;
    return 0;
}

TEST(put_update_and_reload)
{
    fresh();
    struct store *s = open_store();
    struct engine_change a = put("s1", "A", 1, 100);
    struct engine_change b = update(a, "A", 1, 200);
    struct engine_change c = update(b, "", 1, 200); /* released */
    struct engine_change batch[] = {a, b, c, put("s2", "B", 4, 300)};
    CHECK_EQ_I64(store_apply(s, batch, 4), STORE_OK);
    CHECK_EQ_I64(store_sync(s), STORE_OK);
    store_close(s);
    s = open_store();
    struct loaded l = {0};
    uint64_t floor = 99;
    CHECK_EQ_I64(store_load(s, collect, &l, &floor), STORE_OK);
    CHECK_EQ_I64(l.n, 2);
    CHECK_EQ_U64(floor, 0);
    CHECK_STR(l.session[0], "s1");
    CHECK_STR(l.owner[0], "");
    CHECK_EQ_U64(l.token[0], 1);
    CHECK_EQ_I64(l.expiry[0], 200);
    CHECK_STR(l.owner[1], "B");
    CHECK_EQ_U64(l.token[1], 4);
    store_close(s);
}

TEST(stale_condition_rolls_back_whole_batch)
{
    fresh();
    struct store *s = open_store();
    struct engine_change a = put("s1", "A", 1, 100);
    CHECK_EQ_I64(store_apply(s, &a, 1), STORE_OK);
    /* A good new row, then an update that expects a row that is not
     * there (wrong token): nothing of the batch may stay. */
    struct engine_change stale = update(a, "B", 2, 300);
    stale.before.token = 7;
    struct engine_change batch[] = {put("s2", "C", 1, 100), stale};
    CHECK_EQ_I64(store_apply(s, batch, 2), STORE_ECONFLICT);
    /* A second insert of an existing row is a conflict too. */
    struct engine_change dup = put("s1", "Z", 9, 1);
    CHECK_EQ_I64(store_apply(s, &dup, 1), STORE_ECONFLICT);
    struct loaded l = {0};
    uint64_t floor;
    CHECK_EQ_I64(store_load(s, collect, &l, &floor), STORE_OK);
    CHECK_EQ_I64(l.n, 1);
    CHECK_STR(l.owner[0], "A");
    /* The store still works after a failed batch. */
    struct engine_change ok = update(a, "B", 2, 300);
    CHECK_EQ_I64(store_apply(s, &ok, 1), STORE_OK);
    store_close(s);
}

/* Renewals are not written, so the engine's row may have a later expiry
 * than the stored one: a change matches on owner and token only. */
TEST(changes_match_owner_and_token_not_expiry)
{
    fresh();
    struct store *s = open_store();
    struct engine_change a = put("s1", "A", 1, 100);
    struct engine_change b = put("s2", "A", 1, 100);
    struct engine_change batch[] = {a, b};
    CHECK_EQ_I64(store_apply(s, batch, 2), STORE_OK);
    a.after.expiry_ns = 900; /* renewed in memory only */
    b.after.expiry_ns = 900;
    struct engine_change wrong_owner = update(a, "", 1, 900);
    wrong_owner.before.owner = "B";
    CHECK_EQ_I64(store_apply(s, &wrong_owner, 1), STORE_ECONFLICT);
    struct engine_change release = update(a, "", 1, 900);
    struct engine_change del = {.kind = ENGINE_DELETE, .has_before = true,
                                .before = b.after};
    struct engine_change both[] = {release, del};
    CHECK_EQ_I64(store_apply(s, both, 2), STORE_OK);
    struct loaded l = {0};
    uint64_t floor = 0;
    CHECK_EQ_I64(store_load(s, collect, &l, &floor), STORE_OK);
    CHECK_EQ_I64(l.n, 1);
    CHECK_STR(l.owner[0], "");
    CHECK_EQ_I64(l.expiry[0], 900);
    CHECK_EQ_U64(floor, 1);
    store_close(s);
}

TEST(delete_raises_floor_never_lowers)
{
    fresh();
    struct store *s = open_store();
    struct engine_change a = put("s1", "A", 5, 100);
    struct engine_change b = put("s2", "A", 3, 100);
    struct engine_change batch[] = {a, b};
    CHECK_EQ_I64(store_apply(s, batch, 2), STORE_OK);
    struct engine_change del = {.kind = ENGINE_DELETE, .has_before = true,
                                .before = a.after};
    CHECK_EQ_I64(store_apply(s, &del, 1), STORE_OK);
    del.before = b.after;
    CHECK_EQ_I64(store_apply(s, &del, 1), STORE_OK);
    struct loaded l = {0};
    uint64_t floor = 0;
    CHECK_EQ_I64(store_load(s, collect, &l, &floor), STORE_OK);
    CHECK_EQ_I64(l.n, 0);
    CHECK_EQ_U64(floor, 5);
    /* Deleting a row that is not as expected fails and keeps the floor. */
    del.before.token = 50;
    CHECK_EQ_I64(store_apply(s, &del, 1), STORE_ECONFLICT);
    CHECK_EQ_I64(store_load(s, collect, &l, &floor), STORE_OK);
    CHECK_EQ_U64(floor, 5);
    store_close(s);
}

TEST(raise_tokens_lifts_rows_and_floor_never_lowers)
{
    fresh();
    struct store *s = open_store();
    struct engine_change batch[] = {put("low", "A", 2, 100),
                                    put("high", "B", 40, 100)};
    CHECK_EQ_I64(store_apply(s, batch, 2), STORE_OK);
    size_t raised = 99;
    CHECK_EQ_I64(store_raise_tokens(s, 10, &raised), STORE_OK);
    CHECK_EQ_I64(raised, 1);
    struct loaded l = {0};
    uint64_t floor = 0;
    CHECK_EQ_I64(store_load(s, collect, &l, &floor), STORE_OK);
    CHECK_EQ_U64(floor, 10);
    CHECK_EQ_I64(l.n, 2);
    for (int i = 0; i < l.n; i++) /* owners and expiries untouched */
        CHECK_EQ_U64(l.token[i], strcmp(l.session[i], "low") == 0 ? 10 : 40);
    CHECK_EQ_I64(l.expiry[0], 100);
    /* The engine's conditional writes see the new token. */
    struct engine_change stale = update(batch[0], "C", 3, 200);
    CHECK_EQ_I64(store_apply(s, &stale, 1), STORE_ECONFLICT);
    /* A lower floor changes nothing. */
    CHECK_EQ_I64(store_raise_tokens(s, 5, &raised), STORE_OK);
    CHECK_EQ_I64(raised, 0);
    l.n = 0;
    CHECK_EQ_I64(store_load(s, collect, &l, &floor), STORE_OK);
    CHECK_EQ_U64(floor, 10);
    store_close(s);
}

TEST(newer_schema_refused)
{
    fresh();
    store_close(open_store());
    sqlite3 *db;
    CHECK_EQ_I64(sqlite3_open(path, &db), SQLITE_OK);
    CHECK_EQ_I64(sqlite3_exec(db, "PRAGMA user_version = 3", 0, 0, 0),
                 SQLITE_OK);
    sqlite3_close(db);
    struct store *s = NULL;
    char err[256];
    CHECK_EQ_I64(store_open(path, 200, &s, err, sizeof(err)),
                 STORE_ECONFIG);
    CHECK(s == NULL);
    CHECK(strstr(err, "schema version 3") != NULL);
}

TEST(busy_database_fails_then_recovers)
{
    fresh();
    struct store *s = open_store();
    sqlite3 *db;
    CHECK_EQ_I64(sqlite3_open(path, &db), SQLITE_OK);
    CHECK_EQ_I64(sqlite3_exec(db, "BEGIN IMMEDIATE", 0, 0, 0), SQLITE_OK);
    struct engine_change a = put("s1", "A", 1, 100);
    CHECK_EQ_I64(store_apply(s, &a, 1), STORE_EBUSY);
    CHECK(strlen(store_errmsg(s)) > 0);
    CHECK_EQ_I64(sqlite3_exec(db, "ROLLBACK", 0, 0, 0), SQLITE_OK);
    sqlite3_close(db);
    CHECK_EQ_I64(store_apply(s, &a, 1), STORE_OK);
    store_close(s);
}

TEST(meta_values_survive_reopen)
{
    fresh();
    struct store *s = open_store();
    int64_t v = 42;
    CHECK_EQ_I64(store_get_meta(s, "quarantine_ttl_ns", &v), STORE_OK);
    CHECK_EQ_I64(v, 0); /* absent */
    CHECK_EQ_I64(store_set_meta(s, "quarantine_ttl_ns", 3000), STORE_OK);
    CHECK_EQ_I64(store_set_meta(s, "quarantine_ttl_ns", 500), STORE_OK);
    store_close(s);
    s = open_store();
    CHECK_EQ_I64(store_get_meta(s, "quarantine_ttl_ns", &v), STORE_OK);
    CHECK_EQ_I64(v, 500);
    store_close(s);
}

static struct store_event event(uint64_t revision, enum store_event_kind kind,
                                const struct engine_change *c)
{
    struct store_event ev = {revision, kind, c->after};
    return ev;
}

struct events {
    int n;
    uint64_t revision[16];
    int kind[16];
    char session[16][64];
    char owner[16][64];
    uint64_t token[16];
};

static int collect_event(void *arg, const struct store_event *ev)
{
    struct events *l = arg;
    if (l->n == 16)
        return -1;
    l->revision[l->n] = ev->revision;
    l->kind[l->n] = (int)ev->kind;
    snprintf(l->session[l->n], 64, "%.*s", (int)ev->lease.session_len,
             ev->lease.session);
    snprintf(l->owner[l->n], 64, "%.*s", (int)ev->lease.owner_len,
             ev->lease.owner);
    l->token[l->n] = ev->lease.token;
    l->n++;
    return 0;
}

/* Events go in with the changes they tell of, or not at all, and only
 * the last `keep` revisions stay. */
TEST(events_commit_with_their_changes_and_are_compacted)
{
    fresh();
    struct store *s = open_store();
    struct engine_change a = put("s1", "A", 1, 100);
    struct store_event ea = event(1, STORE_GRANTED, &a);
    CHECK_EQ_I64(store_apply_events(s, &a, 1, &ea, 1, 3), STORE_OK);
    /* A stale change: its batch, events included, rolls back. */
    struct engine_change stale = update(put("s1", "X", 9, 0), "B", 2, 200);
    struct store_event es = event(2, STORE_GRANTED, &stale);
    CHECK_EQ_I64(store_apply_events(s, &stale, 1, &es, 1, 3), STORE_ECONFLICT);
    struct engine_change b = update(a, "", 1, 100); /* released */
    struct store_event eb = {2, STORE_RELEASED, a.after};
    CHECK_EQ_I64(store_apply_events(s, &b, 1, &eb, 1, 3), STORE_OK);
    struct events l = {0};
    CHECK_EQ_I64(store_load_events(s, collect_event, &l), STORE_OK);
    CHECK_EQ_I64(l.n, 2);
    CHECK_EQ_I64(l.revision[0], 1);
    CHECK_EQ_I64(l.kind[0], STORE_GRANTED);
    CHECK_STR(l.owner[0], "A");
    CHECK_EQ_I64(l.revision[1], 2);
    CHECK_EQ_I64(l.kind[1], STORE_RELEASED);
    CHECK_STR(l.session[1], "s1");
    CHECK_EQ_I64(l.token[1], 1);
    /* Two more, keeping 3: revision 1 goes. */
    struct engine_change c = put("s2", "C", 5, 0), d = put("s3", "D", 6, 0);
    struct engine_change cd[] = {c, d};
    struct store_event ecd[] = {event(3, STORE_GRANTED, &c),
                                event(4, STORE_GRANTED, &d)};
    CHECK_EQ_I64(store_apply_events(s, cd, 2, ecd, 2, 3), STORE_OK);
    store_close(s);
    s = open_store();
    memset(&l, 0, sizeof(l));
    CHECK_EQ_I64(store_load_events(s, collect_event, &l), STORE_OK);
    CHECK_EQ_I64(l.n, 3);
    CHECK_EQ_I64(l.revision[0], 2);
    CHECK_EQ_I64(l.revision[2], 4);
    CHECK_STR(l.owner[2], "D");
    store_close(s);
}

/* A database of leased before Watch (schema version 1) keeps its leases
 * and gets the events table. */
TEST(version_1_is_upgraded)
{
    fresh();
    sqlite3 *db;
    CHECK_EQ_I64(sqlite3_open(path, &db), SQLITE_OK);
    CHECK_EQ_I64(
        sqlite3_exec(db,
                     "CREATE TABLE leases(session_id TEXT PRIMARY KEY NOT "
                     "NULL, owner TEXT NOT NULL, token INTEGER NOT NULL, "
                     "expiry_ns INTEGER NOT NULL) WITHOUT ROWID;"
                     "CREATE TABLE meta(key TEXT PRIMARY KEY NOT NULL, "
                     "value INTEGER NOT NULL) WITHOUT ROWID;"
                     "INSERT INTO meta VALUES('token_floor', 3);"
                     "INSERT INTO leases VALUES('s', 'A', 7, 100);"
                     "PRAGMA user_version = 1;",
                     0, 0, 0),
        SQLITE_OK);
    sqlite3_close(db);
    struct store *s = open_store();
    struct loaded l = {0};
    uint64_t floor = 0;
    CHECK_EQ_I64(store_load(s, collect, &l, &floor), STORE_OK);
    CHECK_EQ_I64(l.n, 1);
    CHECK_STR(l.owner[0], "A");
    CHECK_EQ_I64(l.token[0], 7);
    CHECK_EQ_I64(floor, 3);
    struct events e = {0};
    CHECK_EQ_I64(store_load_events(s, collect_event, &e), STORE_OK);
    CHECK_EQ_I64(e.n, 0);
    struct engine_change b = update(put("s", "A", 7, 100), "", 7, 100);
    struct store_event eb = {1, STORE_RELEASED, b.before};
    CHECK_EQ_I64(store_apply_events(s, &b, 1, &eb, 1, 10), STORE_OK);
    CHECK_EQ_I64(store_load_events(s, collect_event, &e), STORE_OK);
    CHECK_EQ_I64(e.n, 1);
    store_close(s);
}

/* A restore (the token floor raised) forgets the events kept and moves
 * revisions on; the same floor again moves nothing. */
TEST(a_restore_moves_revisions_on)
{
    fresh();
    struct store *s = open_store();
    struct engine_change a = put("s1", "A", 5, 100);
    struct store_event ea = event(7, STORE_GRANTED, &a);
    CHECK_EQ_I64(store_apply_events(s, &a, 1, &ea, 1, 10), STORE_OK);
    size_t raised;
    int64_t rf = -1;
    CHECK_EQ_I64(store_raise_tokens(s, 9, &raised), STORE_OK);
    CHECK_EQ_I64(store_get_meta(s, "revision_floor", &rf), STORE_OK);
    CHECK_EQ_I64(rf, 7 + 1000000000);
    struct events l = {0};
    CHECK_EQ_I64(store_load_events(s, collect_event, &l), STORE_OK);
    CHECK_EQ_I64(l.n, 0);
    CHECK_EQ_I64(store_raise_tokens(s, 9, &raised), STORE_OK);
    CHECK_EQ_I64(store_get_meta(s, "revision_floor", &rf), STORE_OK);
    CHECK_EQ_I64(rf, 7 + 1000000000);
    store_close(s);
}

CHECK_MAIN(meta_values_survive_reopen, put_update_and_reload,
           a_restore_moves_revisions_on,
           events_commit_with_their_changes_and_are_compacted,
           version_1_is_upgraded, stale_condition_rolls_back_whole_batch,
           changes_match_owner_and_token_not_expiry,
           delete_raises_floor_never_lowers,
           raise_tokens_lifts_rows_and_floor_never_lowers, newer_schema_refused,
           busy_database_fails_then_recovers)
