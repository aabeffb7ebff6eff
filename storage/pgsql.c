/*
 * The SQL of the PostgreSQL store (see pgsql.h), which the storage/pg_*.c
 * files run.
 *
 * Schema (leased_meta 'schema_version' = 7):
 *   leased_leases(session bytea PRIMARY KEY, owner bytea, token bigint,
 *                 expiry_ns bigint, generation bigint, told boolean)
 *     owner '' means released; expiry_ns is the database's clock, ns since
 *     the epoch; generation is the primary generation (below) of the
 *     row's last takeover; told: its expiry was told as an event (reset
 *     by its next change).
 *   leased_waiters(id bigserial PRIMARY KEY, session bytea, owner bytea,
 *                  lk int, lp int, call bigint)
 *     the lines of Wait calls: per session, in id order, first come
 *     first served. (lk, lp) names the listening connection of the
 *     replica that has the call (its number `call` there): that
 *     connection holds advisory lock (lk, lp) and LISTENs on channel
 *     "leased_w<lk>_<lp>" (unique: no two sessions hold one lock), so a
 *     waiter whose replica is gone (its connection closed, the lock with
 *     it) is skipped and deleted, never granted.
 *   leased_events(revision bigint PRIMARY KEY, session bytea, kind int,
 *                 owner bytea, token bigint, expiry_ns bigint)
 *     the changes of owner Watch tells (kind: storage/store.h's enum
 *     store_event_kind; the lease that began, or the one that ended), the
 *     last --watch-history of them; revisions from 'revision' below, in
 *     commit order.
 *   leased_meta(key text PRIMARY KEY, value bigint)
 *     'ttl_ns': the TTL every replica must use;
 *     'token_floor': the highest token of every row ever deleted; a new
 *     row starts above it, so collecting rows never lowers a token;
 *     'revision': the newest event's revision;
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

/* Whether the replica's listening connection that holds advisory lock
 * (lk, lp) is there: another backend holds the lock. A batch's backend is
 * never a listening one, so the lock a row names with this backend's pid
 * is that of a connection gone. */
static const char leased_listening[] =
    "CREATE OR REPLACE FUNCTION leased_listening(lk int, lp int) "
    "RETURNS boolean LANGUAGE sql VOLATILE AS $$ SELECT lp <> "
    "pg_backend_pid() AND NOT pg_try_advisory_xact_lock(lk, lp) $$";

/* A Wait's steps in its line (leased_decide's ops 5 to 7), for call c
 * of the replica listening as (wk, wp). Looking again: 5 and when the
 * lease may end (e) while in line, 6 once not. Joining (o its owner).
 * Leaving: 3, or 6 when no longer in line. */
static const char leased_look[] =
    "CREATE OR REPLACE FUNCTION leased_look(sess bytea, wk int, wp int, "
    " c bigint, e bigint, OUT code int, OUT exp bigint) "
    "LANGUAGE sql STABLE AS $$ SELECT CASE WHEN w THEN 5 ELSE 6 END, "
    "CASE WHEN w THEN e END FROM (SELECT EXISTS (SELECT 1 "
    "FROM leased_waiters WHERE session = sess AND lk = wk AND lp = wp "
    "AND call = c) AS w) x $$";
static const char leased_join[] =
    "CREATE OR REPLACE FUNCTION leased_join(sess bytea, o bytea, wk int, "
    " wp int, c bigint) RETURNS void LANGUAGE sql VOLATILE AS $$ "
    "INSERT INTO leased_waiters (session, owner, lk, lp, call) "
    "VALUES (sess, o, wk, wp, c) $$";
static const char leased_leave[] =
    "CREATE OR REPLACE FUNCTION leased_leave(sess bytea, wk int, wp int, "
    " c bigint) RETURNS int LANGUAGE sql VOLATILE AS $$ WITH gone AS ("
    "DELETE FROM leased_waiters WHERE session = sess AND lk = wk "
    "AND lp = wp AND call = c RETURNING 1) "
    "SELECT CASE WHEN EXISTS (SELECT 1 FROM gone) THEN 3 ELSE 6 END $$";

