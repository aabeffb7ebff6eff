/*
 * The PostgreSQL store's blocking calls (see postgres.h, "Blocking
 * calls"): an operator's reads of leases (get, list, stats) and Revoke,
 * garbage collection, and the one-off transactions of an operator's
 * --raise-token-floor and --import-from, each a round trip or a few
 * (pg_roundtrip.c), made only while no batch is in flight.
 *
 * Not the lease calls (pg_pipeline.c), nor their rules (pgsql.c).
 *
 * Invariants: the rows a call gives back borrow p->owner or the result
 * they came from, as postgres.h says; the transactions of raise_tokens
 * and import either commit whole or are rolled back
 * (pg_roundtrip_txn_failed()).
 */
#include <stdlib.h>
#include <string.h>

#include "pg_internal.h"

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
                              (uint64_t)pg_params_get_int(r, 0, 1),
                              pg_params_get_int(r, 0, 2)};
    return PQgetvalue(r, 0, 3)[0] != 0;
}

enum store_err pgstore_get(struct pgstore *p, const char *session,
                           size_t session_len, struct lease_row *row,
                           bool *live, bool *found)
{
    struct pg_params q = {0};
    pg_params_bytes(&q, session, session_len);
    int err = pg_roundtrip_run(p, PGSQL_GET, &q, "reading a lease");
    if (err != STORE_OK)
        return err;
    const PGresult *r = p->res[0];
    *found = PQntuples(r) == 1 && PQgetlength(r, 0, 0) > 0;
    if (*found)
        *live = first_row(p, r, session, session_len, row);
    pg_roundtrip_clear(p, 1);
    return STORE_OK;
}

