/*
 * The lease engine: leased's lease semantics as a pure state machine.
 *
 * It keeps every known lease in memory, decides Acquire, Renew and Release
 * at the time the caller passes in (by the rules of rules.h, which every
 * backend shares), and returns each change it makes as data (struct
 * engine_change) for a storage engine to persist. It does no I/O, reads
 * no clock, takes no lock and logs nothing: one thread owns an engine (the
 * daemon's libuv loop, or a liblease in-memory backend under its mutex).
 *
 * Invariants (numbers match docs/protocol.md, "Guarantees"):
 *  (1) a live lease has at most one owner: Acquire by another owner fails
 *      while the lease is live or quarantined;
 *  (2) a takeover sets token = previous token + 1 (floor + 1 for a session
 *      with no entry); renewals and same-owner re-acquires keep it;
 *  (3) tokens never go down: the floor is the highest token of every entry
 *      ever collected, and only rises;
 *  (5) Release changes an entry only when owner and token match; Revoke,
 *      an operator's, whoever the owner.
 *
 * Changes are tentative until engine_finish(): committed, or undone (in
 * the reverse order of their making) when storage failed. Between making
 * a change and finishing it the caller must make no change that collects
 * (engine_collect) an entry an earlier unfinished change points to; the
 * daemon collects only at the start of a batch.
 *
 * Time is nanoseconds since the Unix epoch on the engine's own clock
 * (wall time at start plus monotonic time elapsed; see daemon/clock.h).
 */
#ifndef LEASED_ENGINE_H
#define LEASED_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rules.h"
#include "siphash.h"

#define ENGINE_SESSION_MAX 512 /* bytes, docs/protocol.md */
#define ENGINE_OWNER_MAX 256

/* A lease as stored. Strings are borrowed and not NUL-terminated; an
 * owner_len of 0 means released. */
struct lease_row {
    const char *session;
    size_t session_len;
    const char *owner;
    size_t owner_len;
    uint64_t token;
    int64_t expiry_ns;
};

enum engine_change_kind {
    ENGINE_PUT,    /* insert or update the row `after` */
    ENGINE_DELETE, /* delete the row `before` (garbage collection) */
};

/* One change to persist. A storage engine applies it only if the stored
 * row is still `before` (or absent when !has_before). Strings stay valid
 * until engine_finish() of this change. */
struct engine_change {
    enum engine_change_kind kind;
    bool durable;    /* ownership changed: fsync before answering */
    bool has_before; /* false: the row must not exist yet */
    struct lease_row before;
    struct lease_row after; /* ENGINE_PUT only */

    /* The lease's expiry had been told (engine_expiries) and not extended
     * since: this change is its holder's reclaim, or a takeover of a lease
     * already told as expired. */
    bool was_told;
    /* Private to the engine. */
    struct engine_entry *entry;
    char *old_owner;
    bool old_held_at_start;
};

/* What a successful Acquire or Renew grants. */
struct engine_grant {
    uint64_t token;
    int64_t expiry_ns;
};

/* What a call on the engine came to: the code rules_decide() said (the
 * same numbers, so one casts to the other), or out of memory. Nothing
 * changed unless ENGINE_OK. */
enum engine_result {
    ENGINE_ENOMEM = -1,
    ENGINE_OK = RULES_OK,
    ENGINE_HELD = RULES_HELD, /* Acquire: another owner holds it, live */
    ENGINE_LOST = RULES_LOST, /* Renew, Revoke: owner or token differ */
    ENGINE_NOOP = RULES_NOOP, /* Release, Revoke: nothing to free */
};

struct engine;

/* Creates an empty engine. ttl_ns: the lease lifetime (> 0). start_ns:
 * the engine's clock at start; leases loaded with engine_load() cannot be
 * taken by another owner before start_ns + ttl_ns (restart quarantine).
 * hash_key (copied) keys the session table's hash: a random one
 * (siphash_random_key) keeps clients from choosing session ids that
 * collide; tests pass a fixed one. Returns NULL when out of memory. */
struct engine *engine_create(int64_t ttl_ns, int64_t start_ns,
                             const struct siphash_key *hash_key);

/* Frees the engine and every entry. All changes must be finished.
 * Accepts NULL. */
void engine_destroy(struct engine *e);

/* Adds a stored row at start-up, before any other call. A row with an
 * owner is quarantined (see engine_create). Strings are copied.
 * Returns ENGINE_OK or ENGINE_ENOMEM. */
enum engine_result engine_load(struct engine *e, const struct lease_row *row);

/* Makes the restart quarantine last at least until end_ns (never
 * shortens it): after a restart with a shorter TTL, leases granted under
 * the longer one need its length. */
void engine_extend_quarantine(struct engine *e, int64_t end_ns);
int64_t engine_quarantine_end(const struct engine *e);

/* The token floor: every session without an entry gets floor + 1 on its
 * first takeover. engine_raise_floor never lowers it. */
void engine_raise_floor(struct engine *e, uint64_t floor);
uint64_t engine_floor(const struct engine *e);

/* Number of entries (held, expired or released) in memory. */
size_t engine_count(const struct engine *e);

/* Acquire(session, owner) at now_ns. Strings are borrowed for the call.
 * ENGINE_OK: *grant and *chg are set (a change is always made).
 * ENGINE_HELD: another owner holds a live lease; nothing changed.
 * ENGINE_ENOMEM: nothing changed. */
enum engine_result engine_acquire(struct engine *e, int64_t now_ns,
                                  const char *session, size_t session_len,
                                  const char *owner, size_t owner_len,
                                  struct engine_grant *grant,
                                  struct engine_change *chg);

