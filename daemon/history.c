/*
 * The last changes of leases (see history.h): a ring of pointers to
 * events, each one allocation with its strings after it. Revisions
 * follow each other, so the event of revision r is at (r - 1) % cap.
 */
#include "history.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct entry {
    struct store_event ev; /* strings point into text */
    char text[];
};

struct history {
    /* Staged events, oldest first (the writer's thread only). */
    struct entry **staged;
    uint64_t *staged_commit;
    size_t nstaged, staged_cap;

    pthread_mutex_t lock;
    struct entry **ring;
    size_t cap, n;   /* n kept, the newest at newest's slot */
    uint64_t newest; /* 0: none yet */
    size_t bytes;
    atomic_bool served;
    bool copy;                 /* history_set_copy() */
    uint64_t asked, answered; /* the copy's tickets */
    void (*wake)(void *arg);
    void *wake_arg;
};

struct history *history_create(size_t capacity)
{
    struct history *h = calloc(1, sizeof(*h));
    if (h == NULL || capacity == 0)
        goto fail;
    h->ring = calloc(capacity, sizeof(*h->ring));
    if (h->ring == NULL)
        goto fail;
    h->cap = capacity;
    pthread_mutex_init(&h->lock, NULL);
    return h;
fail:
    free(h);
    return NULL;
}

/* Frees every event kept (the lock held, or the history the caller's). */
static void drop_kept(struct history *h)
{
    for (size_t i = 0; i < h->cap; i++) {
        free(h->ring[i]);
        h->ring[i] = NULL;
    }
    h->n = 0;
    h->bytes = 0;
}

void history_destroy(struct history *h)
{
    if (h == NULL)
        return;
    for (size_t i = 0; i < h->nstaged; i++)
        free(h->staged[i]);
    free(h->staged);
    free(h->staged_commit);
    drop_kept(h);
    free(h->ring);
    pthread_mutex_destroy(&h->lock);
    free(h);
}

void history_set_served(struct history *h)
{
    atomic_store(&h->served, true);
}

bool history_served(struct history *h)
{
    return h != NULL && atomic_load(&h->served);
}

void history_set_wake(struct history *h, void (*wake)(void *arg), void *arg)
{
    h->wake = wake;
    h->wake_arg = arg;
}

static struct entry *copy(const struct store_event *ev)
{
    size_t sl = ev->lease.session_len, ol = ev->lease.owner_len;
    struct entry *e = malloc(sizeof(*e) + sl + ol + 1);
    if (e == NULL)
        return NULL;
    e->ev = *ev;
    memcpy(e->text, ev->lease.session, sl);
    if (ol > 0)
        memcpy(e->text + sl, ev->lease.owner, ol);
    e->ev.lease.session = e->text;
    e->ev.lease.owner = e->text + sl;
    return e;
}

static size_t size_of(const struct entry *e)
{
    return sizeof(*e) + e->ev.lease.session_len + e->ev.lease.owner_len + 1;
}

/* Puts made[0..n) (taken) in the ring after the newest, unless a
 * revision does not follow; then wakes the watchers. */
static int append(struct history *h, struct entry **made, size_t n)
{
    pthread_mutex_lock(&h->lock);
    uint64_t want = h->newest == 0 ? made[0]->ev.revision : h->newest + 1;
    for (size_t i = 0; i < n; i++)
        if (made[i]->ev.revision == 0 || made[i]->ev.revision != want + i) {
            pthread_mutex_unlock(&h->lock);
            for (size_t k = 0; k < n; k++)
                free(made[k]);
            return -1;
        }
    for (size_t i = 0; i < n; i++) {
        size_t slot = (size_t)((made[i]->ev.revision - 1) % h->cap);
        if (h->ring[slot] != NULL)
            h->bytes -= size_of(h->ring[slot]);
        free(h->ring[slot]);
        h->ring[slot] = made[i];
        h->bytes += size_of(made[i]);
        if (h->n < h->cap)
            h->n++;
    }
    h->newest = made[n - 1]->ev.revision;
    pthread_mutex_unlock(&h->lock);
    if (h->wake != NULL)
        h->wake(h->wake_arg);
    return 0;
}

int history_append(struct history *h, const struct store_event *evs, size_t n)
{
    if (n == 0)
        return 0;
    struct entry **made = calloc(n, sizeof(*made));
    if (made == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        made[i] = copy(&evs[i]);
        if (made[i] == NULL) {
            for (size_t k = 0; k < i; k++)
                free(made[k]);
            free(made);
            return -1;
        }
    }
    int rc = append(h, made, n);
    free(made);
    return rc;
}

int history_stage(struct history *h, const struct store_event *evs, size_t n,
                  uint64_t commit)
{
    if (h->nstaged + n > h->staged_cap) {
        size_t cap = (h->nstaged + n) * 2;
        struct entry **staged = realloc(h->staged, cap * sizeof(*staged));
        if (staged == NULL)
            return -1;
        h->staged = staged;
        uint64_t *sc = realloc(h->staged_commit, cap * sizeof(*sc));
        if (sc == NULL)
            return -1;
        h->staged_commit = sc;
        h->staged_cap = cap;
    }
    size_t i;
    for (i = 0; i < n; i++) {
        struct entry *e = copy(&evs[i]);
        if (e == NULL)
            break;
        h->staged[h->nstaged + i] = e;
        h->staged_commit[h->nstaged + i] = commit;
    }
    if (i < n) {
        while (i-- > 0)
            free(h->staged[h->nstaged + i]);
        return -1;
    }
    h->nstaged += n;
    return 0;
}

