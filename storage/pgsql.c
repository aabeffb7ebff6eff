/*
 * The SQL of the PostgreSQL store (see pgsql.h), which the storage/pg_*.c
 * files run.
 *
 * Schema (leased_meta 'schema_version' = 4):
 *   leased_leases(session bytea PRIMARY KEY, owner bytea, token bigint,
 *                 expiry_ns bigint, generation bigint)
 *     owner '' means released; expiry_ns is the database's clock, ns since
 *     the epoch; generation is the primary generation (below) of the
 *     row's last takeover.
 *   leased_meta(key text PRIMARY KEY, value bigint)
 *     'ttl_ns': the TTL every replica must use;
 *     'token_floor': the highest token of every row ever deleted; a new
 *     row starts above it, so collecting rows never lowers a token;
 *     'primary_started_us': the start of the database server the last
 *     connection saw (pg_postmaster_start_time());
 *     'generation': how many times that changed (a failover, a restart);
 *     'quarantine_end_ns': until when a lease held before the last change
 *     counts as live whatever its expiry says (the new primary's clock
 *     may be ahead of the old one's by up to --max-clock-skew, and an
 *     asynchronous standby may have missed the last renewals).
 *
 * The rules (core/rules.h, docs/protocol.md) are stated here a second
 * time, in SQL, as the function leased_decide: for each call of a batch
 * it locks the row (FOR UPDATE, or by the UPDATE of a run of renewals),
 * reads the database's clock and decides.
 * The conformance suite holds both to one behaviour.
 *
 * Tokens of new rows come from the floor, which garbage collection
 * raises. So that no batch reads a floor a collection is about to raise,
 * every batch holds a shared advisory lock and a collection an exclusive
 * one; a collection skips rows another transaction has locked, and a
 * batch takes its lock before any row, so the two never deadlock.
 */
#include "pgsql.h"

#include <assert.h>

#include "postgres.h"
#include "rules.h"

/* leased_decide writes these numbers as literals: ops 1 Acquire, 2 Renew,
 * 3 Release; codes 0 OK, 1 held, 2 lost, 3 no-op; flags 1 takeover, 2 it
 * replaced an expired holder, 4 a renewal after expiry. */
static_assert(RULES_ACQUIRE == 1 && RULES_RENEW == 2 && RULES_RELEASE == 3,
              "the ops leased_decide is written for");
static_assert(RULES_OK == 0 && RULES_HELD == 1 && RULES_LOST == 2 &&
                  RULES_NOOP == 3,
              "the codes leased_decide is written for");
static_assert(PGSTORE_TAKEOVER == 1 && PGSTORE_EXPIRED == 2 &&
                  PGSTORE_RECLAIM == 4,
              "the flags leased_decide is written for");

/* A batch: calls i = 1..n, op[i] an enum rules_op, in session order
 * (then arrival order), decided in their order, one row each: code (enum
 * rules_code), the lease's token and expiry (code 0), flags (enum
 * pgstore_flag: 1 takeover, 2 it replaced an expired holder, 4 a renewal
 * after expiry), and the time of the decision. One statement for the
 * whole batch: its calls cost no round trip, parse or plan of their own.
 * The floor lock first.
 *
 * A renewal of a live lease by its holder, the common call, takes the
 * short path. Consecutive renewals, each the first call of its session
 * in the batch (a run), are one UPDATE joined to their arrays: that
 * statement updates every row of the run, the rows it may not renew
 * unchanged, so it locks them all, in session order: with seqscan and
 * bitmapscan off, its join walks the arrays or the primary key's index,
 * both in that order. A lone renewal is one conditional UPDATE. A renewal the short
 * path did not grant (expired, another owner or token) falls through to
 * the general path, which decides it as before on the row it has locked
 * already; one of a run whose row is missing is refused then and there.
 * So every row is locked at its place in session order, and two batches
 * never deadlock.
 *
 * The generation and the quarantine are read at most once, by the first
 * call that needs them: they change only when a connection finds a new
 * primary, which it stores before its first batch, and every connection
 * to that primary is new. They are read by statements of this function,
 * not leased_meta_value(): a SQL function called from PL/pgSQL is parsed
 * and planned again in every transaction. */
