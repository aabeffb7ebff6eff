/*
 * The SQLite storage engine (see store.h): the only file that includes
 * sqlite3.h.
 *
 * Schema (PRAGMA user_version = 2; a version-1 database is upgraded):
 *   leases(session_id TEXT PRIMARY KEY, owner TEXT, token, expiry_ns)
 *     owner '' means released; expiry_ns is wall-clock ns since the epoch,
 *     as of the row's last change of owner: renewals are kept in memory
 *     only (the restart quarantine covers them; see daemon/mode_embedded.c).
 *   meta(key TEXT PRIMARY KEY, value INTEGER)
 *     'token_floor': the highest token of every row ever deleted; new
 *     sessions start above it, so deleting rows never lowers a token.
 *     'quarantine_ttl_ns': the longest TTL whose leases may still be live
 *     (see daemon/mode_embedded.c); absent in a new database.
 *     'storage_checked_ns': when the daemon last wrote to check that
 *     storage works again after a failure (see daemon/mode_embedded.c).
 *     'revision_floor': revisions of events start above it (set by
 *     store_raise_tokens at a restore); absent until then.
 *   events(revision INTEGER PRIMARY KEY, session_id, kind, owner, token,
 *          expiry_ns)
 *     the last changes of leases, for Watch (store_apply_events): each
 *     written in the transaction of the change it tells of, the oldest
 *     deleted as new ones come. Version 2.
 *
 * WAL mode, one connection, BEGIN IMMEDIATE, a bounded busy timeout.
 * synchronous is NORMAL: a commit writes its WAL frames (safe from a
 * crash of the process) and store_sync() fdatasyncs the WAL on demand,
 * which is what synchronous=FULL would do at every commit. It does so
 * through a descriptor of its own, touching nothing of SQLite's, so a
 * sync may run on one thread while the next batch commits on another:
 * fdatasync covers at least every frame written before it began. Our
 * connection stays open, so SQLite never deletes the WAL (a checkpoint
 * only rewrites it from the start).
 */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "errmsg.h"
#include "faultpoint.h"

#define SCHEMA_VERSION 2

enum stmt_id {
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_PUT,
    ST_DELETE,
    ST_RAISE_FLOOR,
    ST_EVENT,
    ST_COMPACT,
    ST_COUNT,
};

static const char *const stmt_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    /* A conditional upsert: a new row only if none exists (?5 NULL never
     * compares equal), an update only if the row still has owner ?5 and
     * token ?6. Not its expiry: renewals are not written (see the top). */
    [ST_PUT] = "INSERT INTO leases(session_id, owner, token, expiry_ns) "
               "VALUES(?1, ?2, ?3, ?4) ON CONFLICT(session_id) DO UPDATE "
               "SET owner = excluded.owner, token = excluded.token, "
               "expiry_ns = excluded.expiry_ns "
               "WHERE leases.owner = ?5 AND leases.token = ?6 RETURNING token",
    [ST_DELETE] = "DELETE FROM leases WHERE session_id = ?1 AND owner = ?2 "
                  "AND token = ?3 RETURNING token",
    [ST_RAISE_FLOOR] = "UPDATE meta SET value = max(value, ?1) "
                       "WHERE key = 'token_floor'",
    [ST_EVENT] = "INSERT INTO events(revision, session_id, kind, owner, "
                 "token, expiry_ns) VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
    [ST_COMPACT] = "DELETE FROM events WHERE revision <= ?1",
};

struct store {
    sqlite3 *db;
    int wal_fd; /* our own descriptor of the WAL, for store_sync */
    sqlite3_stmt *stmt[ST_COUNT];
    char errmsg[256];
    /* A read-only connection of its own for store_list, so that a list
     * runs beside commits (WAL readers do not block the writer). */
    sqlite3 *reader;
    sqlite3_stmt *list;
    char list_errmsg[256];
};

#define LIST_SQL                                                          \
    "SELECT session_id, owner, token, expiry_ns FROM leases "             \
    "WHERE session_id > ?1 AND session_id >= ?2 ORDER BY session_id"