/* When a lease may end, as a Wait sees it: its expiry, or the end of
 * the quarantine that keeps it live past it (q). */
static const char leased_end[] =
    "CREATE OR REPLACE FUNCTION leased_end(expiry_ns bigint, q boolean, "
    " qend bigint) RETURNS bigint LANGUAGE sql IMMUTABLE AS "
    "$$ SELECT CASE WHEN q THEN greatest(expiry_ns, qend) "
    "ELSE expiry_ns END $$";

/* The events of a change (op, flags as leased_rule answered them) of
 * sess's row, from (ro, rt, re) to (no, nt, ne), in leased_events' shape
 * with no revision yet (leased_record gives them theirs): a takeover is
 * GRANTED (1), after EXPIRED (3) when it replaced a holder whose expiry
 * was not told yet; a release RELEASED (2), a revoke REVOKED (4); a
 * renewal after a told expiry (a reclaim) GRANTED again. Anything else
 * (a renewal, its owner's Acquire) is no event. */
static const char leased_said[] =
    "CREATE OR REPLACE FUNCTION leased_said(op int, flags int, told boolean,"
    " s bytea, ro bytea, rt bigint, re bigint, no bytea, nt bigint, "
    " ne bigint) RETURNS leased_events[] LANGUAGE sql IMMUTABLE AS $$ "
    "SELECT CASE WHEN flags & 1 = 1 THEN CASE WHEN flags & 2 = 2 "
    " AND NOT told THEN ARRAY[ROW(0, s, 3, ro, rt, re)::leased_events, "
    " ROW(0, s, 1, no, nt, ne)::leased_events] "
    " ELSE ARRAY[ROW(0, s, 1, no, nt, ne)::leased_events] END "
    "WHEN op IN (3, 4) THEN ARRAY[ROW(0, s, CASE op WHEN 3 THEN 2 "
    " ELSE 4 END, ro, rt, re)::leased_events] "
    "WHEN flags & 4 = 4 AND told THEN "
    " ARRAY[ROW(0, s, 1, no, nt, ne)::leased_events] "
    "ELSE '{}'::leased_events[] END $$";

/* Gives the events evs their revisions, the next ones of the counter
 * (leased_meta 'revision'), and stores them; the replicas are told on
 * channel leased_events, with the newest, once this transaction commits.
 * The counter's row stays locked until then, so revisions are in commit
 * order across replicas, without a gap: every caller takes it after the
 * rows it changes (never before one), so none deadlocks. */
static const char leased_record[] =
    "CREATE OR REPLACE FUNCTION leased_record(evs leased_events[]) "
    "RETURNS void LANGUAGE plpgsql AS $$ "
    "DECLARE n int := coalesce(cardinality(evs), 0); top bigint; "
    "BEGIN "
    " IF n = 0 THEN RETURN; END IF; "
    " UPDATE leased_meta SET value = value + n WHERE key = 'revision' "
    "  RETURNING value INTO top; "
    " IF top IS NULL THEN "
    "  RAISE EXCEPTION 'leased_record: no revision counter'; "
    " END IF; "
    " INSERT INTO leased_events SELECT top - n + e.k, e.session, e.kind, "
    "  e.owner, e.token, e.expiry_ns FROM unnest(evs) WITH ORDINALITY "
    "  AS e(revision, session, kind, owner, token, expiry_ns, k); "
    " PERFORM pg_notify('leased_events', top::text); "
    "END $$";

/* The lease of sess (locked by the caller) ended: the first in its line
 * whose replica is there takes it, as its Acquire would (leased_rule),
 * and its replica is told on channel leased_w<lk>_<lp>, with "call token
 * expiry flags", once this transaction commits. Waiters whose replica is
 * gone are deleted on the way. lined: whether the line had anyone; evs:
 * the events of the grant (leased_said). */