static const char leased_decide[] =
    "CREATE OR REPLACE FUNCTION leased_decide(op int[], s bytea[], "
    " o bytea[], t bigint[], ttl bigint, OUT code int, OUT tok bigint, "
    " OUT exp bigint, OUT flags int, OUT now_ns bigint) "
    "RETURNS SETOF record LANGUAGE plpgsql "
    "SET enable_seqscan = off SET enable_bitmapscan = off AS $$ "
    "DECLARE r leased_leases; had boolean; live boolean; "
    " gen bigint; qend bigint; n int := cardinality(op); "
    " j int; run_end int := 0; run_now bigint; u record; "
    " rcode int[]; rtok bigint[]; rexp bigint[]; "
    "BEGIN "
    " PERFORM pg_advisory_xact_lock_shared(1818583411, 2); "
    " FOR i IN 1 .. n LOOP "
    "  flags := 0; tok := NULL; exp := NULL; "
    /* A run starts here: its calls are i .. j - 1. */
    "  IF op[i] = 2 AND i > run_end AND (i = 1 OR s[i] <> s[i - 1]) THEN "
    "   j := i + 1; "
    "   WHILE j <= n AND op[j] = 2 AND s[j] <> s[j - 1] LOOP "
    "    j := j + 1; "
    "   END LOOP; "
    "   IF j - i > 1 THEN "
    "    run_end := j - 1; "
    "    IF rcode IS NULL THEN "
    "     rcode := array_fill(2, ARRAY[n]); "
    "     rtok := array_fill(NULL::bigint, ARRAY[n]); rexp := rtok; "
    "    END IF; "
    "    run_now := leased_now(); "
    "    FOR u IN UPDATE leased_leases l SET expiry_ns = CASE "
    "      WHEN l.owner = c.o AND l.owner <> '' AND l.token = c.t "
    "       AND l.expiry_ns > run_now "
    "      THEN greatest(run_now + ttl, l.expiry_ns + 1) "
    "      ELSE l.expiry_ns END "
    "     FROM unnest(s[i:j - 1], o[i:j - 1], t[i:j - 1]) "
    "      WITH ORDINALITY AS c(s, o, t, k) "
    "     WHERE l.session = c.s "
    "     RETURNING (i - 1 + c.k)::int AS k, l.token, l.expiry_ns, "
    "      l.owner = c.o AND l.owner <> '' AND l.token = c.t "
    "      AND l.expiry_ns > run_now AS renewed "
    "    LOOP "
    "     rcode[u.k] := CASE WHEN u.renewed THEN 0 ELSE -1 END; "
    "     rtok[u.k] := u.token; rexp[u.k] := u.expiry_ns; "
    "    END LOOP; "
    "   END IF; "
    "  END IF; "
    "  IF i <= run_end THEN "
    "   IF rcode[i] >= 0 THEN "
    "    code := rcode[i]; now_ns := run_now; "
    "    IF code = 0 THEN tok := rtok[i]; exp := rexp[i]; END IF; "
    "    RETURN NEXT; CONTINUE; "
    "   END IF; "
    "  ELSIF op[i] = 2 THEN "
    "   now_ns := leased_now(); "
    "   UPDATE leased_leases SET "
    "    expiry_ns = greatest(now_ns + ttl, expiry_ns + 1) "
    "    WHERE session = s[i] AND owner = o[i] AND owner <> '' "
    "    AND token = t[i] AND expiry_ns > now_ns "
    "    RETURNING token, expiry_ns INTO tok, exp; "
    "   IF FOUND THEN code := 0; RETURN NEXT; CONTINUE; END IF; "
    "  END IF; "
    "  IF gen IS NULL THEN "
    "   SELECT value INTO gen FROM leased_meta WHERE key = 'generation'; "
    "   SELECT value INTO qend FROM leased_meta "
    "    WHERE key = 'quarantine_end_ns'; "
    "  END IF; "
    "  <<one>> LOOP "
    "   SELECT * INTO r FROM leased_leases WHERE session = s[i] FOR UPDATE; "
    "   had := FOUND; "
    "   now_ns := leased_now(); "
    "   live := had AND r.owner <> '' AND (now_ns < r.expiry_ns OR "
    "    (r.generation < gen AND now_ns < qend)); "
    "   IF op[i] = 1 THEN "
    "    IF live THEN "
    "     IF r.owner <> o[i] THEN code := 1; EXIT one; END IF; "
    "     exp := greatest(now_ns + ttl, r.expiry_ns + 1); "
    "     UPDATE leased_leases SET expiry_ns = exp WHERE session = s[i]; "
    "     code := 0; tok := r.token; EXIT one; "
    "    END IF; "
    "    code := 0; exp := now_ns + ttl; "
    "    IF had THEN "
    "     tok := r.token + 1; "
    "     flags := CASE WHEN r.owner <> '' THEN 3 ELSE 1 END; "
    "     UPDATE leased_leases SET owner = o[i], token = tok, "
    "      expiry_ns = exp, generation = gen WHERE session = s[i]; "
    "     EXIT one; "
    "    END IF; "
    "    SELECT value + 1 INTO tok FROM leased_meta "
    "     WHERE key = 'token_floor'; "
    "    flags := 1; "
    "    INSERT INTO leased_leases VALUES (s[i], o[i], tok, exp, gen) "
    "     ON CONFLICT (session) DO NOTHING; "
    "    IF FOUND THEN EXIT one; END IF; "
    /* Another replica inserted it meanwhile: decide on its row. */
    "    CONTINUE one; "
    "   END IF; "
    "   IF NOT had OR r.owner = '' OR r.owner <> o[i] "
    "    OR r.token <> t[i] THEN "
    "    code := CASE WHEN op[i] = 2 THEN 2 ELSE 3 END; EXIT one; "
    "   END IF; "
    "   code := 0; tok := r.token; "
    "   IF op[i] = 2 THEN "
    "    exp := greatest(now_ns + ttl, r.expiry_ns + 1); "
    "    IF r.expiry_ns <= now_ns THEN flags := 4; END IF; "
    "    UPDATE leased_leases SET expiry_ns = exp WHERE session = s[i]; "
    "   ELSE "
    "    exp := r.expiry_ns; "
    "    UPDATE leased_leases SET owner = '' WHERE session = s[i]; "
    "   END IF; "
    "   EXIT one; "
    "  END LOOP; "
    "  RETURN NEXT; "
    " END LOOP; "
    "END $$";