__attribute__((format(printf, 3, 4))) static int
fail(struct store *s, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errmsg_vfail(err, s->errmsg, sizeof(s->errmsg), fmt, ap);
    va_end(ap);
    return err;
}

static int err_of(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return STORE_EBUSY;
    case SQLITE_NOMEM:
        return STORE_ENOMEM;
    default:
        return STORE_EIO;
    }
}

static int sql_fail(struct store *s, int rc, const char *what)
{
    return fail(s, err_of(rc), "%s: %s (%s)", what, sqlite3_errmsg(s->db),
                sqlite3_errstr(rc));
}

static int exec(struct store *s, const char *sql)
{
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? STORE_OK : sql_fail(s, rc, sql);
}

/* Runs a prepared statement that returns no row. */
static int step_done(struct store *s, enum stmt_id id)
{
    sqlite3_stmt *st = s->stmt[id];
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE ? STORE_OK : sql_fail(s, rc, stmt_sql[id]);
}

static int migrate(struct store *s)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(s->db, "PRAGMA user_version", -1, &st, NULL);
    if (rc != SQLITE_OK)
        return sql_fail(s, rc, "reading the schema version");
    int version = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0)
                                                 : -1;
    sqlite3_finalize(st);
    if (version == SCHEMA_VERSION)
        return STORE_OK;
    if (version != 0 && version != 1)
        return fail(s, STORE_ECONFIG,
                    "schema version %d is not %d: this database belongs to "
                    "another version of leased",
                    version, SCHEMA_VERSION);
    if (version == 0) {
        int err = exec(s, "BEGIN IMMEDIATE;"
                          "CREATE TABLE leases("
                          "  session_id TEXT PRIMARY KEY NOT NULL,"
                          "  owner TEXT NOT NULL,"
                          "  token INTEGER NOT NULL,"
                          "  expiry_ns INTEGER NOT NULL) WITHOUT ROWID;"
                          "CREATE TABLE meta("
                          "  key TEXT PRIMARY KEY NOT NULL,"
                          "  value INTEGER NOT NULL) WITHOUT ROWID;"
                          "INSERT INTO meta(key, value) "
                          "VALUES('token_floor', 0);"
                          "PRAGMA user_version = 1;"
                          "COMMIT;");
        if (err != STORE_OK)
            return err;
    }
    return exec(s, "BEGIN IMMEDIATE;"
                   "CREATE TABLE events("
                   "  revision INTEGER PRIMARY KEY NOT NULL,"
                   "  session_id TEXT NOT NULL,"
                   "  kind INTEGER NOT NULL,"
                   "  owner TEXT NOT NULL,"
                   "  token INTEGER NOT NULL,"
                   "  expiry_ns INTEGER NOT NULL);"
                   "PRAGMA user_version = 2;"
                   "COMMIT;");
}

/* Opens our descriptor of the WAL (which exists once the database has
 * been read in WAL mode) and syncs the directory, so that the WAL's name
 * is as durable as its contents will be. */
static int open_wal(struct store *s, const char *path)
{
    char wal[PATH_MAX], dir[PATH_MAX];
    snprintf(wal, sizeof(wal), "%s-wal", path);
    s->wal_fd = open(wal, O_RDONLY | O_CLOEXEC);
    if (s->wal_fd < 0)
        return fail(s, STORE_EIO, "opening %s: %s", wal, strerror(errno));
    snprintf(dir, sizeof(dir), "%s", path);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = dfd >= 0 ? fsync(dfd) : -1;
    int e = errno;
    if (dfd >= 0)
        close(dfd);
    return rc == 0 ? STORE_OK
                   : fail(s, STORE_EIO, "syncing the data directory: %s",
                          strerror(e));
}