int history_publish(struct history *h, uint64_t synced)
{
    size_t n = 0;
    while (n < h->nstaged && h->staged_commit[n] <= synced)
        n++;
    if (n == 0)
        return 0;
    int rc = append(h, h->staged, n);
    h->nstaged -= n;
    memmove(h->staged, h->staged + n, h->nstaged * sizeof(*h->staged));
    memmove(h->staged_commit, h->staged_commit + n,
            h->nstaged * sizeof(*h->staged_commit));
    return rc;
}

void history_start_after(struct history *h, uint64_t revision)
{
    pthread_mutex_lock(&h->lock);
    if (h->n == 0 && h->newest < revision)
        h->newest = revision;
    pthread_mutex_unlock(&h->lock);
}

void history_restart(struct history *h, uint64_t revision)
{
    pthread_mutex_lock(&h->lock);
    drop_kept(h);
    h->newest = revision;
    pthread_mutex_unlock(&h->lock);
    if (h->wake != NULL)
        h->wake(h->wake_arg);
}

void history_set_copy(struct history *h)
{
    h->copy = true;
}

uint64_t history_ask(struct history *h)
{
    pthread_mutex_lock(&h->lock);
    uint64_t ticket = h->copy ? ++h->asked : 0;
    pthread_mutex_unlock(&h->lock);
    return ticket;
}

bool history_answered(struct history *h, uint64_t ticket)
{
    pthread_mutex_lock(&h->lock);
    bool done = h->answered >= ticket;
    pthread_mutex_unlock(&h->lock);
    return done;
}

uint64_t history_asked(struct history *h)
{
    pthread_mutex_lock(&h->lock);
    uint64_t asked = h->asked;
    pthread_mutex_unlock(&h->lock);
    return asked;
}

void history_answer(struct history *h, uint64_t ticket)
{
    pthread_mutex_lock(&h->lock);
    bool news = ticket > h->answered;
    if (news)
        h->answered = ticket;
    pthread_mutex_unlock(&h->lock);
    if (news && h->wake != NULL)
        h->wake(h->wake_arg);
}

uint64_t history_newest(struct history *h)
{
    pthread_mutex_lock(&h->lock);
    uint64_t newest = h->newest;
    pthread_mutex_unlock(&h->lock);
    return newest;
}

static bool matches(const struct history_filter *f,
                    const struct store_event *ev)
{
    const struct lease_row *l = &ev->lease;
    if (f->prefix)
        return l->session_len >= f->key_len &&
               memcmp(l->session, f->key, f->key_len) == 0;
    return l->session_len == f->key_len &&
           memcmp(l->session, f->key, f->key_len) == 0;
}

#define READ_BATCH 64 /* events passed to fn at a time, at most */

enum history_read history_read(struct history *h, uint64_t after,
                               const struct history_filter *f, size_t max,
                               void (*fn)(void *arg,
                                          const struct store_event *const *evs,
                                          size_t n, uint64_t seen),
                               void *arg, uint64_t *seen, uint64_t *oldest)
{
    const struct store_event *picked[READ_BATCH];
    if (max > READ_BATCH)
        max = READ_BATCH;
    pthread_mutex_lock(&h->lock);
    uint64_t first = h->newest - h->n + 1;
    *oldest = h->n > 0 ? first : 0;
    enum history_read rc = HISTORY_READ;
    if (after > h->newest)
        rc = HISTORY_AHEAD;
    else if (after < h->newest && after + 1 < first)
        rc = HISTORY_COMPACTED;
    if (rc != HISTORY_READ) {
        pthread_mutex_unlock(&h->lock);
        return rc;
    }
    size_t n = 0;
    uint64_t r = after;
    while (r < h->newest && n < max) {
        r++;
        const struct store_event *ev = &h->ring[(r - 1) % h->cap]->ev;
        if (matches(f, ev))
            picked[n++] = ev;
    }
    *seen = r;
    fn(arg, picked, n, r);
    pthread_mutex_unlock(&h->lock);
    return HISTORY_READ;
}

enum history_read history_sessions(struct history *h, uint64_t after,
                                   void (*fn)(void *arg, const char *session,
                                              size_t len),
                                   void *arg, uint64_t *newest)
{
    pthread_mutex_lock(&h->lock);
    uint64_t first = h->newest - h->n + 1;
    *newest = h->newest;
    enum history_read rc = HISTORY_READ;
    if (after < h->newest && after + 1 < first)
        rc = HISTORY_COMPACTED;
    for (uint64_t r = after + 1; rc == HISTORY_READ && r <= h->newest; r++) {
        const struct lease_row *l = &h->ring[(r - 1) % h->cap]->ev.lease;
        fn(arg, l->session, l->session_len);
    }
    pthread_mutex_unlock(&h->lock);
    return rc;
}

size_t history_capacity(const struct history *h)
{
    return h->cap;
}

size_t history_bytes(struct history *h)
{
    pthread_mutex_lock(&h->lock);
    size_t bytes = h->bytes + h->cap * sizeof(*h->ring) + sizeof(*h);
    pthread_mutex_unlock(&h->lock);
    return bytes;
}
