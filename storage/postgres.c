/*
 * The PostgreSQL store (see postgres.h): the only file that includes
 * libpq-fe.h. The SQL it runs, and what the schema holds, are in pgsql.c.
 *
 * The connection is always in pipeline mode. Batches of lease calls are
 * queued in it without waiting (pgstore_send(), pgstore_done()), each
 * one statement and a sync: one transaction. Everything else is a
 * blocking round trip, made only while no batch is in flight. Each has a
 * deadline of our own (a stopped server never answers, and libpq would
 * wait forever); a missed deadline loses the connection, since it is
 * then unknown what the server will still do with what it was sent.
 */
#include "postgres.h"

#include <assert.h>
#include <errno.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"
#include "faultpoint.h"
#include "nanotime.h"
#include "pgsql.h"

#define MAX_PARAMS 5
#define CONNECT_TIMEOUT_S_MIN 2 /* libpq's own minimum */
/* How often a backend running a batch checks that the replica is still
 * connected (PostgreSQL 14 and later). */
#define CHECK_CLOSED_MS "100"

/* A one-dimensional array parameter in PostgreSQL's binary format. */
struct array {
    unsigned char *data;
    size_t len, cap;
    uint32_t count;
    bool failed; /* out of memory */
};

/* A batch sent and not answered yet. */
struct pending {
    struct pgstore_call *calls; /* the caller's, n of them */
    size_t n, sent;             /* sent: those not decided here */
    size_t *order;              /* calls[] in session order */
    size_t order_cap;
    int64_t deadline_ms;
    PGresult *res; /* the decision's result */
    bool ended;    /* its results are read: the sync's is next */
};

struct pgstore {
    struct pgstore_options o;
    PGconn *conn;
    char *password; /* from the conninfo, to keep out of messages */
    PGresult **res; /* one per query of a blocking round trip */
    size_t res_cap;
    struct array args[4]; /* a batch's ops, sessions, owners, tokens */
    /* The pipeline: batches in flight, oldest (pipe[first]) first. */
    struct pending pipe[PGSTORE_PIPELINE_MAX];
    size_t first, npipe;
    /* The pipeline's connection broke: it stays open, its socket maybe
     * still watched, until pgstore_disconnect(). */
    bool lost;
    /* A synchronous standby's wait warned during a batch: its commit may
     * then report success for a transaction the standby never confirmed
     * (an operator cancelled the wait). */
    bool warned;
    /* Other warnings since pgstore_warnings() took them, and the last. */
    uint64_t warnings;
    char warning[256];
    /* The start of the database server (pg_postmaster_start_time(), us)
     * of the last connection that succeeded, and of the one being made. */
    int64_t seen_started_us, connecting_started_us;
    char owner[ENGINE_OWNER_MAX]; /* pgstore_get()'s, pgstore_revoke()'s row */
    char errmsg[256];
};

/* The parameters of one query, all in binary. */
struct params {
    int n;
    const char *v[MAX_PARAMS];
    int len[MAX_PARAMS];
    int fmt[MAX_PARAMS];
    unsigned char ints[MAX_PARAMS][8];
};

static void add_bytes(struct params *q, const char *p, size_t len)
{
    q->v[q->n] = p;
    q->len[q->n] = (int)len;
    q->fmt[q->n++] = 1;
}

static void add_null(struct params *q)
{
    q->v[q->n] = NULL;
    q->len[q->n] = 0;
    q->fmt[q->n++] = 1;
}

/* value in network order, in bytes (4 or 8) bytes: PostgreSQL's binary
 * integers. */
static void put_int(unsigned char *b, int64_t value, int bytes)
{
    uint64_t u = (uint64_t)value;
    for (int i = 0; i < bytes; i++)
        b[i] = (unsigned char)(u >> (8 * (bytes - 1 - i)));
}

static void add_int(struct params *q, int64_t value, int bytes)
{
    put_int(q->ints[q->n], value, bytes);
    add_bytes(q, (const char *)q->ints[q->n], (size_t)bytes);
}

static void array_put(struct array *a, const void *src, size_t n)
{
    if (a->failed)
        return;
    if (a->len + n > a->cap) {
        size_t cap = a->cap != 0 ? a->cap : 1024;
        while (cap < a->len + n)
            cap *= 2;
        unsigned char *d = realloc(a->data, cap);
        if (d == NULL) {
            a->failed = true;
            return;
        }
        a->data = d;
        a->cap = cap;
    }
    memcpy(a->data + a->len, src, n);
    a->len += n;
}

/* Header: one dimension, no NULLs, the elements' type, the count (set by
 * add_array()), lower bound 1. */
static void array_start(struct array *a, uint32_t type_oid)
{
    unsigned char h[20];
    put_int(h, 1, 4);
    put_int(h + 4, 0, 4);
    put_int(h + 8, type_oid, 4);
    put_int(h + 12, 0, 4);
    put_int(h + 16, 1, 4);
    a->len = 0;
    a->count = 0;
    a->failed = false;
    array_put(a, h, sizeof(h));
}

static void array_add(struct array *a, const void *v, size_t n)
{
    unsigned char len[4];
    put_int(len, (int64_t)n, 4);
    array_put(a, len, sizeof(len));
    array_put(a, v, n);
    a->count++;
}

static void array_add_int(struct array *a, int64_t value, int bytes)
{
    unsigned char b[8];
    put_int(b, value, bytes);
    array_add(a, b, (size_t)bytes);
}

static void add_array(struct params *q, struct array *a)
{
    put_int(a->data + 12, a->count, 4);
    add_bytes(q, (const char *)a->data, a->len);
}

static int64_t get_int(const PGresult *r, int row, int col)
{
    const unsigned char *p = (const unsigned char *)PQgetvalue(r, row, col);
    int n = PQgetlength(r, row, col);
    uint64_t u = 0;
    for (int i = 0; i < n; i++)
        u = u << 8 | p[i];
    if (n == 4)
        return (int32_t)u;
    return (int64_t)u;
}

/* Writes fmt's text into buf[0..size), on one line, without the
 * password. */