/* Created once, in this order, in one transaction under the schema lock.
 * Each entry is one statement (pipeline mode sends no scripts). */
const char *const pgsql_schema[] = {
    "CREATE TABLE leased_leases ("
    " session bytea PRIMARY KEY,"
    " owner bytea NOT NULL,"
    " token bigint NOT NULL,"
    " expiry_ns bigint NOT NULL,"
    " generation bigint NOT NULL)",

    "CREATE FUNCTION leased_now() RETURNS bigint LANGUAGE sql VOLATILE AS "
    "$$ SELECT (extract(epoch FROM clock_timestamp()) * 1000000000)"
    "::bigint $$",

    "CREATE FUNCTION leased_meta_value(k text) RETURNS bigint "
    "LANGUAGE sql STABLE AS "
    "$$ SELECT value FROM leased_meta WHERE key = k $$",

    /* Live: held and not expired, or held since before the last change
     * of primary while its quarantine lasts. */
    "CREATE FUNCTION leased_live(r leased_leases, now_ns bigint) "
    "RETURNS boolean LANGUAGE sql STABLE AS $$ SELECT r.owner <> '' AND "
    "(now_ns < r.expiry_ns OR "
    " (r.generation < leased_meta_value('generation') AND "
    "  now_ns < leased_meta_value('quarantine_end_ns'))) $$",

    leased_decide,

    /* Rows expired or released for longer than a TTL, not quarantined,
     * and not locked by a batch; one collector at a time. */
    "CREATE FUNCTION leased_collect(ttl bigint, lim int, "
    " OUT collected bigint, OUT expired bigint) "
    "LANGUAGE plpgsql AS $$ "
    "DECLARE now_ns bigint := leased_now(); top bigint; "
    "BEGIN "
    " collected := 0; expired := 0; "
    " IF NOT pg_try_advisory_xact_lock(1818583411, 3) OR NOT EXISTS ("
    "   SELECT 1 FROM leased_leases l WHERE l.expiry_ns < now_ns - ttl "
    "   AND NOT leased_live(l, now_ns)) THEN RETURN; END IF; "
    " PERFORM pg_advisory_xact_lock(1818583411, 2); "
    " now_ns := leased_now(); "
    " WITH gone AS (DELETE FROM leased_leases WHERE session IN ("
    "   SELECT session FROM leased_leases l WHERE l.expiry_ns < now_ns - ttl"
    "   AND NOT leased_live(l, now_ns) LIMIT lim FOR UPDATE SKIP LOCKED) "
    "  RETURNING token, owner) "
    " SELECT count(*), count(*) FILTER (WHERE owner <> ''), max(token) "
    "  INTO collected, expired, top FROM gone; "
    " IF collected > 0 THEN "
    "  UPDATE leased_meta SET value = greatest(value, top) "
    "   WHERE key = 'token_floor'; "
    " END IF; "
    "END $$",
};