static const char leased_give[] =
    "CREATE OR REPLACE FUNCTION leased_give(sess bytea, ttl bigint, "
    " gen bigint, qend bigint, OUT lined boolean, OUT evs leased_events[]) "
    "LANGUAGE plpgsql AS $$ "
    "DECLARE r leased_leases; w leased_waiters; now_ns bigint; d record; "
    "BEGIN "
    " lined := false; evs := '{}'; "
    " SELECT * INTO r FROM leased_leases WHERE session = sess; "
    " LOOP "
    "  SELECT * INTO w FROM leased_waiters WHERE session = sess "
    "   ORDER BY id LIMIT 1; "
    "  IF NOT FOUND THEN RETURN; END IF; "
    "  lined := true; "
    "  DELETE FROM leased_waiters WHERE id = w.id; "
    "  CONTINUE WHEN NOT leased_listening(w.lk, w.lp); "
    "  now_ns := leased_now(); "
    "  d := leased_rule(1, true, r.owner, r.token, r.expiry_ns, "
    "   leased_quarantined(r.generation, gen, qend, now_ns), w.owner, 0, "
    "   now_ns, ttl); "
    "  IF d.code <> 0 OR d.flags & 1 = 0 THEN "
    "   RAISE EXCEPTION 'leased_give: the lease is live'; "
    "  END IF; "
    "  UPDATE leased_leases SET owner = d.owner, token = d.tok, "
    "   expiry_ns = d.exp, generation = gen, told = false "
    "   WHERE session = sess; "
    "  evs := leased_said(1, d.flags, r.told, sess, r.owner, r.token, "
    "   r.expiry_ns, d.owner, d.tok, d.exp); "
    "  PERFORM pg_notify('leased_w' || w.lk || '_' || w.lp, w.call || "
    "   ' ' || d.tok || ' ' || d.exp || ' ' || d.flags); "
    "  RETURN; "
    " END LOOP; "
    "END $$";

/* One call of a batch on the general path (see leased_decide): op on
 * sess for owner ow, token tk, with the generation and quarantine the
 * batch read: the call's answer, and the events of what it changed. */
static const char leased_general[] =
    "CREATE OR REPLACE FUNCTION leased_general(op int, sess bytea, "
    " ow bytea, tk bigint, ttl bigint, wk int, wp int, gen bigint, "
    " qend bigint, OUT code int, OUT tok bigint, OUT exp bigint, "
    " OUT flags int, OUT now_ns bigint, OUT evs leased_events[]) "
    "LANGUAGE plpgsql AS $$ "
    "DECLARE r leased_leases; had boolean; d record; q boolean; g record; "
    "BEGIN "
    " flags := 0; evs := '{}'; "
    " LOOP "
    "  SELECT * INTO r FROM leased_leases WHERE session = sess FOR UPDATE; "
    "  had := FOUND; "
    "  now_ns := leased_now(); "
    "  q := had AND leased_quarantined(r.generation, gen, qend, now_ns); "
    /* A Wait's call ended: it leaves the line. */
    "  IF op = 7 THEN code := leased_leave(sess, wk, wp, tk); RETURN; "
    "  END IF; "
    /* A lease that ended goes to the first in line before any call but
     * a release can take it, or its holder reclaim it. */
    "  IF had AND op <> 3 "
    "   AND NOT leased_is_live(r.owner, r.expiry_ns, q, now_ns) THEN "
    "   g := leased_give(sess, ttl, gen, qend); evs := evs || g.evs; "
    "   CONTINUE WHEN g.lined; "
    "  END IF; "
    /* A Wait in line looks again. */
    "  IF op = 6 THEN "
    "   d := leased_look(sess, wk, wp, tk, "
    "    coalesce(leased_end(r.expiry_ns, q, qend), now_ns + ttl)); "
    "   code := d.code; exp := d.exp; RETURN; "
    "  END IF; "
    /* A new row starts above the floor: leased_rule adds the 1. */
    "  IF NOT had AND op IN (1, 5) THEN "
    "   SELECT value INTO r.token FROM leased_meta "
    "    WHERE key = 'token_floor'; "
    "  END IF; "
    /* A Wait is decided as an Acquire... */
    "  d := leased_rule(CASE op WHEN 5 THEN 1 ELSE op END, had, "
    "   r.owner, r.token, r.expiry_ns, q, ow, tk, now_ns, ttl); "
    "  code := d.code; flags := d.flags; "
    /* ...but, refused because another holds the lease, joins the line,
     * with when the lease may end. */
    "  IF code = 1 AND op = 5 THEN "
    "   PERFORM leased_join(sess, ow, wk, wp, tk); "
    "   code := 5; exp := leased_end(r.expiry_ns, q, qend); RETURN; "
    "  END IF; "
    "  IF code <> 0 THEN RETURN; END IF; "
    "  tok := d.tok; exp := d.exp; "
    /* A takeover stamps the row with this primary's generation. */
    "  IF had THEN "
    "   UPDATE leased_leases SET owner = d.owner, token = d.tok, "
    "    expiry_ns = d.exp, told = false, generation = CASE "
    "    WHEN d.flags & 1 = 1 THEN gen ELSE generation END "
    "    WHERE session = sess; "
    "  ELSE "
    "   INSERT INTO leased_leases VALUES (sess, d.owner, d.tok, d.exp, gen)"
    "    ON CONFLICT (session) DO NOTHING; "
    /* Another replica inserted it meanwhile: decide on its row. */
    "   CONTINUE WHEN NOT FOUND; "
    "  END IF; "
    "  evs := evs || leased_said(op, flags, had AND r.told, sess, r.owner, "
    "   r.token, r.expiry_ns, d.owner, d.tok, d.exp); "
    /* A release hands the lease to the first in line. */
    "  IF op = 3 THEN "
    "   evs := evs || (leased_give(sess, ttl, gen, qend)).evs; "
    "  END IF; "
    "  RETURN; "
    " END LOOP; "
    "END $$";

