/*
 * A fake database for the tests of daemon/mode_shared.c: storage/
 * postgres.h over rows in memory, whose timing and failures are the
 * test's.
 *
 * What it is:
 *  - the database's decisions: each batch is decided by core/rules.h's
 *    rules_decide() over the rows, on a clock the test sets
 *    (fake_pg_set_now), in the order the batches reach it, one
 *    transaction each: so answers mean what the real ones mean;
 *  - a pipeline per connection that the test drives: a batch sent is
 *    decided and committed only once the test answers it
 *    (fake_pg_answer) while batches are held (fake_pg_hold_batches),
 *    else at once; it can fail (fake_pg_fail_batches: STORE_EFAIL,
 *    nothing applied), the connection can break (fake_pg_break:
 *    STORE_EDOWN, the batches in flight dropped uncommitted), and the
 *    socket can be full (fake_pg_set_full: sent batches reach the
 *    database only once flushed). Each connection's socket is one end
 *    of a real socketpair: readable while an answer waits to be read or
 *    the connection broke, and not writable while "full", so the loop
 *    polls it as it polls libpq's;
 *  - gates for the blocking calls (enum fake_pg_call): held, stepped,
 *    released, failed, as fake_store.h's (both are fake_gate.h's);
 *  - a model of what was committed: every decision of a committed batch
 *    (and every Revoke), numbered by commit, so that a test can check,
 *    when a reply arrives, that a committed decision stands behind it
 *    (fake_pg_claim), and in what order a session's calls were decided
 *    (fake_pg_decisions); and each connection's history, one letter a
 *    transaction or job (fake_pg_history);
 *  - a checker of postgres.h's rules of use (fake_pg_misuses): one
 *    thread at a time on a connection, no blocking call while a batch is
 *    in flight, at most PGSTORE_PIPELINE_MAX batches, nothing on a
 *    closed store.
 *
 * What it is not: SQL. No quarantine, no primary changes, no warnings;
 * pgstore_open, pgstore_import and pgstore_raise_tokens fail (the tests
 * make connections with fake_pg_open()).
 *
 * Threads: the pipeline's calls run on the mode's loop, the blocking
 * ones on its workers, the fake_pg_* calls on the test's thread (the
 * loop's). One mutex guards it all. No gate holds a call longer than
 * FAKE_PG_GATE_MS: it then lets the call go and counts a timeout
 * (fake_pg_timeouts), so that a test never hangs on a gate.
 */
#ifndef LEASED_FAKE_PG_H
#define LEASED_FAKE_PG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rules.h"

#define FAKE_PG_GATE_MS 10000
#define FAKE_PG_MAX_CONNS 16
#define FAKE_PG_HISTORY 4096 /* letters kept per connection */

struct fake_pg;
struct pgstore;

/* The blocking calls, each with its gate. */
enum fake_pg_call {
    FAKE_PG_CONNECT, /* pgstore_connect */
    FAKE_PG_GET,     /* pgstore_get */
    FAKE_PG_LIST,    /* pgstore_list */
    FAKE_PG_REVOKE,  /* pgstore_revoke */
    FAKE_PG_STATS,   /* pgstore_stats */
    FAKE_PG_COLLECT, /* pgstore_collect */
    FAKE_PG_NCALLS,
};

/* Creates an empty database whose clock reads 1000 s. changed(arg) is
 * called, from whichever thread, after each change a test may wait for
 * (a blocking call entering, waiting at its gate, returning), with the
 * fake's lock held: it must not call the fake (uv_async_send is what it
 * is for). Returns NULL when out of memory. */
struct fake_pg *fake_pg_create(int64_t ttl_ns, void (*changed)(void *arg),
                               void *arg);

/* Frees the fake and any connection not closed. Accepts NULL. */
void fake_pg_destroy(struct fake_pg *f);

/* A new connection (connected), number fake_pg_conns() - 1, for
 * mode_shared_create (which takes it and closes it). NULL when out of
 * memory or FAKE_PG_MAX_CONNS are made. */
struct pgstore *fake_pg_open(struct fake_pg *f);
size_t fake_pg_conns(struct fake_pg *f);
/* Connections pgstore_close() closed. */
size_t fake_pg_closed(struct fake_pg *f);

/* The database's clock (ns since the epoch), by which it decides. */
void fake_pg_set_now(struct fake_pg *f, int64_t now_ns);

/* --- The pipeline -------------------------------------------------- */

/* While hold is true, a batch that reaches the database waits for
 * fake_pg_answer(); false answers those waiting (each connection's in
 * order) and the later ones at once. */
