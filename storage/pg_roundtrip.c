/*
 * Blocking round trips of the PostgreSQL store (pg_internal.h): the
 * queries a call queued, a sync, and every result read back, all within
 * the timeout given at open, for everything but the batches of lease
 * calls (pg_pipeline.c), and only while none is in flight.
 *
 * A round trip that misses its deadline, or whose connection breaks,
 * closes the connection (STORE_EDOWN): what the server will still do
 * with what it was sent is unknown. One whose statement fails leaves the
 * connection good, its transaction rolled back (STORE_EFAIL).
 */
#include <assert.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg_internal.h"

/* Waits until the socket is ready for events or the deadline passes. */
static int wait_socket(struct pgstore *p, short events, int64_t deadline_ms)
{
    int64_t left = deadline_ms - nanotime_mono_ms();
    if (left <= 0)
        return -1;
    struct pollfd pfd = {PQsocket(p->conn), events, 0};
    int rc;
    do
        rc = poll(&pfd, 1, (int)left);
    while (rc < 0 && errno == EINTR);
    return rc > 0 ? 0 : -1;
}

bool pg_roundtrip_send(struct pgstore *p, enum pgsql_stmt s,
                       const struct pg_params *q)
{
    char name[8];
    snprintf(name, sizeof(name), "s%d", (int)s);
    return PQsendQueryPrepared(
               p->conn, name, q != NULL ? q->n : 0, q != NULL ? q->v : NULL,
               q != NULL ? q->len : NULL, q != NULL ? q->fmt : NULL, 1) == 1;
}

bool pg_roundtrip_send_sql(struct pgstore *p, const char *sql)
{
    return PQsendQueryParams(p->conn, sql, 0, NULL, NULL, NULL, NULL, 1) == 1;
}

void pg_roundtrip_clear(struct pgstore *p, size_t nq)
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
 * STORE_OK: every result is there (each may still be an error); the
 * caller clears them. */
static int round_trip(struct pgstore *p, size_t nq, const char *what)
{
    assert(p->npipe == 0 && !p->lost);
    int64_t deadline = nanotime_mono_ms() + p->o.timeout_ms;
    if (!PQpipelineSync(p->conn))
        return pg_conn_down(p, what);
    int f;
    while ((f = PQflush(p->conn)) == 1) {
        if (wait_socket(p, POLLOUT | POLLIN, deadline) != 0 ||
            !PQconsumeInput(p->conn))
            return pg_conn_down(p, what);
    }
    if (f < 0)
        return pg_conn_down(p, what);
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
        pg_roundtrip_clear(p, nq);
        if (lost && nanotime_mono_ms() >= deadline) {
            PQfinish(p->conn);
            p->conn = NULL;
            pg_conn_error(p, "%s: no answer within %d ms", what,
                          p->o.timeout_ms);
            return STORE_EDOWN;
        }
        return pg_conn_down(p, what);
    }
    return STORE_OK;
}

int pg_roundtrip_reserve(struct pgstore *p, size_t nq)
{
    if (nq <= p->res_cap)
        return STORE_OK;
    PGresult **res = calloc(nq, sizeof(*res));
    if (res == NULL) {
        pg_conn_error(p, "out of memory");
        return STORE_ENOMEM;
    }
    free(p->res);
    p->res = res;
    p->res_cap = nq;
    return STORE_OK;
}

/* The first error among results[0..nq), in p->errmsg; STORE_OK if none.
 * A failed transaction is rolled back. */
static int check_results(struct pgstore *p, size_t nq, const char *what)
{
    bool failed = false;
    for (size_t i = 0; i < nq; i++) {
        ExecStatusType st = PQresultStatus(p->res[i]);
        if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
            continue;
        pg_conn_result_error(p, what, p->res[i]);
        failed = true;
        break;
    }
    if (!failed)
        return STORE_OK;
    if (PQtransactionStatus(p->conn) != PQTRANS_IDLE) {
        char keep[sizeof(p->errmsg)];
        memcpy(keep, p->errmsg, sizeof(keep));
        pg_roundtrip_clear(p, nq);
        if (!pg_roundtrip_send(p, PGSQL_ROLLBACK, NULL) ||
            round_trip(p, 1, "rolling back") != STORE_OK)
            return STORE_EDOWN;
        pg_roundtrip_clear(p, 1);
        memcpy(p->errmsg, keep, sizeof(keep));
    }
    return STORE_EFAIL;
}

int pg_roundtrip_finish(struct pgstore *p, size_t nq, const char *what)
{
    int err = round_trip(p, nq, what);
    if (err == STORE_OK && (err = check_results(p, nq, what)) != STORE_OK)
        pg_roundtrip_clear(p, nq);
    return err;
}

int pg_roundtrip_exec(struct pgstore *p, const char *sql, const char *what)
{
    if (!pg_roundtrip_send_sql(p, sql))
        return pg_conn_down(p, what);
    int err = pg_roundtrip_finish(p, 1, what);
    pg_roundtrip_clear(p, err == STORE_OK ? 1 : 0);
    return err;
}

int pg_roundtrip_run(struct pgstore *p, enum pgsql_stmt s,
                     const struct pg_params *q, const char *what)
{
    if (p->conn == NULL || !pg_roundtrip_send(p, s, q))
        return pg_conn_down(p, what);
    return pg_roundtrip_finish(p, 1, what);
}

int pg_roundtrip_get_meta(struct pgstore *p, const char *key, int64_t *value,
                          bool *found)
{
    const char *v[1] = {key};
    if (PQsendQueryParams(p->conn, pgsql_meta_get, 1, NULL, v, NULL, NULL,
                          1) != 1)
        return pg_conn_down(p, "reading the schema");
    int err = pg_roundtrip_finish(p, 1, "reading the schema");
    if (err != STORE_OK)
        return err;
    *found = PQntuples(p->res[0]) == 1;
    *value = *found ? pg_params_get_int(p->res[0], 0, 0) : 0;
    pg_roundtrip_clear(p, 1);
    return STORE_OK;
}

int pg_roundtrip_txn_failed(struct pgstore *p, int err)
{
    if (err == STORE_EDOWN || p->conn == NULL)
        return err;
    if (PQtransactionStatus(p->conn) != PQTRANS_IDLE) {
        char keep[sizeof(p->errmsg)];
        memcpy(keep, p->errmsg, sizeof(keep));
        pg_roundtrip_exec(p, pgsql_rollback, "rolling back");
        memcpy(p->errmsg, keep, sizeof(keep));
    }
    /* Permission and definition errors will not go away by retrying. */
    return err == STORE_EFAIL ? STORE_ECONFIG : err;
}