/* A batch: calls i = 1..n, op[i] an enum rules_op, in session order
 * (then arrival order), decided in their order, one row each: code (enum
 * rules_code), the lease's token and expiry (code 0), flags (enum
 * rules_flag: 1 takeover, 2 it replaced an expired holder, 4 a renewal
 * after expiry), and the time of the decision. One statement for the
 * whole batch: its calls cost no round trip, parse or plan of their own.
 * The floor lock first.
 *
 * Three more ops are a Wait's (enum pgstore_line), t[i] its call number
 * at the replica whose listening connection is (wk, wp): 5 joins, an
 * Acquire that, refused because another holds the lease, joins the line
 * instead (code 5, exp when the lease may end: its expiry, or the
 * quarantine's end); 6 looks again (code 5 and exp while in line, 6 once
 * not: it was granted, and told on its channel); 7 leaves (3, or 6 when
 * no longer in line). A lease that ended, with a line, goes to the first
 * in line before any other call decides on it (leased_give), and a
 * release hands it over at once.
 *
 * Every change of owner is an event for Watch (leased_said), stored with
 * the next revisions once the batch's calls are decided (leased_record),
 * so that the counter is the last lock the batch takes.
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
 * The general path (leased_general, a call each) locks and reads the
 * row, asks leased_rule, and writes what it answered: the rules are in
 * leased_rule alone.
 *
 * The generation and the quarantine are read at most once, by the first
 * call that needs them: they change only when a connection finds a new
 * primary, which it stores before its first batch, and every connection
 * to that primary is new. They are read by statements of this function,
 * not leased_meta_value(): a SQL function called from PL/pgSQL is parsed
 * and planned again in every transaction. */
static const char leased_decide[] =
    "CREATE OR REPLACE FUNCTION leased_decide(op int[], s bytea[], "
    " o bytea[], t bigint[], ttl bigint, wk int, wp int, OUT code int, "
    " OUT tok bigint, OUT exp bigint, OUT flags int, OUT now_ns bigint) "
    "RETURNS SETOF record LANGUAGE plpgsql "
    "SET enable_seqscan = off SET enable_bitmapscan = off AS $$ "
    "DECLARE g record; evs leased_events[] := '{}'; "
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
    "  g := leased_general(op[i], s[i], o[i], t[i], ttl, wk, wp, gen, "
    "   qend); "
    "  code := g.code; tok := g.tok; exp := g.exp; flags := g.flags; "
    "  now_ns := g.now_ns; evs := evs || g.evs; "
    "  RETURN NEXT; "
    " END LOOP; "
    " IF cardinality(evs) > 0 THEN PERFORM leased_record(evs); END IF; "
    "END $$";

