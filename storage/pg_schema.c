/*
 * The PostgreSQL store's schema, as each connection finds it (see
 * pg_internal.h): created if the database has none, upgraded if it is
 * older, refused if newer or made for another TTL; the failover
 * quarantine started when the primary is not the one last seen; then
 * the statements of pgsql_stmt[] prepared. What the schema holds, and
 * every statement, is in pgsql.c; this file runs them in order.
 *
 * Not reconnecting (pg_conn.c), nor the quarantine's effect on
 * decisions (leased_live, in pgsql.c).
 *
 * Invariants: all of pg_schema_setup() is one transaction under the
 * schema lock (advisory lock 1), so that replicas starting at once create
 * the schema once and count one change of primary once; any failure
 * rolls it back.
 */
#include <stdio.h>

#include "faultpoint.h"
#include "pg_internal.h"

/* Negative controls of the Wait tests (tests/integration/test_wait.py),
 * in leased-faults only: a line's waiter counts as there whatever its
 * replica, or a Wait that leaves stays in its line. */
static int break_lines(struct pgstore *p)
{
    int err = STORE_OK;
    if (FAULT_BROKEN("wait_dead_granted"))
        err = pg_roundtrip_exec(
            p,
            "CREATE OR REPLACE FUNCTION leased_listening(lk int, lp int) "
            "RETURNS boolean LANGUAGE sql VOLATILE AS $$ SELECT true $$",
            "breaking the schema");
    if (err == STORE_OK && FAULT_BROKEN("wait_leave_kept"))
        err = pg_roundtrip_exec(
            p,
            "CREATE OR REPLACE FUNCTION leased_leave(sess bytea, wk int, "
            "wp int, c bigint) RETURNS int LANGUAGE sql VOLATILE AS "
            "$$ SELECT 3 $$",
            "breaking the schema");
    return err;
}

/* One transaction that holds the schema lock: replicas starting at once
 * do it one after the other. */
int pg_schema_setup(struct pgstore *p, struct pgstore_primary *primary)
{
    char sql[1024];
    int err =
        pg_roundtrip_exec(p, pgsql_begin, "starting the schema transaction");
    if (err == STORE_OK)
        err = pg_roundtrip_exec(p, pgsql_lock_schema, "locking the schema");
    /* Asked first, not CREATE … IF NOT EXISTS, which needs the right to
     * create even when the table is there: a role that may only use the
     * schema (docs/ha.md) can start once another made it. */
    bool exists = false;
    if (err == STORE_OK) {
        if (!pg_roundtrip_send_sql(p, pgsql_meta_exists))
            return pg_conn_down(p, "reading the schema");
        if ((err = pg_roundtrip_finish(p, 1, "reading the schema")) ==
            STORE_OK) {
            exists = PQgetvalue(p->res[0], 0, 0)[0] != 0;
            pg_roundtrip_clear(p, 1);
        }
    }
    if (err == STORE_OK && !exists)
        err = pg_roundtrip_exec(p, pgsql_meta_create, "creating the schema");
    int64_t version = 0;
    bool found = false;
    if (err == STORE_OK)
        err = pg_roundtrip_get_meta(p, "schema_version", &version, &found);
    if (err == STORE_OK && !found) {
        for (size_t i = 0; err == STORE_OK && i < pgsql_schema_count; i++)
            err = pg_roundtrip_exec(p, pgsql_schema[i], "creating the schema");
        pgsql_format_meta(sql, sizeof(sql), (long long)p->o.ttl_ns);
        if (err == STORE_OK)
            err = pg_roundtrip_exec(p, sql, "creating the schema");
        version = PGSQL_SCHEMA_VERSION;
    }
    if (err == STORE_OK && version < PGSQL_SCHEMA_VERSION) {
        for (size_t i = 0; err == STORE_OK && i < pgsql_upgrade_count; i++)
            err =
                pg_roundtrip_exec(p, pgsql_upgrade[i], "upgrading the schema");
        pgsql_format_version(sql, sizeof(sql));
        if (err == STORE_OK)
            err = pg_roundtrip_exec(p, sql, "upgrading the schema");
        version = PGSQL_SCHEMA_VERSION;
    }
    if (err == STORE_OK)
        err = break_lines(p);
    if (err != STORE_OK)
        return pg_roundtrip_txn_failed(p, err);
    if (version > PGSQL_SCHEMA_VERSION) {
        pg_conn_error(p,
                      "the database's schema is version %lld, from a newer "
                      "leased (this one knows version %d): upgrade leased",
                      (long long)version, PGSQL_SCHEMA_VERSION);
        return pg_roundtrip_txn_failed(p, STORE_EFAIL);
    }
    int64_t ttl_ns = 0;
    err = pg_roundtrip_get_meta(p, "ttl_ns", &ttl_ns, &found);
    if (err != STORE_OK)
        return pg_roundtrip_txn_failed(p, err);
    if (ttl_ns != p->o.ttl_ns) {
        pg_conn_error(p,
                      "the database's leases use --ttl %lldms, this replica "
                      "%lldms: every replica must use the same TTL (see "
                      "docs/ha.md)",
                      (long long)(ttl_ns / 1000000),
                      (long long)(p->o.ttl_ns / 1000000));
        return pg_roundtrip_txn_failed(p, STORE_EFAIL);
    }
    /* A different server than the last one seen: quarantine what was
     * held (pgsql.c says why), measured on this server's clock and stored
     * for every replica to honour. */
    pgsql_format_primary(sql, sizeof(sql),
                         /* A negative control of the failover test: none. */
                         FAULT_BROKEN("no_failover_quarantine")
                             ? 0LL
                             : (long long)(p->o.ttl_ns + p->o.max_skew_ns));
    /* Then, in a statement of its own (which sees the update), what is
     * left of the quarantine stored. */
    if (!pg_roundtrip_send_sql(p, sql) ||
        !pg_roundtrip_send_sql(p, pgsql_quarantine_left))
        return pg_conn_down(p, "checking the primary");
    err = pg_roundtrip_finish(p, 2, "checking the primary");
    if (err != STORE_OK)
        return pg_roundtrip_txn_failed(p, err);
    /* Changed for this replica too when another one stored the change
     * first, or when this one's last attempt stored it and then failed. */
    int64_t started = pg_params_get_int(p->res[0], 0, 1);
    bool changed = pg_params_get_int(p->res[0], 0, 0) > 0 ||
                   (p->seen_started_us != 0 && p->seen_started_us != started);
    int64_t remaining = pg_params_get_int(p->res[1], 0, 0);
    pg_roundtrip_clear(p, 2);
    err = pg_roundtrip_exec(p, pgsql_commit, "committing the schema");
    if (err != STORE_OK)
        return pg_roundtrip_txn_failed(p, err);
    p->connecting_started_us = started;
    if (primary != NULL) {
        primary->changed = changed;
        primary->started_us = started;
        primary->quarantine_remaining_ns = remaining;
    }
    return STORE_OK;
}

int pg_schema_prepare(struct pgstore *p)
{
    for (int s = 0; s < PGSQL_COUNT; s++) {
        char name[8];
        snprintf(name, sizeof(name), "s%d", s);
        if (PQsendPrepare(p->conn, name, pgsql_stmt[s], 0, NULL) != 1)
            return pg_conn_down(p, "preparing statements");
    }
    int err = pg_roundtrip_finish(p, PGSQL_COUNT, "preparing statements");
    if (err == STORE_OK)
        pg_roundtrip_clear(p, PGSQL_COUNT);
    return err;
}
