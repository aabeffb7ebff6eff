/* The fakes' gates: see fake_gate.h. */
#include "fake_gate.h"

#include <errno.h>
#include <time.h>

void fake_gate_init(struct fake_gates *g, int wait_ms,
                    void (*changed)(void *arg), void *arg)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&g->mu, NULL);
    g->changed = changed;
    g->changed_arg = arg;
    g->wait_ms = wait_ms;
}

void fake_gate_destroy(struct fake_gates *g)
{
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
}

void fake_gate_notify(struct fake_gates *g)
{
    if (g->changed != NULL)
        g->changed(g->changed_arg);
}

int fake_gate_enter(struct fake_gates *g, int k)
{
    struct fake_gate *t = &g->gate[k];
    t->entered++;
    fake_gate_notify(g);
    if (t->hold && t->pass == 0) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += g->wait_ms / 1000;
        until.tv_nsec += (long)(g->wait_ms % 1000) * 1000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        t->waiting++;
        fake_gate_notify(g);
        while (t->hold && t->pass == 0) {
            if (pthread_cond_timedwait(&g->cv, &g->mu, &until) == ETIMEDOUT) {
                g->timeouts++;
                break;
            }
        }
        t->waiting--;
    }
    if (t->hold && t->pass > 0)
        t->pass--;
    int err = t->fail;
    if (err != 0 && t->fail_left > 0 && --t->fail_left == 0)
        t->fail = 0;
    return err;
}

void fake_gate_leave(struct fake_gates *g, int k)
{
    g->gate[k].returned++;
    fake_gate_notify(g);
}

void fake_gate_hold(struct fake_gates *g, int k)
{
    pthread_mutex_lock(&g->mu);
    g->gate[k].hold = true;
    g->gate[k].pass = 0;
    pthread_mutex_unlock(&g->mu);
}

void fake_gate_step(struct fake_gates *g, int k)
{
    pthread_mutex_lock(&g->mu);
    g->gate[k].pass++;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void fake_gate_release(struct fake_gates *g, int k)
{
    pthread_mutex_lock(&g->mu);
    g->gate[k].hold = false;
    g->gate[k].pass = 0;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void fake_gate_fail(struct fake_gates *g, int k, int err, unsigned n)
{
    pthread_mutex_lock(&g->mu);
    g->gate[k].fail = err;
    g->gate[k].fail_left = n;
    pthread_mutex_unlock(&g->mu);
}

unsigned fake_gate_read(struct fake_gates *g, const unsigned *counter)
{
    pthread_mutex_lock(&g->mu);
    unsigned n = *counter;
    pthread_mutex_unlock(&g->mu);
    return n;
}