/* The batch of versions 2 to 5, which their replicas still call during
 * an upgrade: no Waits, the same decisions (a release hands over). */
static const char leased_decide_5[] =
    "CREATE OR REPLACE FUNCTION leased_decide(op int[], s bytea[], "
    " o bytea[], t bigint[], ttl bigint, OUT code int, OUT tok bigint, "
    " OUT exp bigint, OUT flags int, OUT now_ns bigint) "
    "RETURNS SETOF record LANGUAGE sql AS "
    "$$ SELECT * FROM leased_decide(op, s, o, t, ttl, NULL, NULL) $$";

/* An operator's Revoke (core/rules.h) of sess: the held row, locked,
 * and whether it was released (tk: its token, or 0 for any); no row
 * when nobody holds the session. It ends a lease as a Release does
 * (owner '', token and expiry kept), hands it to the first in line, and
 * stores the events (REVOKED, and the grant). */
static const char leased_revoke[] =
    "CREATE OR REPLACE FUNCTION leased_revoke(sess bytea, tk bigint, "
    " ttl bigint, OUT o bytea, OUT tok bigint, OUT exp bigint, "
    " OUT revoked boolean) RETURNS SETOF record LANGUAGE plpgsql AS $$ "
    "DECLARE r leased_leases; "
    "BEGIN "
    " SELECT * INTO r FROM leased_leases l WHERE l.session = sess "
    "  AND l.owner <> '' FOR UPDATE; "
    " IF NOT FOUND THEN RETURN; END IF; "
    " o := r.owner; tok := r.token; exp := r.expiry_ns; "
    " revoked := tk = 0 OR r.token = tk; "
    " IF revoked THEN "
    "  UPDATE leased_leases l SET owner = '', told = false "
    "   WHERE l.session = sess; "
    "  PERFORM leased_record(leased_said(4, 0, r.told, sess, r.owner, "
    "   r.token, r.expiry_ns, NULL, NULL, NULL) || (leased_give(sess, ttl, "
    "   leased_meta_value('generation'), "
    "   leased_meta_value('quarantine_end_ns'))).evs); "
    " END IF; "
    " RETURN NEXT; "
    "END $$";

/* Expiries told as they happen: up to lim held leases past their expiry
 * (and any quarantine) whose expiry was not told, marked told and stored
 * as EXPIRED events, oldest expiry first; rows a batch has locked are
 * left for the next time. One teller at a time (the others return 0 at
 * once). Returns how many it told. */
static const char leased_tell[] =
    "CREATE OR REPLACE FUNCTION leased_tell(lim int) RETURNS bigint "
    "LANGUAGE plpgsql AS $$ "
    "DECLARE now_ns bigint := leased_now(); evs leased_events[]; "
    "BEGIN "
    " IF NOT pg_try_advisory_xact_lock(1818583411, 4) THEN RETURN 0; "
    " END IF; "
    " WITH t AS (UPDATE leased_leases l SET told = true WHERE session IN ("
    "   SELECT session FROM leased_leases x WHERE x.owner <> '' "
    "   AND NOT x.told AND NOT leased_live(x, now_ns) "
    "   ORDER BY x.expiry_ns LIMIT lim FOR UPDATE SKIP LOCKED) "
    "  RETURNING l.session, l.owner, l.token, l.expiry_ns) "
    " SELECT array_agg(ROW(0, t.session, 3, t.owner, t.token, t.expiry_ns)"
    "  ::leased_events ORDER BY t.expiry_ns, t.session) INTO evs FROM t; "
    " PERFORM leased_record(evs); "
    " RETURN coalesce(cardinality(evs), 0); "
    "END $$";

