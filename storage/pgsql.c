/*
 * The SQL of the PostgreSQL store (see pgsql.h), which the storage/pg_*.c
 * files run.
 *
 * Schema (leased_meta 'schema_version' = 5):
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
 * time, in SQL: leased_rule mirrors rules_decide, a pure function of the
 * row, the request, now and the TTL, made of one small function per word
 * of the rules (leased_expired, leased_is_live, leased_quarantined,
 * leased_holds, leased_extend), each written once. leased_decide applies
 * it: for each call of a batch it locks the row (FOR UPDATE, or by the
 * UPDATE of a run of renewals), reads the database's clock, asks
 * leased_rule (or, on the short path, its words) and writes the answer.
 * One table of cases (tests/rules_cases.txt) plus random ones hold
 * leased_rule to rules_decide; the conformance suite holds the daemon in
 * both modes to one behaviour.
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

/* leased_rule and leased_decide write these numbers as literals: ops 1
 * Acquire, 2 Renew, 3 Release, 4 Revoke; codes 0 OK, 1 held, 2 lost, 3
 * no-op; flags 1 takeover, 2 it replaced an expired holder, 4 a renewal
 * after expiry. */
static_assert(RULES_ACQUIRE == 1 && RULES_RENEW == 2 && RULES_RELEASE == 3 &&
                  RULES_REVOKE == 4,
              "the ops leased_rule and leased_decide are written for");
static_assert(RULES_OK == 0 && RULES_HELD == 1 && RULES_LOST == 2 &&
                  RULES_NOOP == 3,
              "the codes leased_rule and leased_decide are written for");
static_assert(RULES_TAKEOVER == 1 && RULES_EXPIRED == 2 &&
                  RULES_RECLAIM == 4,
              "the flags leased_rule and leased_decide are written for");

/* The words of the rules, each said once: SQL functions of one SELECT
 * expression, IMMUTABLE and not STRICT, which the planner inlines into
 * the statements that call them (the short path's UPDATEs stay one plan,
 * with no function call per row). The names say what the C functions of
 * core/rules.c say. */

/* Expired: now is not before the expiry (rules_live's now < expiry). */
static const char leased_expired[] =
    "CREATE OR REPLACE FUNCTION leased_expired(expiry_ns bigint, "
    " now_ns bigint) RETURNS boolean LANGUAGE sql IMMUTABLE AS "
    "$$ SELECT expiry_ns <= now_ns $$";

/* Live (rules_live): held, and not expired or quarantined. */
static const char leased_is_live[] =
    "CREATE OR REPLACE FUNCTION leased_is_live(owner bytea, "
    " expiry_ns bigint, quarantined boolean, now_ns bigint) "
    "RETURNS boolean LANGUAGE sql IMMUTABLE AS $$ SELECT owner <> '' AND "
    "(NOT leased_expired(expiry_ns, now_ns) OR quarantined) $$";

/* The restart quarantine covers a row (rules_row.quarantined): it was
 * taken over before the last change of primary (its generation is older)
 * and the quarantine has not ended. */
static const char leased_quarantined[] =
    "CREATE OR REPLACE FUNCTION leased_quarantined(generation bigint, "
    " gen bigint, qend bigint, now_ns bigint) RETURNS boolean "
    "LANGUAGE sql IMMUTABLE AS "
    "$$ SELECT generation < gen AND now_ns < qend $$";

/* The request's owner and token are the row's (holds); a released row
 * matches nobody. */
static const char leased_holds[] =
    "CREATE OR REPLACE FUNCTION leased_holds(r_owner bytea, r_token bigint, "
    " q_owner bytea, q_token bigint) RETURNS boolean "
    "LANGUAGE sql IMMUTABLE AS $$ SELECT r_owner <> '' AND "
    "r_owner = q_owner AND r_token = q_token $$";

/* The expiry of an extension (extend): now + TTL, and strictly later
 * than the stored one. */
static const char leased_extend[] =
    "CREATE OR REPLACE FUNCTION leased_extend(expiry_ns bigint, "
    " now_ns bigint, ttl bigint) RETURNS bigint LANGUAGE sql IMMUTABLE AS "
    "$$ SELECT greatest(now_ns + ttl, expiry_ns + 1) $$";

