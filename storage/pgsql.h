/*
 * The SQL of the PostgreSQL store (the storage/pg_*.c files run it): the
 * schema, whose functions state the lease rules in SQL, and the
 * statements every connection prepares. Advisory locks are in class
 * 1818583411 ("leas"): 1 the schema, 2 the token floor, 3 garbage
 * collection.
 */
#ifndef LEASED_PGSQL_H
#define LEASED_PGSQL_H

#include <stddef.h>

#define PGSQL_SCHEMA_VERSION 7

/* The schema, one statement each, created in this order in one
 * transaction. */
extern const char *const pgsql_schema[];
extern const size_t pgsql_schema_count;

/* What turns a schema of an older version (1 to 4) into the current
 * one, in one transaction. */
extern const char *const pgsql_upgrade[];
extern const size_t pgsql_upgrade_count;

/* The statements prepared on every connection. */
enum pgsql_stmt {
    PGSQL_DECIDE,
    PGSQL_ROLLBACK,
    PGSQL_GET,
    PGSQL_LIST,
    PGSQL_STATS,
    PGSQL_COLLECT,
    PGSQL_REVOKE,
    PGSQL_EVENTS,
    PGSQL_TELL,
    PGSQL_COMPACT,
    PGSQL_COUNT,
};

extern const char *const pgsql_stmt[PGSQL_COUNT];

/* --- The one-off statements of the blocking calls ---------------------
 *
 * Sent as they are, not prepared: the schema's transaction runs before
 * the statements above are prepared, and the others are rare. The
 * pgsql_format_*() functions write a statement with its numbers into
 * sql[0..len), cut to len as snprintf() does. */

extern const char pgsql_begin[];
extern const char pgsql_commit[];
extern const char pgsql_rollback[];

/* The schema lock (advisory lock 1): the schema's transaction. */
extern const char pgsql_lock_schema[];
/* The floor lock (2), exclusive: a raise of the tokens. */
extern const char pgsql_lock_floor[];

/* Whether leased_meta exists: one boolean. */
extern const char pgsql_meta_exists[];
extern const char pgsql_meta_create[];
/* $1 a key (text): its value, or no row. */
extern const char pgsql_meta_get[];
/* What is left of the quarantine stored, in ns (0 when none). */
extern const char pgsql_quarantine_left[];

/* An import: the leases table locked, its row count, then one row each
 * ($1 session, $2 owner, $3 token, $4 expiry_ns, $5 generation). */
extern const char pgsql_import_lock[];
extern const char pgsql_import_count[];
extern const char pgsql_import_row[];

/* Sets the lock timeout of the session to lock_timeout_ms and, unless
 * check_closed_ms is NULL, client_connection_check_interval to it. */
void pgsql_format_timeouts(char *sql, size_t len, int lock_timeout_ms,
                           const char *check_closed_ms);

/* The meta values of a new schema of version PGSQL_SCHEMA_VERSION, for
 * the TTL ttl_ns, with the primary's start as the one seen. */
void pgsql_format_meta(char *sql, size_t len, long long ttl_ns);

/* Stores the schema's version as PGSQL_SCHEMA_VERSION. */
void pgsql_format_version(char *sql, size_t len);

/* When the primary is not the one stored, stores it, counts one more
 * generation and extends the quarantine to at least quarantine_ns from
 * now. One row: how many of those three it did (0 or 3), and the
 * primary's start (us). */
void pgsql_format_primary(char *sql, size_t len, long long quarantine_ns);

/* Raises the token floor to at least floor, counts one more generation
 * and extends the quarantine to at least quarantine_ns from now. */
void pgsql_format_floor(char *sql, size_t len, unsigned long long floor,
                        long long quarantine_ns);

/* Raises every token below floor to floor. */
/* At a restore, before the floor is raised: when the stored floor is
 * below floor (a restore, not the same flag again), the events are
 * deleted and the revision counter moved on by PGSQL_REVISION_MOVE: the
 * backup's revisions may have gone to other changes since it was taken,
 * and a watcher that saw them must read again. */
#define PGSQL_REVISION_MOVE 1000000000
void pgsql_format_move_revisions(char *sql, size_t len,
                                 unsigned long long floor);

void pgsql_format_raise(char *sql, size_t len, unsigned long long floor);

#endif