/* Renew(session, owner, token) at now_ns. ENGINE_OK: same token, expiry
 * now + TTL (and strictly later than before), *grant and *chg set; this
 * also reclaims an expired lease nobody took over. ENGINE_LOST: owner or
 * token no longer match; nothing changed. */
enum engine_result engine_renew(struct engine *e, int64_t now_ns,
                                const char *session, size_t session_len,
                                const char *owner, size_t owner_len,
                                uint64_t token, struct engine_grant *grant,
                                struct engine_change *chg);

/* Release(session, owner, token). ENGINE_OK: freed, *chg set.
 * ENGINE_NOOP: owner or token did not match, nothing changed. */
enum engine_result engine_release(struct engine *e, const char *session,
                                  size_t session_len, const char *owner,
                                  size_t owner_len, uint64_t token,
                                  struct engine_change *chg);

/* Revoke(session[, token]): an operator ends the lease of whoever holds
 * it (token 0), or only while its token is token. ENGINE_OK: freed as by
 * a Release, *chg set (chg->before is the lease that ended).
 * ENGINE_NOOP: nobody holds it. ENGINE_LOST: its token is another. */
enum engine_result engine_revoke(struct engine *e, const char *session,
                                 size_t session_len, uint64_t token,
                                 struct engine_change *chg);

/* Garbage collection: removes up to max entries that are released, or
 * expired for longer than a TTL, and fills chgs[] with ENGINE_DELETE
 * changes; the floor rises to their tokens. Collects nothing before the
 * quarantine ends. Looks at no more than 16 * max hash buckets per call,
 * resuming where the last call stopped: call it periodically.
 * Returns the number of changes made. */
size_t engine_collect(struct engine *e, int64_t now_ns,
                      struct engine_change *chgs, size_t max);

/* Counts live leases (held, and not expired or still quarantined) a slice
 * at a time: looks at up to max hash buckets, resuming where the last call
 * stopped. When a call completes a pass over the table it sets *live to
 * that pass's count and returns true. */
bool engine_census(struct engine *e, int64_t now_ns, size_t max,
                   size_t *live);

/* Expiries, for a caller that tells of them (leased's Watch): held
 * leases that are no longer live at now_ns (expired, and past the
 * restart quarantine) and not told yet. Looks at 1/parts of the hash
 * table, resuming where the last call stopped, and fills out[] with up
 * to max of them (strings borrowed until the entry next changes), each
 * marked told. An entry is told until a change extends or ends its lease
 * (a reclaim or a takeover: its change's was_told says it was), and a
 * caller that could not record one tells it again with engine_set_told. */
size_t engine_expiries(struct engine *e, int64_t now_ns, size_t parts,
                       struct lease_row *out, size_t max);
bool engine_told(const struct engine *e, const char *session,
                 size_t session_len);
/* Sets whether the session's expiry was told, if it is held with token
 * (at start: what the stored events say). */
void engine_set_told(struct engine *e, const char *session, size_t session_len,
                     uint64_t token, bool told);
/* The live leases at now_ns, counted over the whole table in one go
 * (O(entries)); engine_census's pass under way is left as it is. */
size_t engine_count_live(const struct engine *e, int64_t now_ns);

/* Finishes a change: committed, its leftovers are freed; otherwise it is
 * undone. Undo changes in the reverse order of their making. */
void engine_finish(struct engine *e, struct engine_change *chg,
                   bool committed);

/* Stamps: a caller that makes changes durable later than it commits them
 * (the daemon commits, then syncs) numbers its commits and stamps each
 * change of ownership, and each collection, with the number of the commit
 * that carries it. An answer decided from an entry depends on its last
 * stamped change, and one decided from the absence of an entry on the
 * last collection: it may go out only once that commit is durable (a
 * collected row that comes back after a power loss would undo a refusal
 * or a no-op release answered meanwhile).
 * engine_stamp() stamps chg (not yet finished); engine_stamp_of() reads
 * a session's stamp: its entry's, or the last collection's (0: none). */
void engine_stamp(struct engine *e, struct engine_change *chg,
                  uint64_t stamp);
uint64_t engine_stamp_of(const struct engine *e, const char *session,
                         size_t session_len);

/* The session's hash in e's table: keyed, the same for e's lifetime. */
uint64_t engine_hash(const struct engine *e, const char *session,
                     size_t session_len);

/* Looks up a session; fills *row (strings borrowed until the next call
 * that changes the engine). Returns false when there is no entry. */
bool engine_get(const struct engine *e, const char *session,
                size_t session_len, struct lease_row *row);

/* Whether session has a live lease at now_ns (held, and not expired or
 * still quarantined). */
bool engine_live(const struct engine *e, const char *session,
                 size_t session_len, int64_t now_ns);

/* The token high-water mark: the highest token ever committed or loaded,
 * or the floor if that is higher. */
uint64_t engine_high_water(const struct engine *e);

/* Checks e's invariants (listed at engine_check() in engine.c): the hash
 * table's structure and every entry's fields, which hold at any moment,
 * even with changes unfinished; and when none is unfinished, what holds
 * only between batches (no token above the high-water mark). Walks every
 * bucket and hashes every session: O(buckets + entries), for tests and
 * debug builds. On a violation it names the invariant on stderr and
 * aborts, with or without NDEBUG (a caller that asks for the check wants
 * it); it returns only if all hold. */
void engine_check(const struct engine *e);

/* engine_check(), and also that no change is unfinished: for the end of a
 * batch, once every change of it was committed or undone (the daemon's
 * batches end when their commit finishes them). Aborts as engine_check()
 * does. */
void engine_check_settled(const struct engine *e);

#endif
