/*
 * The PostgreSQL store's connection (see pg_internal.h): checking the
 * conninfo at open, connecting with our defaults and timeouts, closing;
 * the reason of the last error, always on one line and never with the
 * password in it; the database's notices and warnings.
 *
 * Not the schema a connection finds (pg_schema.c), nor what is sent on
 * it (pg_roundtrip.c, pg_pipeline.c).
 *
 * Invariants: p->password is the conninfo's, or NULL; every message
 * that may quote the conninfo or the server goes through pg_conn_clean()
 * (or, before the store exists, not_conninfo()), which masks it. A
 * connect that fails leaves no connection open.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"
#include "pg_internal.h"

#define CONNECT_TIMEOUT_S_MIN 2 /* libpq's own minimum */
/* How often a backend running a batch checks that the replica is still
 * connected (PostgreSQL 14 and later). */
#define CHECK_CLOSED_MS "100"

void pg_conn_clean(const struct pgstore *p, char *buf, size_t size,
                   const char *fmt, ...)
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
    pg_conn_clean(p, p->warning, sizeof(p->warning), "%s",
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

void pg_conn_result_error(struct pgstore *p, const char *what,
                          const PGresult *res)
{
    const char *why = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
    pg_conn_error(p, "%s: %s", what,
                  why != NULL ? why : PQresultErrorMessage(res));
}

int pg_conn_down(struct pgstore *p, const char *what)
{
    if (p->conn != NULL) {
        pg_conn_error(p, "%s: %s", what, PQerrorMessage(p->conn));
        PQfinish(p->conn);
        p->conn = NULL;
    } else {
        pg_conn_error(p, "%s: not connected", what);
    }
    return STORE_EDOWN;
}

enum store_err pgstore_connect(struct pgstore *p,
                               struct pgstore_primary *primary)
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
        pg_conn_error(p, "out of memory");
        return STORE_ENOMEM;
    }
    if (PQstatus(p->conn) != CONNECTION_OK)
        return pg_conn_down(p, "connecting");
    PQsetNoticeReceiver(p->conn, on_notice, p);
    if (PQsetnonblocking(p->conn, 1) != 0 || PQenterPipelineMode(p->conn) != 1)
        return pg_conn_down(p, "connecting");
    /* Not statement_timeout: it would cut a COMMIT's wait for a
     * synchronous standby short and report success all the same. A lock
     * held too long fails the batch instead of our deadline closing the
     * connection. And a batch the replica gave up on (its connection
     * closed) that still runs (waits for a lock, say) is rolled back
     * within CHECK_CLOSED_MS, rather than committed after its calls were
     * answered UNAVAILABLE and their clients went on. */
    char sql[160];
    pgsql_format_timeouts(sql, sizeof(sql), p->o.timeout_ms * 3 / 4,
                          PQserverVersion(p->conn) >= 140000 ? CHECK_CLOSED_MS
                                                             : NULL);
    int err = pg_roundtrip_exec(p, sql, "setting the timeouts");
    if (err == STORE_OK)
        err = pg_schema_setup(p, primary);
    if (err == STORE_OK)
        err = pg_schema_prepare(p);
    if (err == STORE_OK)
        p->seen_started_us = p->connecting_started_us;
    if (err != STORE_OK && p->conn != NULL) {
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
           (memchr(body, '@', info) != NULL ||
            memchr(body, '/', info) != NULL);
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
        snprintf(m, n, "%.*s***%s", (int)(colon + 1 - conninfo), conninfo, at);
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
        errmsg_fail(0, errmsg, len,
                    "not a libpq connection string: bad "
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
    return STORE_ECONFIG;
}

enum store_err pgstore_open(const struct pgstore_options *o,
                            struct pgstore **out, char *errmsg, size_t len)
{
    *out = NULL;
    if (uri_password_unencoded(o->conninfo))
        return errmsg_fail(STORE_ECONFIG, errmsg, len,
                           "not a libpq connection string: the URI's user "
                           "info has an '@' or '/' (percent-encode them in "
                           "a password: %%40, %%2F)");
    PQconninfoOption *opts = PQconninfoParse(o->conninfo, NULL);
    if (opts == NULL)
        return not_conninfo(o->conninfo, errmsg, len);
    struct pgstore *p = calloc(1, sizeof(*p));
    if (p == NULL) {
        PQconninfoFree(opts);
        return errmsg_fail(STORE_ENOMEM, errmsg, len, "out of memory");
    }
    p->o = *o;
    p->password = password_of(opts);
    PQconninfoFree(opts);
    int err = pg_roundtrip_reserve(p, PGSQL_COUNT);
    if (err == STORE_OK)
        err = pgstore_connect(p, NULL);
    if (err != STORE_OK) {
        snprintf(errmsg, len, "%s", p->errmsg);
        pgstore_close(p);
        return err;
    }
    *out = p;
    return STORE_OK;
}

void pgstore_close(struct pgstore *p)
{
    if (p == NULL)
        return;
    pgstore_disconnect(p);
    if (p->res != NULL)
        pg_roundtrip_clear(p, p->res_cap);
    free(p->res);
    for (size_t i = 0; i < PGSTORE_PIPELINE_MAX; i++)
        free(p->pipe[i].order);
    for (size_t i = 0; i < sizeof(p->args) / sizeof(*p->args); i++)
        free(p->args[i].data);
    free(p->password);
    free(p);
}

const char *pgstore_errmsg(const struct pgstore *p)
{
    return p->errmsg;
}
