/*
 * The PostgreSQL store's insides (the store is postgres.h): struct
 * pgstore and the functions its parts share. Included by the pg_*.c
 * files only, which with pg_params.h are the only ones that include
 * libpq-fe.h; the SQL they run, and what the schema holds, are in
 * pgsql.c. Not an interface: the daemon includes postgres.h.
 *
 * The parts, one job each:
 *   pg_params.c     query parameters and results in the binary format
 *   pg_conn.c       opening, connecting, closing; messages without the
 *                   password; the database's notices and warnings
 *   pg_roundtrip.c  blocking round trips with deadlines
 *   pg_schema.c     a connection's schema transaction (creation, upgrade,
 *                   TTL check, the failover quarantine) and its
 *                   prepared statements
 *   pg_pipeline.c   batches of lease calls, without blocking
 *   pg_admin.c      the blocking calls: get, list, revoke, stats,
 *                   collection, raising tokens, import
 *
 * The connection is always in pipeline mode. Batches of lease calls are
 * queued in it without waiting (pgstore_send(), pgstore_done()), each
 * one statement and a sync: one transaction. Everything else is a
 * blocking round trip, made only while no batch is in flight
 * (p->npipe == 0 and !p->lost). Each has a deadline of our own (a stopped
 * server never answers, and libpq would wait forever); a missed deadline
 * loses the connection, since it is then unknown what the server will
 * still do with what it was sent.
 *
 * Invariants: between calls every p->res[i] is NULL (whoever reads
 * results clears them); p->errmsg and p->warning never hold the password
 * (they are written through pg_conn_clean()); one thread at a time.
 */
#ifndef LEASED_PG_INTERNAL_H
#define LEASED_PG_INTERNAL_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nanotime.h"
#include "pg_params.h"
#include "pgsql.h"
#include "postgres.h"

/* A batch sent and not answered yet. */
struct pg_pending {
    struct pgstore_call *calls; /* the caller's, n of them */
    size_t n, sent;             /* sent: those not decided here */
    size_t *order;              /* calls[] in session order */
    size_t order_cap;
    int64_t deadline_ms;
    PGresult *res; /* the decision's result */
    bool ended;    /* its results are read: the sync's is next */
};

/* The store: ours from pgstore_open() to pgstore_close(). */
struct pgstore {
    struct pgstore_options o; /* a copy; o.conninfo borrowed */
    PGconn *conn;
    char *password; /* from the conninfo, to keep out of messages */
    PGresult **res; /* one per query of a blocking round trip */
    size_t res_cap;
    struct pg_array args[4]; /* a batch's ops, sessions, owners, tokens */
    /* The pipeline: batches in flight, oldest (pipe[first]) first. */
    struct pg_pending pipe[PGSTORE_PIPELINE_MAX];
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
    int32_t line_key, line_pid;   /* pgstore_set_listener() */
    char owner[ENGINE_OWNER_MAX]; /* pgstore_get()'s, pgstore_revoke()'s row */
    char errmsg[256];
};

/* --- pg_conn.c ---------------------------------------------------------- */

/* Writes fmt's text into buf[0..size), on one line, without the
 * password: each occurrence of it becomes three stars. */
__attribute__((format(printf, 4, 5))) void
pg_conn_clean(const struct pgstore *p, char *buf, size_t size, const char *fmt,
              ...);

/* Writes why into p->errmsg, on one line, without the password. */
#define pg_conn_error(p, ...)                                                 \
    pg_conn_clean((p), (p)->errmsg, sizeof((p)->errmsg), __VA_ARGS__)

/* Writes into p->errmsg why res (borrowed) failed, after what. */
void pg_conn_result_error(struct pgstore *p, const char *what,
                          const PGresult *res);

/* The connection is lost or in an unknown state: closes it (if any), with
 * why (after what) in p->errmsg. Returns STORE_EDOWN. */
int pg_conn_down(struct pgstore *p, const char *what);

/* --- pg_roundtrip.c: blocking, only while no batch is in flight -------- */

/* Queues prepared statement s with q (NULL: no parameters; borrowed for
 * the call). False when libpq refuses: the caller calls pg_conn_down(). */
bool pg_roundtrip_send(struct pgstore *p, enum pgsql_stmt s,
                       const struct pg_params *q);

/* Queues sql (borrowed for the call), which takes no parameters, as
 * pg_roundtrip_send() does. */
bool pg_roundtrip_send_sql(struct pgstore *p, const char *sql);

/* Clears the results p->res[0..nq). */
void pg_roundtrip_clear(struct pgstore *p, size_t nq);

/* Makes room for nq results in p->res: STORE_OK or STORE_ENOMEM. */
int pg_roundtrip_reserve(struct pgstore *p, size_t nq);

/* Runs the nq queries the caller queued, within the timeout given at
 * open; what says what for p->errmsg. STORE_OK: their results are in
 * p->res[0..nq) and the caller clears them. STORE_EFAIL: one failed
 * (a transaction it was in is rolled back), no result is kept.
 * STORE_EDOWN: the connection is closed. */
int pg_roundtrip_finish(struct pgstore *p, size_t nq, const char *what);

/* One statement of SQL (borrowed) with no parameters and no result
 * wanted, in a round trip of its own; returns as pg_roundtrip_finish(). */
int pg_roundtrip_exec(struct pgstore *p, const char *sql, const char *what);

/* Prepared statement s with q (or none) in a round trip of its own: on
 * STORE_OK its result is p->res[0], which the caller clears. */
int pg_roundtrip_run(struct pgstore *p, enum pgsql_stmt s,
                     const struct pg_params *q, const char *what);

/* Reads the bigint meta value of key (borrowed) into *value (absent:
 * *found false, *value 0). */
int pg_roundtrip_get_meta(struct pgstore *p, const char *key, int64_t *value,
                          bool *found);

/* An error err in one of the long transactions (the schema's, an
 * import's, the raise of tokens): rolls it back, keeping the reason in
 * p->errmsg. Returns err, STORE_EFAIL as STORE_ECONFIG. */
int pg_roundtrip_txn_failed(struct pgstore *p, int err);

/* --- pg_schema.c -------------------------------------------------------- */

/* Creates the schema if missing, upgrades an older one, checks version
 * and TTL, and compares the primary with the last one seen, in one
 * transaction (see pgstore_connect(); primary may be NULL). Sets
 * p->connecting_started_us. */
int pg_schema_setup(struct pgstore *p, struct pgstore_primary *primary);

/* Prepares the statements of pgsql_stmt[] on the connection, as "s0",
 * "s1"… (pg_roundtrip_send() names them so). */
int pg_schema_prepare(struct pgstore *p);

#endif