__attribute__((format(printf, 4, 5))) static void
put_clean(const struct pgstore *p, char *buf, size_t size, const char *fmt,
          ...)
{
    va_list ap;
    va_start(ap, fmt);
    bool cut = vsnprintf(buf, size, fmt, ap) >= (int)size;
    va_end(ap);
    size_t n = strlen(buf);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    for (char *c = buf; *c != '\0'; c++)
        if (*c == '\n' || *c == '\t')
            *c = ' ';
    if (p->password == NULL || p->password[0] == '\0')
        return;
    /* Each occurrence becomes three stars (as many as it has, if fewer):
     * never longer than it was, and searched for after the stars. */
    size_t pn = strlen(p->password), stars = pn < 3 ? pn : 3;
    char *at = buf, *hit;
    while ((hit = strstr(at, p->password)) != NULL) {
        memset(hit, '*', stars);
        memmove(hit + stars, hit + pn, strlen(hit + pn) + 1);
        at = hit + stars;
    }
    /* Cut short, the message may end in the password's first characters. */
    n = strlen(buf);
    for (size_t k = pn - 1 < n ? pn - 1 : n; cut && k > 0; k--) {
        if (memcmp(buf + n - k, p->password, k) == 0) {
            memset(buf + n - k, '*', k);
            break;
        }
    }
}

/* Writes why into p->errmsg, on one line, without the password. */
#define set_error(p, ...)                                                      \
    put_clean((p), (p)->errmsg, sizeof((p)->errmsg), __VA_ARGS__)

/* Notices stay out of the daemon's output. A warning from the wait for
 * a synchronous standby (raised in syncrep.c; one that does not say where
 * it was raised counts too) is noted: the commit it comes with reports
 * success for a transaction the standby may never have confirmed. Other
 * warnings (a trigger's RAISE WARNING, transaction ID wraparound coming
 * near) say nothing about a batch's outcome: counted, the last one kept,
 * for the operator. */
static void on_notice(void *arg, const PGresult *r)
{
    struct pgstore *p = arg;
    const char *sev = PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED);
    if (sev == NULL || strcmp(sev, "WARNING") != 0)
        return;
    const char *file = PQresultErrorField(r, PG_DIAG_SOURCE_FILE);
    if (file == NULL || strcmp(file, "syncrep.c") == 0) {
        p->warned = true;
        return;
    }
    const char *why = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
    p->warnings++;
    put_clean(p, p->warning, sizeof(p->warning), "%s",
              why != NULL ? why : "");
}

uint64_t pgstore_warnings(struct pgstore *p, char *msg, size_t len)
{
    uint64_t n = p->warnings;
    if (n > 0)
        snprintf(msg, len, "%s", p->warning);
    p->warnings = 0;
    return n;
}

/* Writes into p->errmsg why res failed. */
static void result_error(struct pgstore *p, const char *what,
                         const PGresult *res)
{
    const char *why = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    set_error(p, "%s: %s", what,
              why != NULL ? why : PQresultErrorMessage(res));
}

/* The connection is lost or in an unknown state: close it. */
static int down(struct pgstore *p, const char *what)
{
    if (p->conn != NULL) {
        set_error(p, "%s: %s", what, PQerrorMessage(p->conn));
        PQfinish(p->conn);
        p->conn = NULL;
    } else {
        set_error(p, "%s: not connected", what);
    }
    return PGSTORE_EDOWN;
}

static int64_t mono_ms(void)
{
    return nanotime_mono() / 1000000;
}

/* Waits until the socket is ready for events or the deadline passes. */
static int wait_socket(struct pgstore *p, short events, int64_t deadline_ms)
{
    int64_t left = deadline_ms - mono_ms();
    if (left <= 0)
        return -1;
    struct pollfd pfd = {PQsocket(p->conn), events, 0};
    int rc;
    do
        rc = poll(&pfd, 1, (int)left);
    while (rc < 0 && errno == EINTR);
    return rc > 0 ? 0 : -1;
}

static bool send_query(struct pgstore *p, enum pgsql_stmt s,
                       const struct params *q)
{
    char name[8];
    snprintf(name, sizeof(name), "s%d", (int)s);
    return PQsendQueryPrepared(
               p->conn, name, q != NULL ? q->n : 0, q != NULL ? q->v : NULL,
               q != NULL ? q->len : NULL, q != NULL ? q->fmt : NULL, 1) == 1;
}

static bool send_sql(struct pgstore *p, const char *sql)
{
    return PQsendQueryParams(p->conn, sql, 0, NULL, NULL, NULL, NULL, 1) == 1;
}

static void clear_results(struct pgstore *p, size_t nq)
{
    for (size_t i = 0; i < nq; i++) {
        PQclear(p->res[i]);
        p->res[i] = NULL;
    }
}

/* The next result, waiting for it until the deadline; NULL with *lost
 * set when the connection broke or the deadline passed. */
static PGresult *next_result(struct pgstore *p, int64_t deadline_ms,
                             bool *lost)
{
    while (PQisBusy(p->conn)) {
        if (wait_socket(p, POLLIN, deadline_ms) != 0 ||
            !PQconsumeInput(p->conn)) {
            *lost = true;
            return NULL;
        }
    }
    return PQgetResult(p->conn);
}

/* Ends the nq queries sent with a sync, sends them, and reads the result
 * of each into p->res[0..nq), then the sync's, all within the timeout.
 * PGSTORE_OK: every result is there (each may still be an error); the
 * caller clears them. */
static int round_trip(struct pgstore *p, size_t nq, const char *what)
{
    assert(p->npipe == 0 && !p->lost);
    int64_t deadline = mono_ms() + p->o.timeout_ms;
    if (!PQpipelineSync(p->conn))
        return down(p, what);
    int f;
    while ((f = PQflush(p->conn)) == 1) {
        if (wait_socket(p, POLLOUT | POLLIN, deadline) != 0 ||
            !PQconsumeInput(p->conn))
            return down(p, what);
    }
    if (f < 0)
        return down(p, what);
    bool lost = false;
    for (size_t i = 0; i < nq; i++) {
        PGresult *r;
        while ((r = next_result(p, deadline, &lost)) != NULL) {
            if (p->res[i] == NULL)
                p->res[i] = r;
            else
                PQclear(r);
        }
        if (lost)
            break;
    }
    PGresult *sync = lost ? NULL : next_result(p, deadline, &lost);
    bool synced = sync != NULL && PQresultStatus(sync) == PGRES_PIPELINE_SYNC;
    PQclear(sync);
    if (lost || !synced) {
        clear_results(p, nq);
        if (lost && mono_ms() >= deadline) {
            PQfinish(p->conn);
            p->conn = NULL;
            set_error(p, "%s: no answer within %d ms", what, p->o.timeout_ms);
            return PGSTORE_EDOWN;
        }
        return down(p, what);
    }
    return PGSTORE_OK;
}

