/*
 * The checked state machine (see sm.h for the contract and invariants).
 *
 * Each check is an assert(); before it fails, report() names the states
 * on stderr, since assert()'s own line would show only an expression.
 * With NDEBUG both go, and sm_move() is the store alone.
 */
#include "sm.h"

#include <assert.h>
#include <stdatomic.h>
#include <stdio.h>

#ifndef NDEBUG
/* The name of state, or a placeholder when it is no state of the table
 * (read only for states that passed the range check). */
static const char *name_of(const struct sm *sm, int state)
{
    if (state < 0 || state >= SM_STATES_MAX || sm->conf[state].name == NULL)
        return "(no state)";
    return sm->conf[state].name;
}

/* Says why the assert() that follows will fail. */
static void report(const struct sm *sm, const char *what, int from, int to)
{
    fprintf(stderr, "sm: %s: %s -> %s\n", what,
            from < 0 ? "(start)" : name_of(sm, from), name_of(sm, to));
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
    bool holds = sm->invariant == NULL || sm->invariant(sm, prev);
    if (!holds)
        report(sm, "invariant fails after", prev, state);
    assert(holds);
}
#endif

void sm_init(struct sm *sm, const struct sm_conf *conf,
             bool (*invariant)(const struct sm *sm, int prev), int state)
{
    sm->conf = conf;
    sm->invariant = invariant;
    atomic_init(&sm->state, state);
#ifndef NDEBUG
    bool ok = is_state(sm, state) && (conf[state].flags & SM_INITIAL);
    if (!ok)
        report(sm, "not an initial state", -1, state);
    assert(ok);
    check_invariant(sm, -1, state);
#endif
}

void sm_move(struct sm *sm, int next)
{
#ifndef NDEBUG
    int prev = atomic_load(&sm->state);
    bool ok = next >= 0 && next < SM_STATES_MAX &&
              (sm->conf[prev].allowed & SM_TO(next)) && is_state(sm, next);
    if (!ok)
        report(sm, "no such move", prev, next);
    assert(ok);
#endif
    atomic_store(&sm->state, next);
#ifndef NDEBUG
    check_invariant(sm, prev, next);
#endif
}

int sm_state(const struct sm *sm)
{
    return atomic_load(&sm->state);
}

const char *sm_name(const struct sm *sm)
{
    return sm->conf[sm_state(sm)].name;
}