const size_t pgsql_schema_count = sizeof(pgsql_schema) / sizeof(*pgsql_schema);

/* Version 1 decided each call with a statement of its own (functions
 * leased_begin, leased_acquire, leased_renew and leased_release); they
 * stay for replicas of that version still running during the upgrade.
 * Versions 2 and 3 had older bodies of leased_decide (version 2 had no
 * short path for renewals, version 3 one UPDATE per renewal); this one
 * replaces theirs in place, deciding the same, so replicas of those
 * versions still running call it unchanged. */
const char *const pgsql_upgrade[] = {leased_decide};
const size_t pgsql_upgrade_count =
    sizeof(pgsql_upgrade) / sizeof(*pgsql_upgrade);

/* Prepared on every connection, named by their index ("s0", "s1"…). */
const char *const pgsql_stmt[PGSQL_COUNT] = {
    [PGSQL_DECIDE] = "SELECT * FROM leased_decide($1::int[], $2::bytea[], "
                     "$3::bytea[], $4::bigint[], $5::bigint)",
    [PGSQL_ROLLBACK] = "ROLLBACK",
    [PGSQL_GET] =
        "SELECT owner, token, expiry_ns, leased_live(l, leased_now()) "
        "FROM leased_leases l WHERE session = $1::bytea",
    /* $3: the end of the prefix's range, or NULL (no end). */
    [PGSQL_LIST] = "SELECT session, owner, token, expiry_ns, "
                   "leased_live(l, n.now_ns) "
                   "FROM leased_leases l, (SELECT leased_now() AS now_ns) n "
                   "WHERE owner <> '' AND session > $1::bytea "
                   "AND session >= $2::bytea "
                   "AND ($3::bytea IS NULL OR session < $3::bytea) "
                   "AND substring(session FROM 1 FOR length($2::bytea)) = $2 "
                   "ORDER BY session LIMIT $4::bigint",
    [PGSQL_STATS] =
        "SELECT a.live, a.entries, greatest(a.top, "
        "leased_meta_value('token_floor')), "
        "greatest(leased_meta_value('quarantine_end_ns') - n.now_ns, "
        "0) FROM (SELECT leased_now() AS now_ns) n, LATERAL "
        "(SELECT count(*) FILTER (WHERE leased_live(l, n.now_ns)) "
        "AS live, count(*) AS entries, coalesce(max(token), 0) AS top "
        "FROM leased_leases l) a",
    [PGSQL_COLLECT] = "SELECT * FROM leased_collect($1::bigint, $2::int)",
    /* An operator's Revoke (core/rules.h): the held row, locked, and
     * whether it was released ($2: its token, or 0 for any); no row when
     * nobody holds the session. A statement of its own, not a function
     * of the schema: it reads neither clock nor floor, and ends a lease
     * as a Release does (owner '', token and expiry kept). */
    [PGSQL_REVOKE] =
        "WITH old AS (SELECT owner, token, expiry_ns FROM leased_leases "
        " WHERE session = $1::bytea AND owner <> '' FOR UPDATE), "
        "gone AS (UPDATE leased_leases l SET owner = ''::bytea FROM old "
        " WHERE l.session = $1::bytea "
        " AND ($2::bigint = 0 OR old.token = $2::bigint) RETURNING 1) "
        "SELECT owner, token, expiry_ns, EXISTS (SELECT 1 FROM gone) "
        "FROM old",
};