/* Makes room for nq results. */
static int reserve(struct pgstore *p, size_t nq)
{
    if (nq <= p->res_cap)
        return PGSTORE_OK;
    PGresult **res = calloc(nq, sizeof(*res));
    if (res == NULL) {
        set_error(p, "out of memory");
        return PGSTORE_ENOMEM;
    }
    free(p->res);
    p->res = res;
    p->res_cap = nq;
    return PGSTORE_OK;
}

/* The first error among results[0..nq), in p->errmsg; PGSTORE_OK if none.
 * A failed transaction is rolled back. */
static int check_results(struct pgstore *p, size_t nq, const char *what)
{
    bool failed = false;
    for (size_t i = 0; i < nq; i++) {
        ExecStatusType st = PQresultStatus(p->res[i]);
        if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
            continue;
        result_error(p, what, p->res[i]);
        failed = true;
        break;
    }
    if (!failed)
        return PGSTORE_OK;
    if (PQtransactionStatus(p->conn) != PQTRANS_IDLE) {
        char keep[sizeof(p->errmsg)];
        memcpy(keep, p->errmsg, sizeof(keep));
        clear_results(p, nq);
        if (!send_query(p, PGSQL_ROLLBACK, NULL) ||
            round_trip(p, 1, "rolling back") != PGSTORE_OK)
            return PGSTORE_EDOWN;
        clear_results(p, 1);
        memcpy(p->errmsg, keep, sizeof(keep));
    }
    return PGSTORE_EFAIL;
}

/* Runs the nq queries the caller sent; on success their results are in
 * p->res and the caller clears them. */
static int finish(struct pgstore *p, size_t nq, const char *what)
{
    int err = round_trip(p, nq, what);
    if (err == PGSTORE_OK && (err = check_results(p, nq, what)) != PGSTORE_OK)
        clear_results(p, nq);
    return err;
}

/* One statement of SQL with no parameters and no result wanted. */
static int exec_sql(struct pgstore *p, const char *sql, const char *what)
{
    if (!send_sql(p, sql))
        return down(p, what);
    int err = finish(p, 1, what);
    clear_results(p, err == PGSTORE_OK ? 1 : 0);
    return err;
}

/* Prepared statement s with q (or none) in a round trip of its own: on
 * PGSTORE_OK its result is p->res[0], which the caller clears. */
static int run_one(struct pgstore *p, enum pgsql_stmt s,
                   const struct params *q, const char *what)
{
    if (p->conn == NULL || !send_query(p, s, q))
        return down(p, what);
    return finish(p, 1, what);
}

/* Reads one bigint meta value into *value (absent: *found false). */
static int get_meta(struct pgstore *p, const char *key, int64_t *value,
                    bool *found)
{
    const char *v[1] = {key};
    if (PQsendQueryParams(p->conn,
                          "SELECT value FROM leased_meta WHERE key = $1", 1,
                          NULL, v, NULL, NULL, 1) != 1)
        return down(p, "reading the schema");
    int err = finish(p, 1, "reading the schema");
    if (err != PGSTORE_OK)
        return err;
    *found = PQntuples(p->res[0]) == 1;
    *value = *found ? get_int(p->res[0], 0, 0) : 0;
    clear_results(p, 1);
    return PGSTORE_OK;
}

/* An error in one of the long transactions (the schema's, an import's):
 * roll it back, keep the reason. */
static int txn_failed(struct pgstore *p, int err)
{
    if (err == PGSTORE_EDOWN || p->conn == NULL)
        return err;
    if (PQtransactionStatus(p->conn) != PQTRANS_IDLE) {
        char keep[sizeof(p->errmsg)];
        memcpy(keep, p->errmsg, sizeof(keep));
        exec_sql(p, "ROLLBACK", "rolling back");
        memcpy(p->errmsg, keep, sizeof(keep));
    }
    /* Permission and definition errors will not go away by retrying. */
    return err == PGSTORE_EFAIL ? PGSTORE_ECONFIG : err;
}

/* Creates the schema if missing, checks version and TTL, and compares
 * the primary with the last one seen, in one transaction that holds the
 * schema lock: replicas starting at once do it one after the other. */