/* Rows expired or released for longer than a TTL, not quarantined, with
 * no line, not locked by a batch, and released or told expired (a
 * collection tells first: leased_tell, once no batch holds the floor
 * lock, as no batch may wait for the counter it then holds); and the waiters whose replica is
 * gone, but those a revoke's hand-over has locked (it may wait for one
 * of this collection's: never the other way round). One collector at a
 * time. */
static const char leased_collect[] =
    "CREATE OR REPLACE FUNCTION leased_collect(ttl bigint, lim int, "
    " OUT collected bigint, OUT expired bigint) "
    "LANGUAGE plpgsql AS $$ "
    "DECLARE now_ns bigint := leased_now(); top bigint; "
    "BEGIN "
    " collected := 0; expired := 0; "
    " IF NOT pg_try_advisory_xact_lock(1818583411, 3) OR (NOT EXISTS ("
    "   SELECT 1 FROM leased_leases l WHERE l.expiry_ns < now_ns - ttl "
    "   AND NOT leased_live(l, now_ns)) AND NOT EXISTS ("
    "   SELECT 1 FROM leased_waiters w "
    "   WHERE NOT leased_listening(w.lk, w.lp))) THEN RETURN; END IF; "
    " PERFORM pg_advisory_xact_lock(1818583411, 2); "
    /* With no batch left holding the floor lock, none waits for the
     * counter the telling takes. */
    " PERFORM leased_tell(lim); "
    " DELETE FROM leased_waiters WHERE id IN (SELECT id "
    "  FROM leased_waiters w WHERE NOT leased_listening(w.lk, w.lp) "
    "  LIMIT lim FOR UPDATE SKIP LOCKED); "
    " now_ns := leased_now(); "
    " WITH gone AS (DELETE FROM leased_leases WHERE session IN ("
    "   SELECT session FROM leased_leases l WHERE l.expiry_ns < now_ns - ttl"
    "   AND (l.owner = '' OR l.told) AND NOT leased_live(l, now_ns) "
    "   AND NOT EXISTS (SELECT 1 "
    "   FROM leased_waiters w WHERE w.session = l.session) "
    "   LIMIT lim FOR UPDATE SKIP LOCKED) "
    "  RETURNING token, owner) "
    " SELECT count(*), count(*) FILTER (WHERE owner <> ''), max(token) "
    "  INTO collected, expired, top FROM gone; "
    " IF collected > 0 THEN "
    "  UPDATE leased_meta SET value = greatest(value, top) "
    "   WHERE key = 'token_floor'; "
    " END IF; "
    "END $$";

/* The lines of Waits (see the top). */
static const char leased_waiters_table[] =
    "CREATE TABLE IF NOT EXISTS leased_waiters ("
    " id bigserial PRIMARY KEY,"
    " session bytea NOT NULL,"
    " owner bytea NOT NULL,"
    " lk int NOT NULL,"
    " lp int NOT NULL,"
    " call bigint NOT NULL)";
static const char leased_waiters_line[] =
    "CREATE INDEX IF NOT EXISTS leased_waiters_line "
    "ON leased_waiters (session, id)";

/* What Watch tells (see the top). */
static const char leased_events_table[] =
    "CREATE TABLE IF NOT EXISTS leased_events ("
    " revision bigint PRIMARY KEY,"
    " session bytea NOT NULL,"
    " kind int NOT NULL,"
    " owner bytea NOT NULL,"
    " token bigint NOT NULL,"
    " expiry_ns bigint NOT NULL)";
static const char leased_told_column[] =
    "ALTER TABLE leased_leases ADD COLUMN IF NOT EXISTS "
    "told boolean NOT NULL DEFAULT false";
static const char leased_revision_counter[] =
    "INSERT INTO leased_meta VALUES ('revision', 0) "
    "ON CONFLICT (key) DO NOTHING";

/* Created once, in this order, in one transaction under the schema lock.
 * Each entry is one statement (pipeline mode sends no scripts). */