void fake_pg_hold_batches(struct fake_pg *f, bool hold);
/* Decides and commits (or fails, see below) the n oldest batches
 * waiting on connection conn, in order; returns how many there were. */
size_t fake_pg_answer(struct fake_pg *f, size_t conn, size_t n);
/* Batches on conn that reached the database and wait for an answer. */
size_t fake_pg_waiting(struct fake_pg *f, size_t conn);
/* Batches on conn sent and not yet given back by pgstore_done. */
size_t fake_pg_in_flight(struct fake_pg *f, size_t conn);
/* The sizes of the batches sent on conn, oldest first: copies up to max
 * into sizes and returns how many there were. */
size_t fake_pg_sent(struct fake_pg *f, size_t conn, size_t *sizes,
                    size_t max);
/* The next n batches answered on conn fail (STORE_EFAIL, nothing
 * applied). */
void fake_pg_fail_batches(struct fake_pg *f, size_t conn, unsigned n);
/* Connection conn breaks: its socket turns readable, and its calls
 * return STORE_EDOWN until it is connected again; its batches not
 * answered are dropped, never committed. */
void fake_pg_break(struct fake_pg *f, size_t conn);
/* While full, pgstore_flush() on conn returns 1, its socket is not
 * writable, and what was sent waits to reach the database. */
void fake_pg_set_full(struct fake_pg *f, size_t conn, bool full);
/* Whether conn is connected, as far as the fake knows. */
bool fake_pg_connected(struct fake_pg *f, size_t conn);
/* Whether the loop has used conn since its last blocking call returned
 * (the job has ended on the loop). */
bool fake_pg_on_loop(struct fake_pg *f, size_t conn);

/* --- The blocking calls ----------------------------------------------- */

/* Calls of kind c wait at their gate from now on. */
void fake_pg_hold(struct fake_pg *f, enum fake_pg_call c);
/* Lets one call of kind c go past its gate: one waiting, or the next. */
void fake_pg_step(struct fake_pg *f, enum fake_pg_call c);
/* Lets every call of kind c go, and holds none any more. */
void fake_pg_release(struct fake_pg *f, enum fake_pg_call c);
/* The next n calls of kind c (0: every one, until called again with
 * STORE_OK) end with err, decided when they pass their gate; nothing
 * is applied. */
void fake_pg_fail(struct fake_pg *f, enum fake_pg_call c, int err,
                  unsigned n);
/* Calls of kind c that entered, wait at the gate now, returned. */
unsigned fake_pg_entered(struct fake_pg *f, enum fake_pg_call c);
unsigned fake_pg_waiting_calls(struct fake_pg *f, enum fake_pg_call c);
unsigned fake_pg_returned(struct fake_pg *f, enum fake_pg_call c);

/* --- What was committed ----------------------------------------------- */

/* One call decided in a committed transaction. */
struct fake_pg_decision {
    enum rules_op op;
    char session[64], owner[64]; /* cut at 63 bytes */
    uint64_t token;              /* presented */
    int code;                    /* enum rules_code */
    uint64_t granted;            /* RULES_OK: the lease's token */
    int64_t expiry_ns;           /* RULES_OK: its expiry */
    unsigned flags;              /* enum rules_flag */
    uint64_t commit;             /* numbered from 1 */
    size_t conn;
};

/* The committed decisions of session, oldest first: copies up to max
 * into d and returns how many there were. */
size_t fake_pg_decisions(struct fake_pg *f, const char *session,
                         struct fake_pg_decision *d, size_t max);

/* Whether a committed decision of op on session, for owner and token,
 * with code (and when RULES_OK, granted and expiry_ns) was made and not
 * yet claimed: if so it is claimed, so that each reply stands on a
 * decision of its own. */
bool fake_pg_claim(struct fake_pg *f, enum rules_op op, const char *session,
                   const char *owner, uint64_t token, int code,
                   uint64_t granted, int64_t expiry_ns);

/* Committed transactions (batches and revokes). */
uint64_t fake_pg_commits(struct fake_pg *f);

/* Connection conn's history, one letter each, oldest first: B a batch
 * committed, F a batch failed, N a connect that worked, n one that
 * failed, G/L/R/S/C a Get, List, Revoke, Stats, collection that worked,
 * x a blocking call that failed, | a disconnect. */
void fake_pg_history(struct fake_pg *f, size_t conn, char *out,
                     size_t len);

/* Gates that timed out, and breaches of postgres.h's rules of use (the
 * first one's description in why, when not NULL): both must stay 0. */
unsigned fake_pg_timeouts(struct fake_pg *f);
unsigned fake_pg_misuses(struct fake_pg *f, char *why, size_t len);

#endif