enum store_err store_open(const char *path, int busy_timeout_ms,
                          struct store **out, char *errmsg, size_t errmsg_len)
{
    *out = NULL;
    struct store *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        snprintf(errmsg, errmsg_len, "out of memory");
        return STORE_ENOMEM;
    }
    s->wal_fd = -1;
    int rc = sqlite3_open_v2(path, &s->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                 SQLITE_OPEN_NOMUTEX,
                             NULL);
    int err;
    if (rc != SQLITE_OK) {
        err = s->db != NULL ? sql_fail(s, rc, path)
                            : fail(s, STORE_ENOMEM, "out of memory");
        goto out;
    }
    sqlite3_busy_timeout(s->db, busy_timeout_ms);
    sqlite3_extended_result_codes(s->db, 1);
    err = exec(s, "PRAGMA journal_mode = WAL");
    if (err == STORE_OK)
        err = exec(s, "PRAGMA synchronous = NORMAL");
    if (err == STORE_OK)
        err = exec(s, "PRAGMA foreign_keys = OFF");
    if (err == STORE_OK)
        err = migrate(s);
    for (int i = 0; err == STORE_OK && i < ST_COUNT; i++) {
        rc = sqlite3_prepare_v3(s->db, stmt_sql[i], -1,
                                SQLITE_PREPARE_PERSISTENT, &s->stmt[i], NULL);
        if (rc != SQLITE_OK)
            err = sql_fail(s, rc, stmt_sql[i]);
    }
    if (err == STORE_OK)
        err = open_wal(s, path);
    if (err == STORE_OK) {
        rc = sqlite3_open_v2(path, &s->reader,
                             SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_prepare_v3(s->reader, LIST_SQL, -1,
                                    SQLITE_PREPARE_PERSISTENT, &s->list, NULL);
        if (rc != SQLITE_OK)
            err = fail(s, STORE_EIO, "opening the reader: %s",
                       s->reader != NULL ? sqlite3_errmsg(s->reader)
                                         : "out of memory");
        else
            sqlite3_busy_timeout(s->reader, busy_timeout_ms);
    }
out:
    if (err != STORE_OK) {
        snprintf(errmsg, errmsg_len, "%s", s->errmsg);
        store_close(s);
        return err;
    }
    *out = s;
    return STORE_OK;
}

void store_close(struct store *s)
{
    if (s == NULL)
        return;
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(s->stmt[i]);
    sqlite3_finalize(s->list);
    sqlite3_close(s->reader);
    sqlite3_close(s->db);
    if (s->wal_fd >= 0)
        close(s->wal_fd);
    free(s);
}

const char *store_errmsg(const struct store *s)
{
    return s->errmsg;
}

/* The current row of a SELECT session_id, owner, token, expiry_ns
 * (strings valid until the next step). */
static struct lease_row row_of(sqlite3_stmt *st)
{
    struct lease_row row = {
        .session = (const char *)sqlite3_column_text(st, 0),
        .session_len = (size_t)sqlite3_column_bytes(st, 0),
        .owner = (const char *)sqlite3_column_text(st, 1),
        .owner_len = (size_t)sqlite3_column_bytes(st, 1),
        .token = (uint64_t)sqlite3_column_int64(st, 2),
        .expiry_ns = sqlite3_column_int64(st, 3),
    };
    return row;
}

enum store_err store_load(struct store *s,
                          int (*row_cb)(void *arg, const struct lease_row *row),
                          void *arg, uint64_t *floor)
{
    /* A negative control of the fault campaign: tokens forgotten. */
    if (FAULT_BROKEN("forget_tokens")) {
        int err = exec(s, "DELETE FROM leases; "
                          "UPDATE meta SET value = 0 "
                          "WHERE key = 'token_floor'");
        if (err != STORE_OK)
            return err;
    }
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(
        s->db, "SELECT session_id, owner, token, expiry_ns FROM leases", -1,
        &st, NULL);
    if (rc != SQLITE_OK)
        return sql_fail(s, rc, "loading leases");
    int err = STORE_OK;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct lease_row row = row_of(st);
        if (row.session == NULL || row.session_len == 0 ||
            row.session_len > ENGINE_SESSION_MAX ||
            row.owner_len > ENGINE_OWNER_MAX ||
            (row.owner_len > 0 && row.token == 0)) {
            err = fail(s, STORE_EIO, "corrupt lease row");
            break;
        }
        err = row_cb(arg, &row);
        if (err != 0)
            break;
    }
    if (err == STORE_OK && rc != SQLITE_DONE)
        err = sql_fail(s, rc, "loading leases");
    sqlite3_finalize(st);
    if (err != STORE_OK)
        return err;

    rc = sqlite3_prepare_v2(
        s->db, "SELECT value FROM meta WHERE key = 'token_floor'", -1, &st,
        NULL);
    if (rc != SQLITE_OK)
        return sql_fail(s, rc, "loading the token floor");
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *floor = (uint64_t)sqlite3_column_int64(st, 0);
    else
        err = rc == SQLITE_DONE ? fail(s, STORE_EIO, "no token floor")
                                : sql_fail(s, rc, "loading the token floor");
    sqlite3_finalize(st);
    return err;
}

