/*
 * The checked state machine (core/sm.h) over a small machine of its own,
 * a door: allowed moves go through and run the invariant; a move the
 * table does not have, a start in a state that is not initial and a move
 * out of a final state abort the process in every build, a failing
 * invariant in debug builds (each in a forked child). With NDEBUG the
 * invariants are compiled out, and those children live on: then that is
 * what the cases check.
 */
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "check_child.h"
#include "sm.h"

/*
 *   CLOSED <--> OPEN
 *     |  ^
 *     v  |
 *    LOCKED --> BROKEN (final)
 */
enum { CLOSED, OPEN, LOCKED, BROKEN, NSTATES };

static const struct sm_conf door_states[NSTATES] = {
    [CLOSED] = {"CLOSED", SM_INITIAL, SM_TO(OPEN) | SM_TO(LOCKED)},
    [OPEN] = {"OPEN", 0, SM_TO(CLOSED)},
    [LOCKED] = {"LOCKED", SM_INITIAL, SM_TO(CLOSED) | SM_TO(BROKEN)},
    [BROKEN] = {"BROKEN", SM_FINAL, 0},
};

struct door {
    struct sm sm;
    bool key_in;      /* LOCKED needs it; OPEN must not have it */
    int checks;       /* the invariant's calls */
    int last_prev;    /* its last prev argument */
};

static bool door_invariant(const struct sm *sm, int prev)
{
    struct door *d = container_of(sm, struct door, sm);
    d->checks++;
    d->last_prev = prev;
    switch (sm_state(sm)) {
    case LOCKED:
        return d->key_in;
    case OPEN:
        return !d->key_in;
    default:
        return true;
    }
}

static bool checks_on(void)
{
#ifdef NDEBUG
    return false;
#else
    return true;
#endif
}

TEST(allowed_moves_go_through_and_run_the_invariant)
{
    struct door d = {.key_in = false};
    sm_init(&d.sm, door_states, door_invariant, CLOSED);
    CHECK_EQ_I64(sm_state(&d.sm), CLOSED);
    CHECK_STR(sm_name(&d.sm), "CLOSED");
    CHECK_EQ_I64(d.checks, checks_on() ? 1 : 0);
    CHECK_EQ_I64(d.last_prev, checks_on() ? -1 : 0);

    sm_move(&d.sm, OPEN);
    CHECK_EQ_I64(sm_state(&d.sm), OPEN);
    CHECK_STR(sm_name(&d.sm), "OPEN");
    sm_move(&d.sm, CLOSED);
    d.key_in = true;
    sm_move(&d.sm, LOCKED);
    CHECK_STR(sm_name(&d.sm), "LOCKED");
    CHECK_EQ_I64(d.last_prev, checks_on() ? CLOSED : 0);
    sm_move(&d.sm, BROKEN);
    CHECK_STR(sm_name(&d.sm), "BROKEN");
    CHECK_EQ_I64(d.checks, checks_on() ? 5 : 0);
}

TEST(no_invariant_is_fine)
{
    struct sm sm;
    sm_init(&sm, door_states, NULL, LOCKED); /* another initial state */
    sm_move(&sm, CLOSED);
    sm_move(&sm, OPEN);
    CHECK_EQ_I64(sm_state(&sm), OPEN);
}

/* The child must die of SIGABRT when the check is on (always, or only in
 * debug builds); without it, it lives. */
static void check_aborts(void (*fn)(void), bool always)
{
    int status = check_in_child(fn);
    if (always || checks_on())
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
    else
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void open_a_locked_door(void)
{
    struct door d = {.key_in = true};
    sm_init(&d.sm, door_states, door_invariant, LOCKED);
    sm_move(&d.sm, OPEN); /* LOCKED has no edge to OPEN */
}

static void move_out_of_range(void)
{
    struct sm sm;
    sm_init(&sm, door_states, NULL, CLOSED);
    sm_move(&sm, SM_STATES_MAX);
}

TEST(a_move_the_table_lacks_aborts)
{
    check_aborts(open_a_locked_door, true);
    check_aborts(move_out_of_range, true);
}

static void lock_without_the_key(void)
{
    struct door d = {.key_in = false};
    sm_init(&d.sm, door_states, door_invariant, CLOSED);
    sm_move(&d.sm, LOCKED); /* an edge, but the invariant fails */
}

static void start_locked_without_the_key(void)
{
    struct door d = {.key_in = false};
    sm_init(&d.sm, door_states, door_invariant, LOCKED);
}

TEST(a_failing_invariant_aborts)
{
    check_aborts(lock_without_the_key, false);
    check_aborts(start_locked_without_the_key, false);
}

static void start_open(void)
{
    struct sm sm;
    sm_init(&sm, door_states, NULL, OPEN); /* not SM_INITIAL */
}

static void leave_broken(void)
{
    struct sm sm;
    sm_init(&sm, door_states, NULL, LOCKED);
    sm_move(&sm, BROKEN);
    sm_move(&sm, CLOSED);
}

TEST(a_start_that_is_not_initial_or_a_move_out_of_a_final_state_aborts)
{
    check_aborts(start_open, true);
    check_aborts(leave_broken, true);
}

CHECK_MAIN(allowed_moves_go_through_and_run_the_invariant,
           no_invariant_is_fine, a_move_the_table_lacks_aborts,
           a_failing_invariant_aborts,
           a_start_that_is_not_initial_or_a_move_out_of_a_final_state_aborts)