/* --- The one-off statements of the blocking calls (see pgsql.h) ------- */

#include <stdio.h>

const char pgsql_begin[] = "BEGIN";
const char pgsql_commit[] = "COMMIT";
const char pgsql_rollback[] = "ROLLBACK";
const char pgsql_lock_schema[] =
    "SELECT pg_advisory_xact_lock(1818583411, 1)";
const char pgsql_lock_floor[] = "SELECT pg_advisory_xact_lock(1818583411, 2)";

const char pgsql_meta_exists[] =
    "SELECT to_regclass('leased_meta') IS NOT NULL";
const char pgsql_meta_create[] = "CREATE TABLE leased_meta (key text PRIMARY "
                                 "KEY, value bigint NOT NULL)";
const char pgsql_meta_get[] = "SELECT value FROM leased_meta WHERE key = $1";
const char pgsql_quarantine_left[] =
    "SELECT greatest(leased_meta_value('quarantine_end_ns')"
    " - leased_now(), 0)";

const char pgsql_import_lock[] = "LOCK leased_leases IN EXCLUSIVE MODE";
const char pgsql_import_count[] = "SELECT count(*) FROM leased_leases";
const char pgsql_import_row[] = "INSERT INTO leased_leases VALUES ($1::bytea,"
                                " $2::bytea, $3::bigint, $4::bigint, "
                                "$5::bigint)";

void pgsql_format_timeouts(char *sql, size_t len, int lock_timeout_ms,
                           const char *check_closed_ms)
{
    if (check_closed_ms != NULL)
        snprintf(sql, len,
                 "SELECT set_config('lock_timeout', '%d', false), "
                 "set_config('client_connection_check_interval', '%s', "
                 "false)",
                 lock_timeout_ms, check_closed_ms);
    else
        snprintf(sql, len, "SELECT set_config('lock_timeout', '%d', false)",
                 lock_timeout_ms);
}

void pgsql_format_meta(char *sql, size_t len, long long ttl_ns)
{
    snprintf(sql, len,
             "INSERT INTO leased_meta VALUES ('schema_version', %d), "
             "('ttl_ns', %lld), ('token_floor', 0), ('generation', 0), "
             "('quarantine_end_ns', 0), ('primary_started_us', "
             "(extract(epoch FROM pg_postmaster_start_time()) * 1000000)"
             "::bigint)",
             PGSQL_SCHEMA_VERSION, ttl_ns);
}

void pgsql_format_version(char *sql, size_t len)
{
    snprintf(sql, len,
             "UPDATE leased_meta SET value = %d "
             "WHERE key = 'schema_version'",
             PGSQL_SCHEMA_VERSION);
}

void pgsql_format_primary(char *sql, size_t len, long long quarantine_ns)
{
    snprintf(sql, len,
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
             quarantine_ns);
}

void pgsql_format_floor(char *sql, size_t len, unsigned long long floor,
                        long long quarantine_ns)
{
    snprintf(sql, len,
             "UPDATE leased_meta SET value = CASE key "
             "WHEN 'token_floor' THEN greatest(value, %llu) "
             "WHEN 'generation' THEN value + 1 "
             "ELSE greatest(value, leased_now() + %lld) END "
             "WHERE key IN ('token_floor', 'generation', "
             "'quarantine_end_ns')",
             floor, quarantine_ns);
}

void pgsql_format_raise(char *sql, size_t len, unsigned long long floor)
{
    snprintf(sql, len,
             "UPDATE leased_leases SET token = %llu WHERE token < %llu",
             floor, floor);
}