static void bind_text(sqlite3_stmt *st, int i, const char *p, size_t n)
{
    /* Owners of released rows are '' (never NULL: NULL means absent). */
    sqlite3_bind_text(st, i, n > 0 ? p : "", (int)n, SQLITE_STATIC);
}

/* Runs ST_PUT or ST_DELETE, which must return exactly one row. */
static int step_returning(struct store *s, enum stmt_id id)
{
    sqlite3_stmt *st = s->stmt[id];
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        rc = sqlite3_step(st);
    else if (rc == SQLITE_DONE)
        rc = SQLITE_NOTFOUND; /* the condition did not hold */
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (rc == SQLITE_DONE)
        return STORE_OK;
    if (rc == SQLITE_NOTFOUND)
        return fail(s, STORE_ECONFLICT,
                    "the stored row is not what the engine saw");
    return sql_fail(s, rc, stmt_sql[id]);
}

static int apply_one(struct store *s, const struct engine_change *c,
                     uint64_t *deleted_max)
{
    if (c->kind == ENGINE_DELETE) {
        sqlite3_stmt *st = s->stmt[ST_DELETE];
        bind_text(st, 1, c->before.session, c->before.session_len);
        bind_text(st, 2, c->before.owner, c->before.owner_len);
        sqlite3_bind_int64(st, 3, (sqlite3_int64)c->before.token);
        if (c->before.token > *deleted_max)
            *deleted_max = c->before.token;
        return step_returning(s, ST_DELETE);
    }
    sqlite3_stmt *st = s->stmt[ST_PUT];
    bind_text(st, 1, c->after.session, c->after.session_len);
    bind_text(st, 2, c->after.owner, c->after.owner_len);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)c->after.token);
    sqlite3_bind_int64(st, 4, c->after.expiry_ns);
    if (c->has_before) {
        bind_text(st, 5, c->before.owner, c->before.owner_len);
        sqlite3_bind_int64(st, 6, (sqlite3_int64)c->before.token);
    } else {
        sqlite3_bind_null(st, 5);
        sqlite3_bind_null(st, 6);
    }
    return step_returning(s, ST_PUT);
}

/* store_sync, with the reason kept for store_errmsg. */
static int sync_or_fail(struct store *s)
{
    return store_sync(s) == STORE_OK
               ? STORE_OK
               : fail(s, STORE_ESYNC, "syncing the WAL: %s", strerror(errno));
}

/* After a failure inside a transaction: best effort, and the first
 * error's message stays. */
static void roll_back(struct store *s)
{
    if (sqlite3_get_autocommit(s->db))
        return;
    char keep[sizeof(s->errmsg)];
    memcpy(keep, s->errmsg, sizeof(keep));
    step_done(s, ST_ROLLBACK);
    memcpy(s->errmsg, keep, sizeof(keep));
}

static int raise_floor(struct store *s, uint64_t floor)
{
    sqlite3_bind_int64(s->stmt[ST_RAISE_FLOOR], 1, (sqlite3_int64)floor);
    return step_done(s, ST_RAISE_FLOOR);
}

static int insert_event(struct store *s, const struct store_event *ev)
{
    sqlite3_stmt *st = s->stmt[ST_EVENT];
    sqlite3_bind_int64(st, 1, (sqlite3_int64)ev->revision);
    bind_text(st, 2, ev->lease.session, ev->lease.session_len);
    sqlite3_bind_int(st, 3, (int)ev->kind);
    bind_text(st, 4, ev->lease.owner, ev->lease.owner_len);
    sqlite3_bind_int64(st, 5, (sqlite3_int64)ev->lease.token);
    sqlite3_bind_int64(st, 6, ev->lease.expiry_ns);
    int err = step_done(s, ST_EVENT);
    sqlite3_clear_bindings(st);
    return err;
}