static int setup(struct pgstore *p, struct pgstore_primary *primary)
{
    char sql[1024];
    int err = exec_sql(p, "BEGIN", "starting the schema transaction");
    if (err == PGSTORE_OK)
        err = exec_sql(p, "SELECT pg_advisory_xact_lock(1818583411, 1)",
                       "locking the schema");
    /* Asked first, not CREATE … IF NOT EXISTS, which needs the right to
     * create even when the table is there: a role that may only use the
     * schema (docs/ha.md) can start once another made it. */
    bool exists = false;
    if (err == PGSTORE_OK) {
        if (!send_sql(p, "SELECT to_regclass('leased_meta') IS NOT NULL"))
            return down(p, "reading the schema");
        if ((err = finish(p, 1, "reading the schema")) == PGSTORE_OK) {
            exists = PQgetvalue(p->res[0], 0, 0)[0] != 0;
            clear_results(p, 1);
        }
    }
    if (err == PGSTORE_OK && !exists)
        err = exec_sql(p,
                       "CREATE TABLE leased_meta (key text PRIMARY KEY, "
                       "value bigint NOT NULL)",
                       "creating the schema");
    int64_t version = 0;
    bool found = false;
    if (err == PGSTORE_OK)
        err = get_meta(p, "schema_version", &version, &found);
    if (err == PGSTORE_OK && !found) {
        for (size_t i = 0; err == PGSTORE_OK && i < pgsql_schema_count; i++)
            err = exec_sql(p, pgsql_schema[i], "creating the schema");
        snprintf(sql, sizeof(sql),
                 "INSERT INTO leased_meta VALUES ('schema_version', %d), "
                 "('ttl_ns', %lld), ('token_floor', 0), ('generation', 0), "
                 "('quarantine_end_ns', 0), ('primary_started_us', "
                 "(extract(epoch FROM pg_postmaster_start_time()) * 1000000)"
                 "::bigint)",
                 PGSQL_SCHEMA_VERSION, (long long)p->o.ttl_ns);
        if (err == PGSTORE_OK)
            err = exec_sql(p, sql, "creating the schema");
        version = PGSQL_SCHEMA_VERSION;
    }
    if (err == PGSTORE_OK && version < PGSQL_SCHEMA_VERSION) {
        for (size_t i = 0; err == PGSTORE_OK && i < pgsql_upgrade_count; i++)
            err = exec_sql(p, pgsql_upgrade[i], "upgrading the schema");
        snprintf(sql, sizeof(sql),
                 "UPDATE leased_meta SET value = %d "
                 "WHERE key = 'schema_version'",
                 PGSQL_SCHEMA_VERSION);
        if (err == PGSTORE_OK)
            err = exec_sql(p, sql, "upgrading the schema");
        version = PGSQL_SCHEMA_VERSION;
    }
    if (err != PGSTORE_OK)
        return txn_failed(p, err);
    if (version > PGSQL_SCHEMA_VERSION) {
        set_error(p,
                  "the database's schema is version %lld, from a newer "
                  "leased (this one knows version %d): upgrade leased",
                  (long long)version, PGSQL_SCHEMA_VERSION);
        return txn_failed(p, PGSTORE_EFAIL);
    }
    int64_t ttl_ns = 0;
    err = get_meta(p, "ttl_ns", &ttl_ns, &found);
    if (err != PGSTORE_OK)
        return txn_failed(p, err);
    if (ttl_ns != p->o.ttl_ns) {
        set_error(p,
                  "the database's leases use --ttl %lldms, this replica "
                  "%lldms: every replica must use the same TTL (see "
                  "docs/ha.md)",
                  (long long)(ttl_ns / 1000000),
                  (long long)(p->o.ttl_ns / 1000000));
        return txn_failed(p, PGSTORE_EFAIL);
    }
    /* A different server than the last one seen: quarantine what was
     * held (pgsql.c says why), measured on this server's clock and stored
     * for every replica to honour. */
    snprintf(sql, sizeof(sql),
             "WITH now AS (SELECT (extract(epoch FROM "
             "pg_postmaster_start_time()) * 1000000)::bigint AS started), "
             "seen AS (UPDATE leased_meta SET value = now.started FROM now "
             "WHERE key = 'primary_started_us' AND value <> now.started "
             "RETURNING 1), "
             "gen AS (UPDATE leased_meta SET value = value + 1 "
             "WHERE key = 'generation' AND EXISTS (SELECT 1 FROM seen) "
             "RETURNING 1), "
             "q AS (UPDATE leased_meta SET value = greatest(value, "
             "leased_now() + %lld) WHERE key = 'quarantine_end_ns' AND "
             "EXISTS (SELECT 1 FROM seen) RETURNING 1) "
             "SELECT (SELECT count(*) FROM seen) + (SELECT count(*) FROM gen)"
             " + (SELECT count(*) FROM q), (SELECT started FROM now)",
             /* A negative control of the failover test: none. */
             FAULT_BROKEN("no_failover_quarantine")
                 ? 0LL
                 : (long long)(p->o.ttl_ns + p->o.max_skew_ns));
    /* Then, in a statement of its own (which sees the update), what is
     * left of the quarantine stored. */
    if (!send_sql(p, sql) ||
        !send_sql(p, "SELECT greatest(leased_meta_value('quarantine_end_ns')"
                     " - leased_now(), 0)"))
        return down(p, "checking the primary");
    err = finish(p, 2, "checking the primary");
    if (err != PGSTORE_OK)
        return txn_failed(p, err);
    /* Changed for this replica too when another one stored the change
     * first, or when this one's last attempt stored it and then failed. */
    int64_t started = get_int(p->res[0], 0, 1);
    bool changed = get_int(p->res[0], 0, 0) > 0 ||
                   (p->seen_started_us != 0 && p->seen_started_us != started);
    int64_t remaining = get_int(p->res[1], 0, 0);
    clear_results(p, 2);
    err = exec_sql(p, "COMMIT", "committing the schema");
    if (err != PGSTORE_OK)
        return txn_failed(p, err);
    p->connecting_started_us = started;
    if (primary != NULL) {
        primary->changed = changed;
        primary->started_us = started;
        primary->quarantine_remaining_ns = remaining;
    }
    return PGSTORE_OK;
}

static int prepare_all(struct pgstore *p)
{
    for (int s = 0; s < PGSQL_COUNT; s++) {
        char name[8];
        snprintf(name, sizeof(name), "s%d", s);
        if (PQsendPrepare(p->conn, name, pgsql_stmt[s], 0, NULL) != 1)
            return down(p, "preparing statements");
    }
    int err = finish(p, PGSQL_COUNT, "preparing statements");
    if (err == PGSTORE_OK)
        clear_results(p, PGSQL_COUNT);
    return err;
}

int pgstore_connect(struct pgstore *p, struct pgstore_primary *primary)
{
    pgstore_disconnect(p);
    char timeout_s[16], user_timeout[16];
    int s = (p->o.timeout_ms + 999) / 1000;
    snprintf(timeout_s, sizeof(timeout_s), "%d",
             s < CONNECT_TIMEOUT_S_MIN ? CONNECT_TIMEOUT_S_MIN : s);
    snprintf(user_timeout, sizeof(user_timeout), "%d", p->o.timeout_ms);
    /* Defaults first: what the conninfo (expanded from "dbname") says
     * overrides them. */
    const char *keys[] = {"connect_timeout",
                          "target_session_attrs",
                          "application_name",
                          "keepalives_idle",
                          "keepalives_interval",
                          "keepalives_count",
                          "tcp_user_timeout",
                          "dbname",
                          NULL};
    const char *vals[] = {timeout_s, "read-write", "leased",      "5", "2",
                          "3",       user_timeout, p->o.conninfo, NULL};
    p->conn = PQconnectdbParams(keys, vals, 1);
    if (p->conn == NULL) {
        set_error(p, "out of memory");
        return PGSTORE_ENOMEM;
    }
    if (PQstatus(p->conn) != CONNECTION_OK)
        return down(p, "connecting");
    PQsetNoticeReceiver(p->conn, on_notice, p);
    if (PQsetnonblocking(p->conn, 1) != 0 || PQenterPipelineMode(p->conn) != 1)
        return down(p, "connecting");
    /* Not statement_timeout: it would cut a COMMIT's wait for a
     * synchronous standby short and report success all the same. A lock
     * held too long fails the batch instead of our deadline closing the
     * connection. And a batch the replica gave up on (its connection
     * closed) that still runs (waits for a lock, say) is rolled back
     * within CHECK_CLOSED_MS, rather than committed after its calls were
     * answered UNAVAILABLE and their clients went on. */
    char sql[160];
    snprintf(sql, sizeof(sql),
             "SELECT set_config('lock_timeout', '%d', false)%s",
             p->o.timeout_ms * 3 / 4,
             PQserverVersion(p->conn) >= 140000
                 ? ", set_config('client_connection_check_interval', '"
                   CHECK_CLOSED_MS "', false)"
                 : "");
    int err = exec_sql(p, sql, "setting the timeouts");
    if (err == PGSTORE_OK)
        err = setup(p, primary);
    if (err == PGSTORE_OK)
        err = prepare_all(p);
    if (err == PGSTORE_OK)
        p->seen_started_us = p->connecting_started_us;
    if (err != PGSTORE_OK && p->conn != NULL) {
        PQfinish(p->conn);
        p->conn = NULL;
    }
    return err;
}

