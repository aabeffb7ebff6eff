/*
 * A checked state machine: the one helper every stateful thing of leased
 * moves through (a gRPC call in the front end, a health call), after
 * dqlite's src/lib/sm.h.
 *
 * A machine is a table with one struct sm_conf per state: its name for
 * logs, its flags, and the states it may move to. An object embeds a
 * struct sm and changes state only through sm_move(), which checks that
 * the table has the move, and then calls the object's invariant: the
 * owner's own check of its fields in the state just entered.
 *
 * What it is not: no event dispatch, no entry or exit actions, no
 * history. The caller still decides what to do and when; the table only
 * says what may follow what, in one place a reader can check against the
 * file's header comment.
 *
 * A move the table lacks, or a start in a state not flagged initial,
 * names both states on stderr and aborts, in every build: a bit test per
 * move. The invariant callbacks run in debug builds (buildtype debug and
 * debugoptimized, the default) and are compiled out with NDEBUG (release
 * builds: b_ndebug=if-release); a failed one aborts the same way.
 *
 * Invariants:
 *  (1) the state is always one whose table entry has a name;
 *  (2) a machine starts in a state flagged SM_INITIAL;
 *  (3) it moves only along the table's edges; a state flagged SM_FINAL
 *      has none, so nothing moves out of it;
 *  (4) after sm_init() and after every sm_move(), the invariant callback
 *      (if any) holds.
 *
 * Threads: the state is an atomic, read and written with sequentially
 * consistent operations, so that an object handed from one thread to
 * another (the front end's rpc goes from the completion-queue thread to
 * the loop and back) publishes what its thread wrote before the move to
 * the thread that moves it next. The machine is still used by one thread
 * at a time: the caller hands it over, the helper does not lock.
 */
#ifndef LEASED_SM_H
#define LEASED_SM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The object of type `type` whose member `member` p points to: an
 * invariant's owner from its struct sm, an rpc from its gRPC tag. */
#define container_of(p, type, member) \
    ((type *)((char *)(p) - offsetof(type, member)))

/* The states of a machine are 0 .. SM_STATES_MAX - 1 (the bits of
 * struct sm_conf's `allowed`). */
#define SM_STATES_MAX 64

/* The bit of `allowed` that lets a state move to `state`. */
#define SM_TO(state) (UINT64_C(1) << (state))

/* Flags of a state. */
enum {
    SM_INITIAL = 1u << 0, /* a machine may start here (sm_init) */
    SM_FINAL = 1u << 1,   /* the end: `allowed` must be 0 */
};

/* One state of a machine's table; tables are static and const. */
struct sm_conf {
    const char *name; /* for logs; every state of the table has one */
    uint32_t flags;   /* SM_INITIAL, SM_FINAL */
    uint64_t allowed; /* SM_TO(next) | ...: the moves out of this state */
};

/* Caller-owned, usually embedded in the object whose state it is. Read
 * it only through sm_state() and sm_name(). */
struct sm {
    _Atomic int state;
    const struct sm_conf *conf; /* borrowed: the machine's table */
    /* The owner's check of its fields in the state just entered (prev:
     * the state it came from, or -1 at sm_init); NULL: none. */
    bool (*invariant)(const struct sm *sm, int prev);
};

/* Starts sm in state, which conf flags SM_INITIAL, and checks the
 * invariant. conf (a table indexed by state) is borrowed and must outlive
 * sm; invariant may be NULL. Aborts on a state that is not initial
 * (every build) or an invariant that fails (debug builds). */
void sm_init(struct sm *sm, const struct sm_conf *conf,
             bool (*invariant)(const struct sm *sm, int prev), int state);

/* Moves sm to next, then checks the invariant. Aborts when the table has
 * no such move (next out of range, or the current state's `allowed` lacks
 * it), in every build; debug builds also when the invariant fails for
 * next. */
void sm_move(struct sm *sm, int next);

/* The current state. */
int sm_state(const struct sm *sm);

/* The current state's name, from the table (static: never freed). */
const char *sm_name(const struct sm *sm);

#endif