/* Live with the meta table's quarantine, for the statements that read
 * rows (Get, List, stats, collection). Its parameters' names are those
 * of every older version, which CREATE OR REPLACE must keep. */
static const char leased_live[] =
    "CREATE OR REPLACE FUNCTION leased_live(r leased_leases, now_ns bigint) "
    "RETURNS boolean LANGUAGE sql STABLE AS $$ SELECT leased_is_live("
    " r.owner, r.expiry_ns, leased_quarantined(r.generation, "
    " leased_meta_value('generation'), "
    " leased_meta_value('quarantine_end_ns'), now_ns), now_ns) $$";

/* rules_decide, in SQL: op (enum rules_op) on one session's row, as
 * stored (had; no row: had false, and r_token the token floor, NULL for
 * 0, the other r_ ignored), with r_quarantined computed by the caller
 * (leased_quarantined), the request's owner and token, now and the TTL.
 * No table, no clock: tests/rules_cases.txt and random cases hold it to
 * rules_decide (tests/integration/test_postgres.py).
 *
 * Returns code (enum rules_code); when 0, what the row becomes (owner,
 * tok, exp; NULL otherwise) and flags (enum rules_flag): 1 a takeover,
 * plus 2 when the row had an owner (it had expired), or 4 a renewal after
 * expiry. PL/pgSQL, unlike the helpers: one call per general-path call,
 * its expressions planned once per session. An op it does not know
 * raises CASE_NOT_FOUND, as rules_decide aborts. */
static const char leased_rule[] =
    "CREATE OR REPLACE FUNCTION leased_rule(op int, had boolean, "
    " r_owner bytea, r_token bigint, r_expiry bigint, r_quarantined boolean,"
    " q_owner bytea, q_token bigint, now_ns bigint, ttl bigint, "
    " OUT code int, OUT owner bytea, OUT tok bigint, OUT exp bigint, "
    " OUT flags int) "
    "LANGUAGE plpgsql IMMUTABLE AS $$ "
    "BEGIN "
    " flags := 0; "
    " IF NOT had THEN "
    "  r_owner := ''; r_token := coalesce(r_token, 0); r_expiry := 0; "
    "  r_quarantined := false; "
    " END IF; "
    " CASE op "
    " WHEN 1 THEN "
    "  IF leased_is_live(r_owner, r_expiry, r_quarantined, now_ns) THEN "
    "   IF r_owner <> q_owner THEN code := 1; RETURN; END IF; "
    /* Its owner again, while live: the token kept. */
    "   code := 0; owner := r_owner; tok := r_token; "
    "   exp := leased_extend(r_expiry, now_ns, ttl); RETURN; "
    "  END IF; "
    /* A takeover (free, released, expired): a greater token. */
    "  code := 0; owner := q_owner; tok := r_token + 1; "
    "  exp := now_ns + ttl; "
    "  flags := CASE WHEN r_owner <> '' THEN 3 ELSE 1 END; "
    " WHEN 2 THEN "
    "  IF NOT leased_holds(r_owner, r_token, q_owner, q_token) THEN "
    "   code := 2; RETURN; "
    "  END IF; "
    "  code := 0; owner := r_owner; tok := r_token; "
    "  exp := leased_extend(r_expiry, now_ns, ttl); "
    "  IF leased_expired(r_expiry, now_ns) THEN flags := 4; END IF; "
    " WHEN 3 THEN "
    "  IF NOT leased_holds(r_owner, r_token, q_owner, q_token) THEN "
    "   code := 3; RETURN; "
    "  END IF; "
    /* A tombstone: the token stays, so the next takeover's is greater. */
    "  code := 0; owner := ''; tok := r_token; exp := r_expiry; "
    " WHEN 4 THEN "
    "  IF r_owner = '' THEN code := 3; RETURN; END IF; "
    "  IF q_token <> 0 AND q_token <> r_token THEN code := 2; RETURN; END IF; "
    "  code := 0; owner := ''; tok := r_token; exp := r_expiry; "
    " END CASE; "
    "END $$";

