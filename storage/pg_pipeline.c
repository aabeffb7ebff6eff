/*
 * The PostgreSQL store's pipeline (see postgres.h, "Deciding"): batches
 * of lease calls sent without waiting, up to PGSTORE_PIPELINE_MAX in
 * flight, and their answers read as they come, the oldest first. Each
 * batch is one statement (PGSQL_DECIDE, its calls as four arrays in
 * session order) and a sync: one transaction.
 *
 * Not the blocking calls (pg_roundtrip.c), which wait until no batch is
 * in flight, nor the rules, which the database applies (leased_decide in
 * pgsql.c).
 *
 * Invariants: p->pipe[p->first .. p->first + p->npipe) (modulo
 * PGSTORE_PIPELINE_MAX) are the batches in flight, in the order sent;
 * once p->lost is set, every call returns STORE_EDOWN until
 * pgstore_disconnect(). An answer this leased does not know is never read
 * as a refusal nor as a success: the pipeline is lost then.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "pg_internal.h"

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
    return STORE_EDOWN;
}

static int lost_conn(struct pgstore *p)
{
    if (!p->lost)
        pg_conn_error(p, "deciding: %s",
                      p->conn != NULL ? PQerrorMessage(p->conn)
                                      : "not connected");
    return lost(p);
}

enum store_err pgstore_send(struct pgstore *p, struct pgstore_call *calls,
                            size_t n)
{
    if (p->conn == NULL || p->lost)
        return lost_conn(p);
    assert(n >= 1 && p->npipe < PGSTORE_PIPELINE_MAX);
    struct pg_pending *b =
        &p->pipe[(p->first + p->npipe) % PGSTORE_PIPELINE_MAX];
    if (b->order_cap < n) {
        size_t *order = realloc(b->order, n * sizeof(*order));
        if (order == NULL) {
            pg_conn_error(p, "out of memory");
            return STORE_ENOMEM;
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
        if (calls[i].op != RULES_ACQUIRE &&
            calls[i].line == PGSTORE_LINE_NONE && calls[i].token > INT64_MAX)
            calls[i].code =
                calls[i].op == RULES_RENEW ? RULES_LOST : RULES_NOOP;
        else
            sent++;
    }
    if (sent > 0) {
        qsort_r(b->order, n, sizeof(*b->order), by_session, calls);
        struct pg_array *a = p->args;
        pg_params_array_start(&a[0], OID_INT4);
        pg_params_array_start(&a[1], OID_BYTEA);
        pg_params_array_start(&a[2], OID_BYTEA);
        pg_params_array_start(&a[3], OID_INT8);
        for (size_t i = 0; i < n; i++) {
            const struct pgstore_call *c = &calls[b->order[i]];
            if (c->code != -1)
                continue;
            if ((c->op != RULES_ACQUIRE && c->op != RULES_RENEW &&
                 c->op != RULES_RELEASE) ||
                (c->line != PGSTORE_LINE_NONE &&
                 (c->op != RULES_ACQUIRE || p->line_key == 0)))
                abort(); /* not an op: never guess one */
            pg_params_array_add_int(&a[0],
                                    c->line != PGSTORE_LINE_NONE
                                        ? (int64_t)c->line
                                        : (int64_t)c->op,
                                    4);
            pg_params_array_add(&a[1], c->session, c->session_len);
            pg_params_array_add(&a[2], c->owner, c->owner_len);
            pg_params_array_add_int(&a[3], (int64_t)c->token, 8);
        }
        if (a[0].failed || a[1].failed || a[2].failed || a[3].failed) {
            pg_conn_error(p, "out of memory");
            return STORE_ENOMEM;
        }
        struct pg_params q = {0};
        for (int i = 0; i < 4; i++)
            pg_params_array(&q, &a[i]);
        pg_params_int(&q, p->o.ttl_ns, 8);
        if (p->line_key != 0) {
            pg_params_int(&q, p->line_key, 4);
            pg_params_int(&q, p->line_pid, 4);
        } else {
            pg_params_null(&q);
            pg_params_null(&q);
        }
        /* No BEGIN and COMMIT: what a sync ends is one transaction,
         * committed when its answer comes (after the standby's, when it
         * is synchronous), rolled back on an error. */
        if (p->npipe == 0)
            p->warned = false; /* from an admin call's round trip */
        if (!pg_roundtrip_send(p, PGSQL_DECIDE, &q) ||
            !PQpipelineSync(p->conn))
            return lost_conn(p);
    }
    int64_t deadline_ms = nanotime_mono_ms() + p->o.timeout_ms;
    *b = (struct pg_pending){.calls = calls,
                             .n = n,
                             .sent = sent,
                             .order = b->order,
                             .order_cap = b->order_cap,
                             .deadline_ms = deadline_ms};
    p->npipe++;
    return STORE_OK;
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
    return STORE_OK;
}