/* The password the conninfo gives, if any, to keep out of messages. */
static char *password_of(PQconninfoOption *opts)
{
    for (PQconninfoOption *o = opts; o != NULL && o->keyword != NULL; o++)
        if (strcmp(o->keyword, "password") == 0 && o->val != NULL)
            return strdup(o->val);
    return NULL;
}

/* What follows a URI's scheme; NULL if conninfo is no URI. */
static const char *uri_body(const char *conninfo)
{
    if (strncmp(conninfo, "postgresql://", 13) == 0)
        return conninfo + 13;
    if (strncmp(conninfo, "postgres://", 11) == 0)
        return conninfo + 11;
    return NULL;
}

/* Whether a URI seems to have a password with an '@' or '/' in it, not
 * percent-encoded (postgresql://USER:P@SS@HOST…): libpq ends the user
 * info at the first of them, and the rest of the password would become
 * the host, port or database, which its messages quote. */
static bool uri_password_unencoded(const char *conninfo)
{
    const char *body = uri_body(conninfo);
    if (body == NULL)
        return false;
    /* The query, if any, starts at the first '?' after a '/'. */
    const char *slash = strchr(body, '/');
    size_t n = slash != NULL ? (size_t)(slash - body) + strcspn(slash, "?")
                             : strlen(body);
    const char *at = NULL;
    for (const char *c = body; c < body + n; c++)
        if (*c == '@')
            at = c;
    if (at == NULL)
        return false;
    size_t info = (size_t)(at - body);
    return memchr(body, ':', info) != NULL &&
           (memchr(body, '@', info) != NULL || memchr(body, '/', info) != NULL);
}

/* A copy of a URI with the password of its user info (postgresql://
 * USER:PASSWORD@HOST…) as "***"; anything else as it is. NULL when out of
 * memory. */
static char *mask_uri_password(const char *conninfo)
{
    const char *body = uri_body(conninfo);
    size_t authority = body != NULL ? strcspn(body, "/?") : 0;
    const char *at = body != NULL ? memchr(body, '@', authority) : NULL;
    const char *colon =
        at != NULL ? memchr(body, ':', (size_t)(at - body)) : NULL;
    if (colon == NULL)
        return strdup(conninfo);
    size_t n = strlen(conninfo) + 4;
    char *m = malloc(n);
    if (m != NULL)
        snprintf(m, n, "%.*s***%s", (int)(colon + 1 - conninfo), conninfo,
                 at);
    return m;
}

/* why, which quotes a word of a key=value string, with that word as
 * "***" (the word may itself have quotes), into out[0..len). */
static void hide_quoted(const char *why, char *out, size_t len)
{
    static const char tail[] = " in connection info string";
    bool has_tail = strstr(why, tail) != NULL;
    const char *c = why;
    while ((c = strchr(c, '"')) != NULL && strncmp(c, "\"=\"", 3) == 0)
        c += 3;
    if (c == NULL)
        snprintf(out, len, "%s", why);
    else
        snprintf(out, len, "%.*s\"***\"%s", (int)(c - why), why,
                 has_tail ? tail : "");
}

/* Why conninfo does not parse, without its password: libpq quotes a URI
 * it cannot parse whole, so the reason is that of the masked URI (or,
 * when that parses, the password itself is what is wrong). libpq also
 * quotes the word of a key=value string it stopped at, which may be part
 * of a password (one with a space, unquoted): when the string has a
 * password, that word is hidden. */
static int not_conninfo(const char *conninfo, char *errmsg, size_t len)
{
    char *masked = mask_uri_password(conninfo);
    char *why = NULL;
    PQconninfoOption *opts =
        masked != NULL ? PQconninfoParse(masked, &why) : NULL;
    const char *reason = why != NULL ? why : "out of memory";
    char hidden[256];
    if (why != NULL && strstr(masked, "password") != NULL) {
        hide_quoted(why, hidden, sizeof(hidden));
        reason = hidden;
    }
    if (opts != NULL)
        errmsg_fail(0, errmsg, len, "not a libpq connection string: bad "
                                    "characters in the URI's password");
    else
        errmsg_fail(0, errmsg, len, "not a libpq connection string: %s",
                    reason);
    size_t n = strlen(errmsg);
    while (n > 0 && errmsg[n - 1] == '\n')
        errmsg[--n] = '\0';
    PQconninfoFree(opts);
    PQfreemem(why);
    free(masked);
    return PGSTORE_ECONFIG;
}

int pgstore_open(const struct pgstore_options *o, struct pgstore **out,
                 char *errmsg, size_t len)
{
    *out = NULL;
    if (uri_password_unencoded(o->conninfo))
        return errmsg_fail(PGSTORE_ECONFIG, errmsg, len,
                           "not a libpq connection string: the URI's user "
                           "info has an '@' or '/' (percent-encode them in "
                           "a password: %%40, %%2F)");
    PQconninfoOption *opts = PQconninfoParse(o->conninfo, NULL);
    if (opts == NULL)
        return not_conninfo(o->conninfo, errmsg, len);
    struct pgstore *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        PQconninfoFree(opts);
        return errmsg_fail(PGSTORE_ENOMEM, errmsg, len, "out of memory");
    }
    p->o = *o;
    p->password = password_of(opts);
    PQconninfoFree(opts);
    int err = reserve(p, PGSQL_COUNT);
    if (err == PGSTORE_OK)
        err = pgstore_connect(p, NULL);
    if (err != PGSTORE_OK) {
        snprintf(errmsg, len, "%s", p->errmsg);
        pgstore_close(p);
        return err;
    }
    *out = p;
    return PGSTORE_OK;
}

void pgstore_close(struct pgstore *p)
{
    if (p == NULL)
        return;
    pgstore_disconnect(p);
    if (p->res != NULL)
        clear_results(p, p->res_cap);
    free(p->res);
    for (size_t i = 0; i < PGSTORE_PIPELINE_MAX; i++)
        free(p->pipe[i].order);
    for (size_t i = 0; i < sizeof(p->args) / sizeof(*p->args); i++)
        free(p->args[i].data);
    free(p->password);
    free(p);
}

/* Session order (bytewise, shorter first on a tie, as bytea sorts), then
 * arrival order: a stable sort by session. */