/* A batch: calls i = 1..n, op[i] an enum rules_op, in session order
 * (then arrival order), decided in their order, one row each: code (enum
 * rules_code), the lease's token and expiry (code 0), flags (enum
 * rules_flag: 1 takeover, 2 it replaced an expired holder, 4 a renewal
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
 * both in that order. A lone renewal is one conditional UPDATE. Both
 * grant what leased_rule would (leased_holds, not leased_expired, then
 * leased_extend, the helpers it calls too), inlined in the statement. A
 * renewal the short path did not grant (expired, another owner or
 * token) falls through to the general path, which decides it as before
 * on the row it has locked already; one of a run whose row is missing is
 * refused then and there. So every row is locked at its place in session
 * order, and two batches never deadlock.
 *
 * The general path locks and reads the row, asks leased_rule, and
 * writes what it answered: the rules are in leased_rule alone.
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
    "DECLARE r leased_leases; had boolean; d record; "
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
    /* RETURNING sees the new expiry, later than run_now when renewed,
     * the same when not. */
    "    FOR u IN UPDATE leased_leases l SET expiry_ns = CASE "
    "      WHEN leased_holds(l.owner, l.token, c.o, c.t) "
    "       AND NOT leased_expired(l.expiry_ns, run_now) "
    "      THEN leased_extend(l.expiry_ns, run_now, ttl) "
    "      ELSE l.expiry_ns END "
    "     FROM unnest(s[i:j - 1], o[i:j - 1], t[i:j - 1]) "
    "      WITH ORDINALITY AS c(s, o, t, k) "
    "     WHERE l.session = c.s "
    "     RETURNING (i - 1 + c.k)::int AS k, l.token, l.expiry_ns, "
    "      leased_holds(l.owner, l.token, c.o, c.t) "
    "      AND NOT leased_expired(l.expiry_ns, run_now) AS renewed "
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
    "    expiry_ns = leased_extend(expiry_ns, now_ns, ttl) "
    "    WHERE session = s[i] AND leased_holds(owner, token, o[i], t[i]) "
    "    AND NOT leased_expired(expiry_ns, now_ns) "
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
    /* A new row starts above the floor: leased_rule adds the 1. */
    "   IF NOT had AND op[i] = 1 THEN "
    "    SELECT value INTO r.token FROM leased_meta "
    "     WHERE key = 'token_floor'; "
    "   END IF; "
    "   now_ns := leased_now(); "
    "   d := leased_rule(op[i], had, r.owner, r.token, r.expiry_ns, "
    "    leased_quarantined(r.generation, gen, qend, now_ns), o[i], t[i], "
    "    now_ns, ttl); "
    "   code := d.code; flags := d.flags; "
    "   IF code <> 0 THEN EXIT one; END IF; "
    "   tok := d.tok; exp := d.exp; "
    /* A takeover stamps the row with this primary's generation. */
    "   IF had THEN "
    "    UPDATE leased_leases SET owner = d.owner, token = d.tok, "
    "     expiry_ns = d.exp, generation = CASE WHEN d.flags & 1 = 1 "
    "     THEN gen ELSE generation END WHERE session = s[i]; "
    "    EXIT one; "
    "   END IF; "
    "   INSERT INTO leased_leases VALUES (s[i], d.owner, d.tok, d.exp, gen) "
    "    ON CONFLICT (session) DO NOTHING; "
    "   IF FOUND THEN EXIT one; END IF; "
    /* Another replica inserted it meanwhile: decide on its row. */
    "   CONTINUE one; "
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

    /* The rules' words (SQL bodies are checked at creation: each after
     * what it calls), then the rules, then what applies them. */
    leased_expired,
    leased_is_live,
    leased_quarantined,
    leased_holds,
    leased_extend,
    leased_live,
    leased_rule,
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
 * Versions 2 to 4 had older bodies of leased_decide (version 2 had no
 * short path for renewals, version 3 one UPDATE per renewal, version 4
 * the rules written inline); this one replaces theirs in place,
 * deciding the same, so replicas of those versions still running call it
 * unchanged. Version 5 added leased_rule and the words it is made of,
 * which leased_live now uses too (the same answers). */
const char *const pgsql_upgrade[] = {
    leased_expired, leased_is_live, leased_quarantined, leased_holds,
    leased_extend,  leased_live,    leased_rule,        leased_decide,
};
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