/* Reads what arrived of b's answer: 1 once all of it is there (its
 * result, then its sync's), 0 until then. */
static int read_answer(struct pgstore *p, struct pg_pending *b)
{
    for (;;) {
        if (PQisBusy(p->conn)) {
            if (nanotime_mono_ms() < b->deadline_ms)
                return 0;
            pg_conn_error(p, "deciding: no answer within %d ms",
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
            pg_conn_error(p, "deciding: the answer is out of step");
            return lost(p);
        }
        return 1;
    }
}

/* Whether the database's answer to a call of op (code, enum rules_flag
 * flags) is one leased_decide gives: a code its op can have, and flags it
 * knows (a refusal may carry those of an insert it lost to another
 * replica's; they are not read). Anything else comes from a function of
 * another version, or a changed one: never to be read as a refusal, nor
 * as a success; the batch's outcome is unknown. */
static bool known_outcome(enum rules_op op, enum pgstore_line line, int code,
                          unsigned flags)
{
    if (flags &
        ~(unsigned)(RULES_TAKEOVER | RULES_EXPIRED | RULES_RECLAIM))
        return false;
    switch (line) {
    case PGSTORE_LINE_NONE:
        break;
    case PGSTORE_LINE_JOIN:
        return code == RULES_OK || code == PGSTORE_IN_LINE;
    case PGSTORE_LINE_LOOK:
        return code == PGSTORE_IN_LINE || code == PGSTORE_NOT_IN_LINE;
    case PGSTORE_LINE_LEAVE:
        return code == RULES_NOOP || code == PGSTORE_NOT_IN_LINE;
    default:
        return false;
    }
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

/* b's outcome from its result: its calls decided (STORE_OK), or
 * nothing applied (STORE_EFAIL), or unknown (the pipeline is lost). */
static int decode(struct pgstore *p, struct pg_pending *b, int64_t *db_now_ns)
{
    const PGresult *res = b->res;
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        pg_conn_result_error(p, "deciding", res);
        return STORE_EFAIL;
    }
    if (p->warned) {
        pg_conn_error(p, "deciding: the wait for a synchronous standby was "
                         "cancelled: its outcome is unknown");
        return lost(p);
    }
    if (PQntuples(res) != (int)b->sent || PQnfields(res) != 5) {
        pg_conn_error(p, "deciding: %d rows for %zu calls", PQntuples(res),
                      b->sent);
        return lost(p);
    }
    *db_now_ns = pg_params_get_int(res, 0, 4);
    int row = 0;
    for (size_t i = 0; i < b->n; i++) {
        struct pgstore_call *c = &b->calls[b->order[i]];
        if (c->code != -1)
            continue;
        c->code = (int)pg_params_get_int(res, row, 0);
        if (c->code == RULES_OK) {
            c->granted = (uint64_t)pg_params_get_int(res, row, 1);
            c->expiry_ns = pg_params_get_int(res, row, 2);
        } else if (c->code == PGSTORE_IN_LINE) {
            c->expiry_ns = pg_params_get_int(res, row, 2);
        }
        c->flags = (unsigned)pg_params_get_int(res, row, 3);
        if (!known_outcome(c->op, c->line, c->code, c->flags)) {
            pg_conn_error(p,
                          "deciding: the database answered code %d, flags "
                          "%u to a call of op %d, which this leased does "
                          "not know (leased_decide of another version?)",
                          c->code, c->flags, (int)c->op);
            return lost(p); /* what it did is unknown, as its answer */
        }
        row++;
    }
    return STORE_OK;
}

int pgstore_done(struct pgstore *p, struct pgstore_call **calls, int *err,
                 int64_t *db_now_ns)
{
    if (p->npipe == 0)
        return 0;
    if (p->conn == NULL || p->lost)
        return lost_conn(p);
    struct pg_pending *b = &p->pipe[p->first];
    *db_now_ns = 0;
    *err = STORE_OK;
    if (b->sent > 0) {
        int rc = read_answer(p, b);
        if (rc <= 0)
            return rc;
        *err = decode(p, b, db_now_ns);
        if (*err == STORE_EDOWN)
            return STORE_EDOWN;
        PQclear(b->res);
        b->res = NULL;
        p->warned = false;
    }
    *calls = b->calls;
    p->first = (p->first + 1) % PGSTORE_PIPELINE_MAX;
    p->npipe--;
    return 1;
}

void pgstore_set_listener(struct pgstore *p, int32_t key, int32_t pid)
{
    p->line_key = key;
    p->line_pid = pid;
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