enum store_err store_apply_events(struct store *s,
                                  const struct engine_change *chgs, size_t n,
                                  const struct store_event *evs, size_t nevs,
                                  uint64_t keep)
{
    int err = step_done(s, ST_BEGIN);
    if (err != STORE_OK)
        return err;
    uint64_t deleted_max = 0;
    for (size_t i = 0; i < n && err == STORE_OK; i++)
        err = apply_one(s, &chgs[i], &deleted_max);
    if (err == STORE_OK && deleted_max > 0)
        err = raise_floor(s, deleted_max);
    for (size_t i = 0; i < nevs && err == STORE_OK; i++)
        err = insert_event(s, &evs[i]);
    if (err == STORE_OK && nevs > 0 && evs[nevs - 1].revision > keep) {
        sqlite3_bind_int64(s->stmt[ST_COMPACT], 1,
                           (sqlite3_int64)(evs[nevs - 1].revision - keep));
        err = step_done(s, ST_COMPACT);
    }
    if (err == STORE_OK)
        err = step_done(s, ST_COMMIT);
    if (err != STORE_OK)
        roll_back(s);
    return err;
}

enum store_err store_apply(struct store *s, const struct engine_change *chgs,
                           size_t n)
{
    return store_apply_events(s, chgs, n, NULL, 0, 0);
}

enum store_err store_load_events(struct store *s,
                                 int (*ev_cb)(void *arg,
                                              const struct store_event *ev),
                                 void *arg)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(s->db,
                                "SELECT session_id, owner, token, expiry_ns, "
                                "revision, kind FROM events ORDER BY revision",
                                -1, &st, NULL);
    if (rc != SQLITE_OK)
        return sql_fail(s, rc, "loading events");
    int err = STORE_OK;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct store_event ev = {
            .lease = row_of(st),
            .revision = (uint64_t)sqlite3_column_int64(st, 4),
            .kind = (enum store_event_kind)sqlite3_column_int(st, 5),
        };
        if (ev.lease.session_len == 0 ||
            ev.lease.session_len > ENGINE_SESSION_MAX ||
            ev.lease.owner_len > ENGINE_OWNER_MAX || ev.revision == 0 ||
            ev.kind < STORE_GRANTED || ev.kind > STORE_REVOKED) {
            err = fail(s, STORE_EIO, "corrupt event row");
            break;
        }
        err = ev_cb(arg, &ev);
        if (err != 0)
            break;
    }
    if (err == STORE_OK && rc != SQLITE_DONE)
        err = sql_fail(s, rc, "loading events");
    sqlite3_finalize(st);
    return err;
}

enum store_err store_cap_expiries(struct store *s, int64_t cap_ns,
                                  size_t *capped)
{
    *capped = 0;
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(
        s->db, "UPDATE leases SET expiry_ns = ?1 WHERE expiry_ns > ?1", -1,
        &st, NULL);
    if (rc != SQLITE_OK)
        return sql_fail(s, rc, "capping expiries");
    sqlite3_bind_int64(st, 1, cap_ns);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return sql_fail(s, rc, "capping expiries");
    *capped = (size_t)sqlite3_changes(s->db);
    return STORE_OK;
}