enum store_err pgstore_revoke(struct pgstore *p, const char *session,
                              size_t session_len, uint64_t token,
                              struct lease_row *row, bool *found, bool *revoked)
{
    struct pg_params q = {0};
    pg_params_bytes(&q, session, session_len);
    pg_params_int(&q, (int64_t)token, 8);
    pg_params_int(&q, p->o.ttl_ns, 8);
    int err = pg_roundtrip_run(p, PGSQL_REVOKE, &q, "revoking a lease");
    if (err != STORE_OK)
        return err;
    const PGresult *r = p->res[0];
    *found = PQntuples(r) == 1;
    *revoked = *found && first_row(p, r, session, session_len, row);
    pg_roundtrip_clear(p, 1);
    return STORE_OK;
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

enum store_err
pgstore_list(struct pgstore *p, const char *prefix, size_t prefix_len,
             const char *after, size_t after_len, size_t limit,
             int (*row_cb)(void *arg, const struct lease_row *row, bool live),
             void *arg)
{
    char end[ENGINE_SESSION_MAX];
    size_t end_len = 0;
    struct pg_params q = {0};
    pg_params_bytes(&q, after, after_len);
    pg_params_bytes(&q, prefix, prefix_len);
    if (prefix_len <= sizeof(end) &&
        prefix_end(prefix, prefix_len, end, &end_len))
        pg_params_bytes(&q, end, end_len);
    else
        pg_params_null(&q);
    pg_params_int(&q, (int64_t)limit, 8);
    int err = pg_roundtrip_run(p, PGSQL_LIST, &q, "listing");
    if (err != STORE_OK)
        return err;
    const PGresult *r = p->res[0];
    int rc = 0;
    for (int i = 0; rc == 0 && i < PQntuples(r); i++) {
        struct lease_row row = {PQgetvalue(r, i, 0),
                                (size_t)PQgetlength(r, i, 0),
                                PQgetvalue(r, i, 1),
                                (size_t)PQgetlength(r, i, 1),
                                (uint64_t)pg_params_get_int(r, i, 2),
                                pg_params_get_int(r, i, 3)};
        rc = row_cb(arg, &row, PQgetvalue(r, i, 4)[0] != 0);
    }
    pg_roundtrip_clear(p, 1);
    return rc < 0 ? rc : STORE_OK; /* 1: row_cb stopped the list */
}

enum store_err pgstore_stats(struct pgstore *p, struct pgstore_stats *st)
{
    int err = pg_roundtrip_run(p, PGSQL_STATS, NULL, "counting leases");
    if (err != STORE_OK)
        return err;
    const PGresult *r = p->res[0];
    st->live = (uint64_t)pg_params_get_int(r, 0, 0);
    st->entries = (uint64_t)pg_params_get_int(r, 0, 1);
    st->high_water = (uint64_t)pg_params_get_int(r, 0, 2);
    st->quarantine_remaining_ns = pg_params_get_int(r, 0, 3);
    pg_roundtrip_clear(p, 1);
    return STORE_OK;
}

enum store_err pgstore_collect(struct pgstore *p, size_t max, size_t *collected,
                               size_t *expired)
{
    *collected = *expired = 0;
    struct pg_params q = {0};
    pg_params_int(&q, p->o.ttl_ns, 8);
    pg_params_int(&q, (int64_t)max, 4);
    int err = pg_roundtrip_run(p, PGSQL_COLLECT, &q, "collecting");
    if (err != STORE_OK)
        return err;
    *collected = (size_t)pg_params_get_int(p->res[0], 0, 0);
    *expired = (size_t)pg_params_get_int(p->res[0], 0, 1);
    pg_roundtrip_clear(p, 1);
    return STORE_OK;
}

/* In a transaction: raises the token floor to at least floor, and
 * starts a quarantine of quarantine_ns on the database's clock, during
 * which every row stored so far (they keep the generation before it)
 * counts as live while it is held. */
static int floor_and_quarantine(struct pgstore *p, uint64_t floor,
                                int64_t quarantine_ns, const char *what)
{
    char sql[512];
    pgsql_format_floor(sql, sizeof(sql), (unsigned long long)floor,
                       (long long)quarantine_ns);
    return pg_roundtrip_exec(p, sql, what);
}

enum store_err pgstore_raise_tokens(struct pgstore *p, uint64_t floor,
                                    size_t *raised)
{
    static const char what[] = "raising the token floor";
    *raised = 0;
    if (p->conn == NULL)
        return pg_conn_down(p, what);
    /* Exclusive: batches hold the floor lock shared, so none reads a
     * floor or a token half raised. */
    int err = pg_roundtrip_exec(p, pgsql_begin, what);
    if (err == STORE_OK)
        err = pg_roundtrip_exec(p, pgsql_lock_floor, what);
    char sql[256];
    pgsql_format_move_revisions(sql, sizeof(sql), (unsigned long long)floor);
    if (err == STORE_OK)
        err = pg_roundtrip_exec(p, sql, what);
    pgsql_format_raise(sql, sizeof(sql), (unsigned long long)floor);
    if (err == STORE_OK) {
        if (!pg_roundtrip_send_sql(p, sql))
            return pg_conn_down(p, what);
        if ((err = pg_roundtrip_finish(p, 1, what)) == STORE_OK) {
            *raised = strtoull(PQcmdTuples(p->res[0]), NULL, 10);
            pg_roundtrip_clear(p, 1);
        }
    }
    /* A restore, like a change of primary, starts a quarantine: the rows
     * it brought back expire before their holders were told. */
    if (err == STORE_OK)
        err = floor_and_quarantine(p, floor, p->o.ttl_ns + p->o.max_skew_ns,
                                   what);
    if (err == STORE_OK)
        err = pg_roundtrip_exec(p, pgsql_commit, what);
    return err == STORE_OK ? err : pg_roundtrip_txn_failed(p, err);
}

#define IMPORT_CHUNK 1000 /* rows per round trip */

enum store_err pgstore_import(struct pgstore *p, const struct lease_row *rows,
                              size_t n, uint64_t floor, int64_t quarantine_ns)
{
    if (p->conn == NULL)
        return pg_conn_down(p, "importing");
    int64_t held = 0;
    bool found;
    int err = pg_roundtrip_exec(p, pgsql_begin, "importing");
    if (err == STORE_OK)
        err = pg_roundtrip_exec(p, pgsql_import_lock, "importing");
    if (err == STORE_OK) {
        if (!pg_roundtrip_send_sql(p, pgsql_import_count))
            return pg_conn_down(p, "importing");
        if ((err = pg_roundtrip_finish(p, 1, "importing")) == STORE_OK) {
            held = pg_params_get_int(p->res[0], 0, 0);
            pg_roundtrip_clear(p, 1);
        }
    }
    if (err == STORE_OK && held > 0) {
        pg_conn_error(p,
                      "the database already holds %lld leases: import "
                      "into one that holds none",
                      (long long)held);
        return pg_roundtrip_txn_failed(p, STORE_EFAIL);
    }
    /* The rows keep the generation before the quarantine, so that it
     * covers them. */
    int64_t generation = 0;
    if (err == STORE_OK)
        err = pg_roundtrip_get_meta(p, "generation", &generation, &found);
    if (err == STORE_OK &&
        (err = pg_roundtrip_reserve(p, IMPORT_CHUNK)) != STORE_OK)
        return pg_roundtrip_txn_failed(p, err);
    for (size_t done = 0; err == STORE_OK && done < n;) {
        size_t k = n - done < IMPORT_CHUNK ? n - done : IMPORT_CHUNK;
        for (size_t i = 0; i < k; i++) {
            const struct lease_row *r = &rows[done + i];
            struct pg_params q = {0};
            pg_params_bytes(&q, r->session, r->session_len);
            pg_params_bytes(&q, r->owner, r->owner_len);
            pg_params_int(&q, (int64_t)r->token, 8);
            pg_params_int(&q, r->expiry_ns, 8);
            pg_params_int(&q, generation, 8);
            if (PQsendQueryParams(p->conn, pgsql_import_row, q.n, NULL, q.v,
                                  q.len, q.fmt, 1) != 1)
                return pg_conn_down(p, "importing");
        }
        if ((err = pg_roundtrip_finish(p, k, "importing")) == STORE_OK)
            pg_roundtrip_clear(p, k);
        done += k;
    }
    if (err == STORE_OK)
        err = floor_and_quarantine(p, floor, quarantine_ns, "importing");
    if (err == STORE_OK)
        err = pg_roundtrip_exec(p, pgsql_commit, "importing");
    return err == STORE_OK ? err : pg_roundtrip_txn_failed(p, err);
}
