/*
 * The PostgreSQL store's listening connection (see postgres.h,
 * "Listening"): the one connection of a replica that holds the advisory
 * lock its Waits' rows name, and hears of their grants on its channel
 * (leased_give in pgsql.c sends them) and of new events on channel
 * leased_events (leased_record).
 *
 * Not the lines themselves, which leased_decide keeps, nor what the
 * replica does with a grant (mode_shared.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "pg_internal.h"
#include "pg_params.h"
#include "siphash.h"

#define LOCK_TRIES 8

/* A key for the lock: positive (pg_locks shows it as an oid), and not
 * the class of leased's own locks (pgsql.h). */
static int32_t random_key(void)
{
    struct siphash_key k;
    siphash_random_key(&k);
    int32_t key = (int32_t)(k.k0 & 0x7fffffff);
    return key == 0 || key == 1818583411 ? 1 : key;
}

enum store_err pgstore_listen(struct pgstore *p, int32_t *key, int32_t *pid)
{
    char sql[160];
    for (int i = 0; i < LOCK_TRIES; i++) {
        int32_t k = random_key();
        snprintf(sql, sizeof(sql),
                 "SELECT pg_try_advisory_lock(%" PRId32
                 ", pg_backend_pid()), pg_backend_pid()",
                 k);
        if (!pg_roundtrip_send_sql(p, sql))
            return pg_conn_down(p, "listening");
        int err = pg_roundtrip_finish(p, 1, "listening");
        if (err != STORE_OK)
            return err;
        /* Binary results (pg_roundtrip.c): a byte, a 4-byte integer. */
        bool locked = PQgetvalue(p->res[0], 0, 0)[0] != 0;
        int32_t backend = (int32_t)pg_params_get_int(p->res[0], 0, 1);
        pg_roundtrip_clear(p, 1);
        if (!locked)
            continue; /* another connection's key: another one */
        /* Its own channel: no other session holds (k, backend), so no
         * other listener hears its grants (nor it theirs). */
        snprintf(sql, sizeof(sql), "LISTEN leased_w%" PRId32 "_%" PRId32, k,
                 backend);
        err = pg_roundtrip_exec(p, sql, "listening");
        if (err == STORE_OK)
            err = pg_roundtrip_exec(p, "LISTEN leased_events", "listening");
        if (err != STORE_OK)
            return err;
        *key = k;
        *pid = backend;
        return STORE_OK;
    }
    pg_conn_error(p, "listening: no free lock in %d tries", LOCK_TRIES);
    return STORE_EFAIL;
}

int pgstore_notified(struct pgstore *p,
                     void (*granted)(void *arg, uint64_t call, uint64_t token,
                                     int64_t expiry_ns, unsigned flags),
                     void *arg, bool *events)
{
    /* Left open for the caller, which watches its socket, to close. */
    if (p->conn == NULL || !PQconsumeInput(p->conn) ||
        PQstatus(p->conn) != CONNECTION_OK) {
        pg_conn_error(p, "listening: %s",
                      p->conn != NULL ? PQerrorMessage(p->conn)
                                      : "not connected");
        return STORE_EDOWN;
    }
    PGnotify *n;
    while ((n = PQnotifies(p->conn)) != NULL) {
        unsigned long long call, token;
        long long expiry;
        unsigned flags;
        char end;
        /* leased_give's "call token expiry flags"; anything else on
         * another channel is no grant of ours. */
        if (strcmp(n->relname, "leased_events") == 0)
            *events = true;
        else if (sscanf(n->extra, "%llu %llu %lld %u%c", &call, &token,
                        &expiry, &flags, &end) == 4)
            granted(arg, call, token, expiry, flags);
        PQfreemem(n);
    }
    return STORE_OK;
}