enum store_err store_raise_tokens(struct store *s, uint64_t floor,
                                  size_t *raised)
{
    *raised = 0;
    int err = step_done(s, ST_BEGIN);
    if (err != STORE_OK)
        return err;
    /* A floor raised is a restore: the backup's revisions may have been
     * told, with other changes, before it; they start again past them. */
    int64_t was = 0;
    err = store_get_meta(s, "token_floor", &was);
    if (err == STORE_OK && (uint64_t)was < floor)
        err = exec(s, "INSERT INTO meta(key, value) VALUES('revision_floor',"
                      " max(coalesce((SELECT max(revision) FROM events), 0),"
                      " coalesce((SELECT value FROM meta"
                      " WHERE key = 'revision_floor'), 0)) + 1000000000)"
                      " ON CONFLICT(key) DO UPDATE SET value = excluded.value;"
                      "DELETE FROM events");
    if (err != STORE_OK) {
        roll_back(s);
        return err;
    }
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(
        s->db, "UPDATE leases SET token = ?1 WHERE token < ?1", -1, &st,
        NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, (sqlite3_int64)floor);
        rc = sqlite3_step(st);
        sqlite3_finalize(st);
    }
    if (rc != SQLITE_OK && rc != SQLITE_DONE)
        err = sql_fail(s, rc, "raising tokens");
    else
        *raised = (size_t)sqlite3_changes(s->db);
    if (err == STORE_OK)
        err = raise_floor(s, floor);
    if (err == STORE_OK)
        err = step_done(s, ST_COMMIT);
    if (err != STORE_OK) {
        roll_back(s);
        return err;
    }
    return sync_or_fail(s);
}

enum store_err store_get_meta(struct store *s, const char *key, int64_t *value)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(s->db, "SELECT value FROM meta WHERE key = ?1",
                                -1, &st, NULL);
    if (rc != SQLITE_OK)
        return sql_fail(s, rc, "reading meta");
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    *value = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? STORE_OK
                                                 : sql_fail(s, rc, key);
}

enum store_err store_sync(struct store *s)
{
    return fdatasync(s->wal_fd) == 0 ? STORE_OK : STORE_ESYNC;
}

enum store_err store_set_meta(struct store *s, const char *key, int64_t value)
{
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(
        s->db,
        "INSERT INTO meta(key, value) VALUES(?1, ?2) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        -1, &st, NULL);
    if (rc != SQLITE_OK)
        return sql_fail(s, rc, "writing meta");
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, value);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return sql_fail(s, rc, key);
    return sync_or_fail(s);
}

enum store_err store_list(struct store *s, const char *prefix,
                          size_t prefix_len, const char *after,
                          size_t after_len, size_t limit,
                          int (*row_cb)(void *arg, const struct lease_row *row),
                          void *arg)
{
    sqlite3_stmt *st = s->list;
    sqlite3_bind_text(st, 1, after, (int)after_len, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, prefix, (int)prefix_len, SQLITE_STATIC);
    int rc, err = STORE_OK;
    size_t n = 0;
    /* Rows with the prefix are next to each other in session_id order:
     * the first row without it ends the list. */
    while (n < limit && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct lease_row row = row_of(st);
        if (row.session == NULL || row.session_len < prefix_len ||
            memcmp(row.session, prefix, prefix_len) != 0) {
            rc = SQLITE_DONE;
            break;
        }
        if (row.owner_len == 0)
            continue; /* released */
        n++;
        if ((err = row_cb(arg, &row)) != 0)
            break;
    }
    if (err == STORE_OK && n < limit && rc != SQLITE_DONE) {
        snprintf(s->list_errmsg, sizeof(s->list_errmsg), "listing: %s",
                 sqlite3_errmsg(s->reader));
        err = err_of(rc);
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return err < 0 ? err : STORE_OK; /* 1: row_cb stopped the list */
}

enum store_err store_snapshot(struct store *s, void **out, size_t *len)
{
    sqlite3_int64 n = 0;
    unsigned char *p = sqlite3_serialize(s->reader, "main", &n, 0);
    if (p == NULL) {
        /* No way to tell out of memory from an I/O error: the message
         * of the connection, if it has one, says which. */
        snprintf(s->list_errmsg, sizeof(s->list_errmsg), "snapshot: %s",
                 sqlite3_errcode(s->reader) != SQLITE_OK
                     ? sqlite3_errmsg(s->reader)
                     : "out of memory");
        return sqlite3_errcode(s->reader) != SQLITE_OK ? STORE_EIO
                                                       : STORE_ENOMEM;
    }
    *out = p;
    *len = (size_t)n;
    return STORE_OK;
}

void store_snapshot_free(void *p)
{
    sqlite3_free(p);
}

const char *store_list_errmsg(const struct store *s)
{
    return s->list_errmsg;
}