static int by_session(const void *a, const void *b, void *arg)
{
    const struct pgstore_call *calls = arg;
    const struct pgstore_call *x = &calls[*(const size_t *)a];
    const struct pgstore_call *y = &calls[*(const size_t *)b];
    size_t n =
        x->session_len < y->session_len ? x->session_len : y->session_len;
    int c = memcmp(x->session, y->session, n);
    if (c == 0 && x->session_len != y->session_len)
        c = x->session_len < y->session_len ? -1 : 1;
    if (c == 0)
        c = *(const size_t *)a < *(const size_t *)b ? -1 : 1;
    return c;
}

/* Type OIDs of the batch's arrays' elements (pg_type.h). */
#define OID_BYTEA 17
#define OID_INT8 20
#define OID_INT4 23

/* The pipeline's connection broke or went out of step (p->errmsg says
 * how): every batch in flight is lost. */
static int lost(struct pgstore *p)
{
    p->lost = true;
    return PGSTORE_EDOWN;
}

static int lost_conn(struct pgstore *p)
{
    if (!p->lost)
        set_error(p, "deciding: %s",
                  p->conn != NULL ? PQerrorMessage(p->conn)
                                  : "not connected");
    return lost(p);
}

int pgstore_send(struct pgstore *p, struct pgstore_call *calls, size_t n)
{
    if (p->conn == NULL || p->lost)
        return lost_conn(p);
    assert(n >= 1 && p->npipe < PGSTORE_PIPELINE_MAX);
    struct pending *b = &p->pipe[(p->first + p->npipe) % PGSTORE_PIPELINE_MAX];
    if (b->order_cap < n) {
        size_t *order = realloc(b->order, n * sizeof(*order));
        if (order == NULL) {
            set_error(p, "out of memory");
            return PGSTORE_ENOMEM;
        }
        b->order = order;
        b->order_cap = n;
    }
    /* Not sent: a token no row can have (the database's are below 2^63)
     * decides here as one nobody holds. */
    size_t sent = 0;
    for (size_t i = 0; i < n; i++) {
        b->order[i] = i;
        calls[i].code = -1;
        calls[i].granted = 0;
        calls[i].expiry_ns = 0;
        calls[i].flags = 0;
        if (calls[i].op != RULES_ACQUIRE && calls[i].token > INT64_MAX)
            calls[i].code =
                calls[i].op == RULES_RENEW ? RULES_LOST : RULES_NOOP;
        else
            sent++;
    }
    if (sent > 0) {
        qsort_r(b->order, n, sizeof(*b->order), by_session, calls);
        struct array *a = p->args;
        array_start(&a[0], OID_INT4);
        array_start(&a[1], OID_BYTEA);
        array_start(&a[2], OID_BYTEA);
        array_start(&a[3], OID_INT8);
        for (size_t i = 0; i < n; i++) {
            const struct pgstore_call *c = &calls[b->order[i]];
            if (c->code != -1)
                continue;
            if (c->op != RULES_ACQUIRE && c->op != RULES_RENEW &&
                c->op != RULES_RELEASE)
                abort(); /* not an op: never guess one */
            array_add_int(&a[0], c->op, 4);
            array_add(&a[1], c->session, c->session_len);
            array_add(&a[2], c->owner, c->owner_len);
            array_add_int(&a[3], (int64_t)c->token, 8);
        }
        if (a[0].failed || a[1].failed || a[2].failed || a[3].failed) {
            set_error(p, "out of memory");
            return PGSTORE_ENOMEM;
        }
        struct params q = {0};
        for (int i = 0; i < 4; i++)
            add_array(&q, &a[i]);
        add_int(&q, p->o.ttl_ns, 8);
        /* No BEGIN and COMMIT: what a sync ends is one transaction,
         * committed when its answer comes (after the standby's, when it
         * is synchronous), rolled back on an error. */
        if (p->npipe == 0)
            p->warned = false; /* from an admin call's round trip */
        if (!send_query(p, PGSQL_DECIDE, &q) || !PQpipelineSync(p->conn))
            return lost_conn(p);
    }
    *b = (struct pending){.calls = calls,
                          .n = n,
                          .sent = sent,
                          .order = b->order,
                          .order_cap = b->order_cap,
                          .deadline_ms = mono_ms() + p->o.timeout_ms};
    p->npipe++;
    return PGSTORE_OK;
}

int pgstore_flush(struct pgstore *p)
{
    if (p->conn == NULL || p->lost)
        return lost_conn(p);
    int f = PQflush(p->conn);
    return f < 0 ? lost_conn(p) : f;
}

int pgstore_read(struct pgstore *p)
{
    if (p->conn == NULL || p->lost || !PQconsumeInput(p->conn))
        return lost_conn(p);
    return PGSTORE_OK;
}

/* Reads what arrived of b's answer: 1 once all of it is there (its
 * result, then its sync's), 0 until then. */
static int read_answer(struct pgstore *p, struct pending *b)
{
    for (;;) {
        if (PQisBusy(p->conn)) {
            if (mono_ms() < b->deadline_ms)
                return 0;
            set_error(p, "deciding: no answer within %d ms",
                      p->o.timeout_ms);
            return lost(p);
        }
        PGresult *r = PQgetResult(p->conn);
        if (!b->ended) {
            if (r == NULL)
                b->ended = true;
            else if (b->res == NULL)
                b->res = r;
            else
                PQclear(r);
            continue;
        }
        bool synced = r != NULL && PQresultStatus(r) == PGRES_PIPELINE_SYNC;
        PQclear(r);
        if (!synced) {
            set_error(p, "deciding: the answer is out of step");
            return lost(p);
        }
        return 1;
    }
}

/* b's outcome from its result: its calls decided (PGSTORE_OK), or
 * nothing applied (PGSTORE_EFAIL), or unknown (the pipeline is lost). */
/* Whether the database's answer to a call of op (code, enum pgstore_flag
 * flags) is one leased_decide gives: a code its op can have, and flags it
 * knows (a refusal may carry those of an insert it lost to another
 * replica's; they are not read). Anything else comes from a function of
 * another version, or a changed one: never to be read as a refusal, nor
 * as a success; the batch's outcome is unknown. */
static bool known_outcome(enum rules_op op, int code, unsigned flags)
{
    if (flags & ~(unsigned)(PGSTORE_TAKEOVER | PGSTORE_EXPIRED |
                            PGSTORE_RECLAIM))
        return false;
    switch (op) {
    case RULES_ACQUIRE:
        return code == RULES_OK || code == RULES_HELD;
    case RULES_RENEW:
        return code == RULES_OK || code == RULES_LOST;
    case RULES_RELEASE:
        return code == RULES_OK || code == RULES_NOOP;
    default:
        return false;
    }
}