const char *const pgsql_schema[] = {
    "CREATE TABLE leased_leases ("
    " session bytea PRIMARY KEY,"
    " owner bytea NOT NULL,"
    " token bigint NOT NULL,"
    " expiry_ns bigint NOT NULL,"
    " generation bigint NOT NULL)",

    leased_told_column,
    leased_waiters_table,
    leased_waiters_line,
    leased_events_table,
    leased_revision_counter,

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
    leased_listening,
    leased_look,
    leased_join,
    leased_leave,
    leased_end,
    leased_said,
    leased_record,
    leased_give,
    leased_general,
    leased_decide,

    leased_decide_5,
    leased_revoke,
    leased_tell,
    leased_collect,
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
 * which leased_live now uses too (the same answers). Version 6 added the
 * lines of Waits: leased_decide takes two more arguments (the version of
 * five calls it), a release or revoke hands the lease over, and
 * collection keeps rows with a line. Version 7 added the events of
 * Watch: the table, its counter, the told column, and the functions
 * that write them (leased_give in place of leased_hand_over). */
const char *const pgsql_upgrade[] = {
    leased_told_column,
    leased_waiters_table,
    leased_waiters_line,
    leased_events_table,
    leased_revision_counter,
    leased_expired,
    leased_is_live,
    leased_quarantined,
    leased_holds,
    leased_extend,
    leased_live,
    leased_rule,
    leased_listening,
    leased_look,
    leased_join,
    leased_leave,
    leased_end,
    leased_said,
    leased_record,
    leased_give,
    leased_general,
    leased_decide,
    leased_decide_5,
    leased_revoke,
    leased_tell,
    leased_collect,
    "DROP FUNCTION IF EXISTS leased_hand_over(bytea, bigint, bigint, bigint)",
};
const size_t pgsql_upgrade_count =
    sizeof(pgsql_upgrade) / sizeof(*pgsql_upgrade);

/* Prepared on every connection, named by their index ("s0", "s1"…). */
const char *const pgsql_stmt[PGSQL_COUNT] = {
    [PGSQL_DECIDE] = "SELECT * FROM leased_decide($1::int[], $2::bytea[], "
                     "$3::bytea[], $4::bigint[], $5::bigint, $6::int, "
                     "$7::int)",
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
    /* $3: the TTL, for a hand-over (leased_revoke). */
    [PGSQL_REVOKE] = "SELECT * FROM leased_revoke($1::bytea, $2::bigint, "
                     "$3::bigint)",
    /* The counter, then up to $2 events after revision $1 (none: one row
     * of the counter alone). */
    [PGSQL_EVENTS] =
        "SELECT m.value, e.revision, e.session, e.kind, e.owner, e.token, "
        "e.expiry_ns FROM leased_meta m LEFT JOIN LATERAL (SELECT * "
        "FROM leased_events WHERE revision > $1::bigint ORDER BY revision "
        "LIMIT $2::bigint) e ON true WHERE m.key = 'revision' "
        "ORDER BY e.revision",
    [PGSQL_TELL] = "SELECT leased_tell($1::int)",
    /* Only the last $1 revisions stay. */
    [PGSQL_COMPACT] = "DELETE FROM leased_events WHERE revision <= "
                      "leased_meta_value('revision') - $1::bigint",
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

void pgsql_format_move_revisions(char *sql, size_t len,
                                 unsigned long long floor)
{
    snprintf(sql, len,
             "WITH moved AS (UPDATE leased_meta SET value = value + %lld "
             "WHERE key = 'revision' AND leased_meta_value('token_floor') "
             "< %llu RETURNING 1) DELETE FROM leased_events "
             "WHERE EXISTS (SELECT 1 FROM moved)",
             (long long)PGSQL_REVISION_MOVE, floor);
}

void pgsql_format_raise(char *sql, size_t len, unsigned long long floor)
{
    snprintf(sql, len,
             "UPDATE leased_leases SET token = %llu WHERE token < %llu",
             floor, floor);
}
