/*
 * What the tests of the modes (test_mode_embedded.c over fake_store.h,
 * test_mode_shared.c over fake_pg.h) share: the loop a case runs until
 * what it waits for holds (and the metrics a mode counts into), and the
 * lease requests it submits.
 *
 * The mode runs on a real libuv loop. Its fake's threads may touch no
 * more of the loop than an async handle: mode_loop_wake, the fake's
 * changed hook, sends it, so that the loop looks again at what the case
 * waits for. A deadline bounds every wait, so that a case that waits in
 * vain fails instead of hanging.
 *
 * A header alone, as check.h is: MODE_RUN_UNTIL fails the case through
 * check.h's flag, which is each test file's own.
 */
#ifndef LEASED_MODE_HARNESS_H
#define LEASED_MODE_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "check.h"
#include "metrics.h"
#include "mode.h"
#include "request.h"

/* How long a case waits for what should take milliseconds, under TSan
 * too; a broken copy, which is expected to wait in vain, is run with a
 * shorter bound in the environment (MODE_WAIT_MS, tests/meson.build). */
static uint64_t mode_wait_ms(void)
{
    const char *env = getenv("MODE_WAIT_MS");
    return env != NULL && atoi(env) > 0 ? (uint64_t)atoi(env) : 20000;
}

struct mode_loop {
    uv_loop_t loop;
    uv_async_t wake;     /* the fake's changes wake the loop up */
    uv_timer_t deadline; /* bounds every wait */
    bool late;           /* the deadline passed */
};

static void mode_loop_on_wake(uv_async_t *a)
{
}

static void mode_loop_on_late(uv_timer_t *t)
{
    struct mode_loop *ml = t->data;
    ml->late = true;
}

/* Makes the loop; and, the first time, the metrics that every mode
 * counts into (once a process). */
static void mode_loop_init(struct mode_loop *ml)
{
    static bool metrics_ready;
    if (!metrics_ready) {
        metrics_init();
        metrics_ready = true;
    }
    CHECK_EQ_I64(uv_loop_init(&ml->loop), 0);
    uv_async_init(&ml->loop, &ml->wake, mode_loop_on_wake);
    uv_timer_init(&ml->loop, &ml->deadline);
    ml->deadline.data = ml;
}

/* Closes the loop (the mode over it closed first). */
static void mode_loop_close(struct mode_loop *ml)
{
    uv_close((uv_handle_t *)&ml->wake, NULL);
    uv_close((uv_handle_t *)&ml->deadline, NULL);
    uv_run(&ml->loop, UV_RUN_DEFAULT);
    CHECK_EQ_I64(uv_loop_close(&ml->loop), 0);
}

/* The fake's changed hook, arg the struct mode_loop: from any thread. */
static void mode_loop_wake(void *arg)
{
    struct mode_loop *ml = arg;
    uv_async_send(&ml->wake);
}

/* Sets ml->late once ms have passed from now. */
static void mode_loop_arm(struct mode_loop *ml, uint64_t ms)
{
    ml->late = false;
    uv_update_time(&ml->loop);
    uv_timer_start(&ml->deadline, mode_loop_on_late, ms, 0);
}

/* Fails the case: what it waited for at file:line did not come. */
static void mode_waited_in_vain(const char *file, int line, const char *what)
{
    fprintf(stderr, "%s:%d: waited in vain for %s\n", file, line, what);
    check_failed_ = 1;
}

/* Runs ml's loop until cond holds, for mode_wait_ms() at most (then fails
 * the case). */
#define MODE_RUN_UNTIL(ml, cond)                                           \
    do {                                                                   \
        mode_loop_arm((ml), mode_wait_ms());                               \
        while (!(cond) && !(ml)->late)                                     \
            uv_run(&(ml)->loop, UV_RUN_ONCE);                              \
        uv_timer_stop(&(ml)->deadline);                                    \
        if (!(cond))                                                       \
            mode_waited_in_vain(__FILE__, __LINE__, #cond);                \
    } while (0)

/* Hands rs[0..n) to m as the front end does: each arrives
 * (mode_arrive()), in order; reply(arg, r) gets those decided at once,
 * and the others go to mode_submit() as one list, in the same order. */
static void mode_harness_submit(struct mode *m, struct request *const *rs,
                                size_t n,
                                void (*reply)(void *, struct request *),
                                void *arg)
{
    struct request *head = NULL, **tail = &head;
    for (size_t i = 0; i < n; i++) {
        if (mode_arrive(m, rs[i])) {
            reply(arg, rs[i]);
            continue;
        }
        *tail = rs[i];
        tail = &rs[i]->next;
    }
    *tail = NULL;
    if (head != NULL)
        mode_submit(m, head);
}

static void lease_req(struct request *r, enum request_op op,
                      const char *session, const char *owner, uint64_t token)
{
    memset(r, 0, sizeof(*r));
    r->op = op;
    r->session = session;
    r->session_len = strlen(session);
    r->owner = owner;
    r->owner_len = strlen(owner);
    r->token = token;
}

static void acquire(struct request *r, const char *session, const char *owner)
{
    lease_req(r, OP_ACQUIRE, session, owner, 0);
}

#endif