static int decode(struct pgstore *p, struct pending *b, int64_t *db_now_ns)
{
    const PGresult *res = b->res;
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        result_error(p, "deciding", res);
        return PGSTORE_EFAIL;
    }
    if (p->warned) {
        set_error(p, "deciding: the wait for a synchronous standby was "
                     "cancelled: its outcome is unknown");
        return lost(p);
    }
    if (PQntuples(res) != (int)b->sent || PQnfields(res) != 5) {
        set_error(p, "deciding: %d rows for %zu calls", PQntuples(res),
                  b->sent);
        return lost(p);
    }
    *db_now_ns = get_int(res, 0, 4);
    int row = 0;
    for (size_t i = 0; i < b->n; i++) {
        struct pgstore_call *c = &b->calls[b->order[i]];
        if (c->code != -1)
            continue;
        c->code = (int)get_int(res, row, 0);
        if (c->code == RULES_OK) {
            c->granted = (uint64_t)get_int(res, row, 1);
            c->expiry_ns = get_int(res, row, 2);
        }
        c->flags = (unsigned)get_int(res, row, 3);
        if (!known_outcome(c->op, c->code, c->flags)) {
            set_error(p, "deciding: the database answered code %d, flags "
                         "%u to a call of op %d, which this leased does "
                         "not know (leased_decide of another version?)",
                      c->code, c->flags, (int)c->op);
            return lost(p); /* what it did is unknown, as its answer */
        }
        row++;
    }
    return PGSTORE_OK;
}

int pgstore_done(struct pgstore *p, struct pgstore_call **calls, int *err,
                 int64_t *db_now_ns)
{
    if (p->npipe == 0)
        return 0;
    if (p->conn == NULL || p->lost)
        return lost_conn(p);
    struct pending *b = &p->pipe[p->first];
    *db_now_ns = 0;
    *err = PGSTORE_OK;
    if (b->sent > 0) {
        int rc = read_answer(p, b);
        if (rc <= 0)
            return rc;
        *err = decode(p, b, db_now_ns);
        if (*err == PGSTORE_EDOWN)
            return PGSTORE_EDOWN;
        PQclear(b->res);
        b->res = NULL;
        p->warned = false;
    }
    *calls = b->calls;
    p->first = (p->first + 1) % PGSTORE_PIPELINE_MAX;
    p->npipe--;
    return 1;
}

int pgstore_socket(const struct pgstore *p)
{
    return p->conn != NULL ? PQsocket(p->conn) : -1;
}

void pgstore_disconnect(struct pgstore *p)
{
    for (; p->npipe > 0; p->npipe--) {
        PQclear(p->pipe[p->first].res);
        p->pipe[p->first].res = NULL;
        p->first = (p->first + 1) % PGSTORE_PIPELINE_MAX;
    }
    p->first = 0;
    p->lost = false;
    if (p->conn != NULL)
        PQfinish(p->conn);
    p->conn = NULL;
}

/* Row 0 of r (owner, token, expiry_ns, then a boolean) as session's
 * lease into *row, its owner copied to p->owner (cut to its size) so that
 * it outlives r; returns the boolean. */
static bool first_row(struct pgstore *p, const PGresult *r,
                      const char *session, size_t session_len,
                      struct lease_row *row)
{
    size_t n = (size_t)PQgetlength(r, 0, 0);
    if (n > sizeof(p->owner))
        n = sizeof(p->owner);
    memcpy(p->owner, PQgetvalue(r, 0, 0), n);
    *row = (struct lease_row){session,
                              session_len,
                              p->owner,
                              n,
                              (uint64_t)get_int(r, 0, 1),
                              get_int(r, 0, 2)};
    return PQgetvalue(r, 0, 3)[0] != 0;
}

int pgstore_get(struct pgstore *p, const char *session, size_t session_len,
                struct lease_row *row, bool *live, bool *found)
{
    struct params q = {0};
    add_bytes(&q, session, session_len);
    int err = run_one(p, PGSQL_GET, &q, "reading a lease");
    if (err != PGSTORE_OK)
        return err;
    const PGresult *r = p->res[0];
    *found = PQntuples(r) == 1 && PQgetlength(r, 0, 0) > 0;
    if (*found)
        *live = first_row(p, r, session, session_len, row);
    clear_results(p, 1);
    return PGSTORE_OK;
}

int pgstore_revoke(struct pgstore *p, const char *session,
                   size_t session_len, uint64_t token, struct lease_row *row,
                   bool *found, bool *revoked)
{
    struct params q = {0};
    add_bytes(&q, session, session_len);
    add_int(&q, (int64_t)token, 8);
    int err = run_one(p, PGSQL_REVOKE, &q, "revoking a lease");
    if (err != PGSTORE_OK)
        return err;
    const PGresult *r = p->res[0];
    *found = PQntuples(r) == 1;
    *revoked = *found && first_row(p, r, session, session_len, row);
    clear_results(p, 1);
    return PGSTORE_OK;
}

/* The first byte string above every one that starts with prefix, into
 * end (*end_len bytes); false when there is none (all 0xff, or empty). */
static bool prefix_end(const char *prefix, size_t len, char *end,
                       size_t *end_len)
{
    while (len > 0 && (unsigned char)prefix[len - 1] == 0xff)
        len--;
    if (len == 0)
        return false;
    memcpy(end, prefix, len);
    end[len - 1] = (char)((unsigned char)end[len - 1] + 1);
    *end_len = len;
    return true;
}

int pgstore_list(struct pgstore *p, const char *prefix, size_t prefix_len,
                 const char *after, size_t after_len, size_t limit,
                 int (*row_cb)(void *arg, const struct lease_row *row,
                               bool live),
                 void *arg)
{
    char end[ENGINE_SESSION_MAX];
    size_t end_len = 0;
    struct params q = {0};
    add_bytes(&q, after, after_len);
    add_bytes(&q, prefix, prefix_len);
    if (prefix_len <= sizeof(end) &&
        prefix_end(prefix, prefix_len, end, &end_len))
        add_bytes(&q, end, end_len);
    else
        add_null(&q);
    add_int(&q, (int64_t)limit, 8);
    int err = run_one(p, PGSQL_LIST, &q, "listing");
    if (err != PGSTORE_OK)
        return err;
    const PGresult *r = p->res[0];
    int rc = 0;
    for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
        struct lease_row row = {
            PQgetvalue(r, i, 0),        (size_t)PQgetlength(r, i, 0),
            PQgetvalue(r, i, 1),        (size_t)PQgetlength(r, i, 1),
            (uint64_t)get_int(r, i, 2), get_int(r, i, 3)};
        rc = row_cb(arg, &row, PQgetvalue(r, i, 4)[0] != 0);
    }
    clear_results(p, 1);
    return rc;
}

