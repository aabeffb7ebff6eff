/*
 * The checked state machine (see sm.h for the contract and invariants).
 *
 * A move the table lacks is a bug that would otherwise go on silently
 * (an answer sent twice, a call freed while the loop holds it): it aborts
 * in every build, after report() names the states on stderr. The
 * invariant callbacks, which may walk the owner's fields, are assert()s:
 * with NDEBUG they go.
 */
#include "sm.h"

#include <assert.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* The name of state, or a placeholder when it is no state of the table. */
static const char *name_of(const struct sm *sm, int state)
{
    if (state < 0 || state >= SM_STATES_MAX || sm->conf[state].name == NULL)
        return "(no state)";
    return sm->conf[state].name;
}

/* Names the states on stderr, then aborts. */
static _Noreturn void fail(const struct sm *sm, const char *what, int from,
                           int to)
{
    fprintf(stderr, "sm: %s: %s -> %s\n", what,
            from < 0 ? "(start)" : name_of(sm, from), name_of(sm, to));
    abort();
}

/* Whether a machine may enter state: in range, named, and a final state
 * has no way out. */
static bool is_state(const struct sm *sm, int state)
{
    if (state < 0 || state >= SM_STATES_MAX)
        return false;
    const struct sm_conf *c = &sm->conf[state];
    return c->name != NULL && (!(c->flags & SM_FINAL) || c->allowed == 0);
}

static void check_invariant(const struct sm *sm, int prev, int state)
{
#ifndef NDEBUG
    if (sm->invariant != NULL && !sm->invariant(sm, prev))
        fail(sm, "invariant fails after", prev, state);
#else
    (void)sm, (void)prev, (void)state;
#endif
}

void sm_init(struct sm *sm, const struct sm_conf *conf,
             bool (*invariant)(const struct sm *sm, int prev), int state)
{
    sm->conf = conf;
    sm->invariant = invariant;
    atomic_init(&sm->state, state);
    if (!is_state(sm, state) || !(conf[state].flags & SM_INITIAL))
        fail(sm, "not an initial state", -1, state);
    check_invariant(sm, -1, state);
}

void sm_move(struct sm *sm, int next)
{
    int prev = atomic_load(&sm->state);
    if (next < 0 || next >= SM_STATES_MAX ||
        !(sm->conf[prev].allowed & SM_TO(next)) || !is_state(sm, next))
        fail(sm, "no such move", prev, next);
    atomic_store(&sm->state, next);
    check_invariant(sm, prev, next);
}

int sm_state(const struct sm *sm)
{
    return atomic_load(&sm->state);
}

const char *sm_name(const struct sm *sm)
{
    return sm->conf[sm_state(sm)].name;
}
