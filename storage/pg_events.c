/*
 * The PostgreSQL store's events (see postgres.h, "Events"): reading the
 * changes Watch tells, telling expiries as they happen, and keeping only
 * the last ones. Blocking round trips (pg_roundtrip.c), on a connection
 * with no batch in flight.
 *
 * Not the writing of events, which the SQL functions do in the
 * transaction of each change (leased_record in pgsql.c), nor the copy a
 * replica keeps of them (daemon/history.c).
 */
#include "pg_internal.h"

enum store_err pgstore_events(struct pgstore *p, uint64_t after, size_t max,
                              int (*ev_cb)(void *arg,
                                           const struct store_event *ev),
                              void *arg, uint64_t *top)
{
    struct pg_params q = {0};
    pg_params_int(&q, (int64_t)after, 8);
    pg_params_int(&q, (int64_t)max, 8);
    int err = pg_roundtrip_run(p, PGSQL_EVENTS, &q, "reading events");
    if (err != STORE_OK)
        return err;
    const PGresult *r = p->res[0];
    int n = PQntuples(r);
    if (n == 0 || PQnfields(r) != 7 || PQgetisnull(r, 0, 0)) {
        pg_roundtrip_clear(p, 1);
        pg_conn_error(p, "reading events: the database has no revision "
                         "counter (leased_meta 'revision')");
        return STORE_EFAIL;
    }
    *top = (uint64_t)pg_params_get_int(r, 0, 0);
    int rc = 0;
    for (int i = 0; rc == 0 && i < n && !PQgetisnull(r, i, 1); i++) {
        struct store_event ev = {
            .revision = (uint64_t)pg_params_get_int(r, i, 1),
            .kind = (enum store_event_kind)pg_params_get_int(r, i, 3),
            .lease = {PQgetvalue(r, i, 2), (size_t)PQgetlength(r, i, 2),
                      PQgetvalue(r, i, 4), (size_t)PQgetlength(r, i, 4),
                      (uint64_t)pg_params_get_int(r, i, 5),
                      pg_params_get_int(r, i, 6)},
        };
        rc = ev_cb(arg, &ev);
    }
    pg_roundtrip_clear(p, 1);
    if (rc != 0)
        pg_conn_error(p, "reading events: out of memory");
    return rc == 0 ? STORE_OK : STORE_ENOMEM;
}

enum store_err pgstore_tell(struct pgstore *p, size_t max)
{
    struct pg_params q = {0};
    pg_params_int(&q, (int64_t)max, 4);
    int err = pg_roundtrip_run(p, PGSQL_TELL, &q, "telling expiries");
    if (err == STORE_OK)
        pg_roundtrip_clear(p, 1);
    return err;
}

enum store_err pgstore_compact(struct pgstore *p, uint64_t keep)
{
    struct pg_params q = {0};
    pg_params_int(&q, (int64_t)keep, 8);
    int err = pg_roundtrip_run(p, PGSQL_COMPACT, &q, "compacting events");
    if (err == STORE_OK)
        pg_roundtrip_clear(p, 1);
    return err;
}