int pgstore_stats(struct pgstore *p, struct pgstore_stats *st)
{
    int err = run_one(p, PGSQL_STATS, NULL, "counting leases");
    if (err != PGSTORE_OK)
        return err;
    const PGresult *r = p->res[0];
    st->live = (uint64_t)get_int(r, 0, 0);
    st->entries = (uint64_t)get_int(r, 0, 1);
    st->high_water = (uint64_t)get_int(r, 0, 2);
    st->quarantine_remaining_ns = get_int(r, 0, 3);
    clear_results(p, 1);
    return PGSTORE_OK;
}

int pgstore_collect(struct pgstore *p, size_t max, size_t *collected,
                    size_t *expired)
{
    *collected = *expired = 0;
    struct params q = {0};
    add_int(&q, p->o.ttl_ns, 8);
    add_int(&q, (int64_t)max, 4);
    int err = run_one(p, PGSQL_COLLECT, &q, "collecting");
    if (err != PGSTORE_OK)
        return err;
    *collected = (size_t)get_int(p->res[0], 0, 0);
    *expired = (size_t)get_int(p->res[0], 0, 1);
    clear_results(p, 1);
    return PGSTORE_OK;
}

/* In a transaction: raises the token floor to at least floor, and
 * starts a quarantine of quarantine_ns on the database's clock, during
 * which every row stored so far (they keep the generation before it)
 * counts as live while it is held. */
static int floor_and_quarantine(struct pgstore *p, uint64_t floor,
                                int64_t quarantine_ns, const char *what)
{
    char sql[512];
    snprintf(sql, sizeof(sql),
             "UPDATE leased_meta SET value = CASE key "
             "WHEN 'token_floor' THEN greatest(value, %llu) "
             "WHEN 'generation' THEN value + 1 "
             "ELSE greatest(value, leased_now() + %lld) END "
             "WHERE key IN ('token_floor', 'generation', "
             "'quarantine_end_ns')",
             (unsigned long long)floor, (long long)quarantine_ns);
    return exec_sql(p, sql, what);
}

int pgstore_raise_tokens(struct pgstore *p, uint64_t floor, size_t *raised)
{
    static const char what[] = "raising the token floor";
    *raised = 0;
    if (p->conn == NULL)
        return down(p, what);
    /* Exclusive: batches hold the floor lock shared, so none reads a
     * floor or a token half raised. */
    int err = exec_sql(p, "BEGIN", what);
    if (err == PGSTORE_OK)
        err = exec_sql(p, "SELECT pg_advisory_xact_lock(1818583411, 2)", what);
    char sql[256];
    snprintf(sql, sizeof(sql),
             "UPDATE leased_leases SET token = %llu WHERE token < %llu",
             (unsigned long long)floor, (unsigned long long)floor);
    if (err == PGSTORE_OK) {
        if (!send_sql(p, sql))
            return down(p, what);
        if ((err = finish(p, 1, what)) == PGSTORE_OK) {
            *raised = strtoull(PQcmdTuples(p->res[0]), NULL, 10);
            clear_results(p, 1);
        }
    }
    /* A restore, like a change of primary, starts a quarantine: the rows
     * it brought back expire before their holders were told. */
    if (err == PGSTORE_OK)
        err = floor_and_quarantine(p, floor, p->o.ttl_ns + p->o.max_skew_ns,
                                   what);
    if (err == PGSTORE_OK)
        err = exec_sql(p, "COMMIT", what);
    return err == PGSTORE_OK ? err : txn_failed(p, err);
}

#define IMPORT_CHUNK 1000 /* rows per round trip */

int pgstore_import(struct pgstore *p, const struct lease_row *rows, size_t n,
                   uint64_t floor, int64_t quarantine_ns)
{
    if (p->conn == NULL)
        return down(p, "importing");
    int64_t held = 0;
    bool found;
    int err = exec_sql(p, "BEGIN", "importing");
    if (err == PGSTORE_OK)
        err = exec_sql(p, "LOCK leased_leases IN EXCLUSIVE MODE", "importing");
    if (err == PGSTORE_OK) {
        if (!send_sql(p, "SELECT count(*) FROM leased_leases"))
            return down(p, "importing");
        if ((err = finish(p, 1, "importing")) == PGSTORE_OK) {
            held = get_int(p->res[0], 0, 0);
            clear_results(p, 1);
        }
    }
    if (err == PGSTORE_OK && held > 0) {
        set_error(p,
                  "the database already holds %lld leases: import "
                  "into one that holds none",
                  (long long)held);
        return txn_failed(p, PGSTORE_EFAIL);
    }
    /* The rows keep the generation before the quarantine, so that it
     * covers them. */
    int64_t generation = 0;
    if (err == PGSTORE_OK)
        err = get_meta(p, "generation", &generation, &found);
    if (err == PGSTORE_OK && (err = reserve(p, IMPORT_CHUNK)) != PGSTORE_OK)
        return txn_failed(p, err);
    for (size_t done = 0; err == PGSTORE_OK && done < n;) {
        size_t k = n - done < IMPORT_CHUNK ? n - done : IMPORT_CHUNK;
        for (size_t i = 0; i < k; i++) {
            const struct lease_row *r = &rows[done + i];
            struct params q = {0};
            add_bytes(&q, r->session, r->session_len);
            add_bytes(&q, r->owner, r->owner_len);
            add_int(&q, (int64_t)r->token, 8);
            add_int(&q, r->expiry_ns, 8);
            add_int(&q, generation, 8);
            if (PQsendQueryParams(
                    p->conn,
                    "INSERT INTO leased_leases VALUES ($1::bytea,"
                    " $2::bytea, $3::bigint, $4::bigint, "
                    "$5::bigint)",
                    q.n, NULL, q.v, q.len, q.fmt, 1) != 1)
                return down(p, "importing");
        }
        if ((err = finish(p, k, "importing")) == PGSTORE_OK)
            clear_results(p, k);
        done += k;
    }
    if (err == PGSTORE_OK)
        err = floor_and_quarantine(p, floor, quarantine_ns, "importing");
    if (err == PGSTORE_OK)
        err = exec_sql(p, "COMMIT", "importing");
    return err == PGSTORE_OK ? err : txn_failed(p, err);
}

const char *pgstore_errmsg(const struct pgstore *p)
{
    return p->errmsg;
}
