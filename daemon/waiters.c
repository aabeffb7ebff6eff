/*
 * The lines of Wait calls (see waiters.h): a chained hash table of lines,
 * keyed by SipHash of the session id (a random key, so that callers
 * cannot pick ids that share a bucket), doubled when it holds more lines
 * than buckets.
 */
#include "waiters.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "siphash.h"

#define MIN_BUCKETS 64

struct line {
    struct line *next; /* in its bucket */
    uint64_t hash;
    struct request *head, *tail;
};

struct waiters {
    struct line **buckets;
    size_t nbuckets; /* a power of two */
    size_t nlines, count;
    struct siphash_key key;
};

struct waiters *waiters_create(void)
{
    struct waiters *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    w->buckets = calloc(MIN_BUCKETS, sizeof(*w->buckets));
    if (w->buckets == NULL) {
        free(w);
        return NULL;
    }
    w->nbuckets = MIN_BUCKETS;
    siphash_random_key(&w->key);
    return w;
}

void waiters_destroy(struct waiters *w)
{
    if (w == NULL)
        return;
    free(w->buckets);
    free(w);
}

/* Where the line of the session is, or would be linked in. */
static struct line **find(const struct waiters *w, const char *session,
                          size_t len, uint64_t hash)
{
    struct line **at = &w->buckets[hash & (w->nbuckets - 1)];
    for (; *at != NULL; at = &(*at)->next) {
        const struct request *first = (*at)->head;
        if ((*at)->hash == hash && first->session_len == len &&
            memcmp(first->session, session, len) == 0)
            break;
    }
    return at;
}

/* Doubles the buckets; stays as it is when out of memory (only slower). */
static void grow(struct waiters *w)
{
    size_t n = w->nbuckets * 2;
    struct line **b = calloc(n, sizeof(*b));
    if (b == NULL)
        return;
    for (size_t i = 0; i < w->nbuckets; i++) {
        for (struct line *l = w->buckets[i], *next; l != NULL; l = next) {
            next = l->next;
            l->next = b[l->hash & (n - 1)];
            b[l->hash & (n - 1)] = l;
        }
    }
    free(w->buckets);
    w->buckets = b;
    w->nbuckets = n;
}

int waiters_add(struct waiters *w, struct request *req)
{
    uint64_t hash = siphash24(&w->key, req->session, req->session_len);
    struct line **at = find(w, req->session, req->session_len, hash);
    req->next = NULL;
    if (*at != NULL) {
        (*at)->tail->next = req;
        (*at)->tail = req;
        w->count++;
        return 0;
    }
    struct line *l = malloc(sizeof(*l));
    if (l == NULL)
        return -1;
    *l = (struct line){NULL, hash, req, req};
    *at = l;
    w->count++;
    if (++w->nlines > w->nbuckets)
        grow(w);
    return 0;
}

bool waiters_has(const struct waiters *w, const char *session, size_t len)
{
    return w->count > 0 &&
           *find(w, session, len, siphash24(&w->key, session, len)) != NULL;
}

/* Unlinks the line at *at, which is empty, and frees it. */
static void drop_line(struct waiters *w, struct line **at)
{
    struct line *l = *at;
    *at = l->next;
    free(l);
    w->nlines--;
}

/* Takes the first request of the line at *at (dropping the line when it
 * was the last). */
static struct request *pop_at(struct waiters *w, struct line **at)
{
    struct request *first = (*at)->head;
    (*at)->head = first->next;
    first->next = NULL;
    w->count--;
    if ((*at)->head == NULL)
        drop_line(w, at);
    return first;
}

struct request *waiters_pop(struct waiters *w, const char *session, size_t len)
{
    if (w->count == 0)
        return NULL;
    struct line **at = find(w, session, len, siphash24(&w->key, session, len));
    return *at != NULL ? pop_at(w, at) : NULL;
}

/* Appends r to the list head..*tail. */
static void append(struct request **head, struct request **tail,
                   struct request *r)
{
    r->next = NULL;
    if (*tail != NULL)
        (*tail)->next = r;
    else
        *head = r;
    *tail = r;
}

struct request *waiters_take_firsts(struct waiters *w,
                                    bool (*take)(void *arg,
                                                 const struct request *first),
                                    void *arg)
{
    struct request *head = NULL, *tail = NULL;
    for (size_t i = 0; i < w->nbuckets && w->count > 0; i++) {
        for (struct line **at = &w->buckets[i]; *at != NULL;) {
            struct line *l = *at;
            if (!take(arg, l->head)) {
                at = &l->next;
                continue;
            }
            bool last = l->head->next == NULL;
            append(&head, &tail, pop_at(w, at));
            if (!last)
                at = &l->next;
        }
    }
    return head;
}

struct request *waiters_take_ended(struct waiters *w, bool all)
{
    struct request *head = NULL, *tail = NULL;
    for (size_t i = 0; i < w->nbuckets && w->count > 0; i++) {
        for (struct line **at = &w->buckets[i]; *at != NULL;) {
            struct line *l = *at;
            struct request *keep = NULL, *keep_tail = NULL;
            for (struct request *r = l->head, *next; r != NULL; r = next) {
                next = r->next;
                if (all || atomic_load(&r->ended)) {
                    append(&head, &tail, r);
                    w->count--;
                } else {
                    append(&keep, &keep_tail, r);
                }
            }
            l->head = keep;
            l->tail = keep_tail;
            if (keep == NULL)
                drop_line(w, at);
            else
                at = &l->next;
        }
    }
    return head;
}

size_t waiters_count(const struct waiters *w)
{
    return w->count;
}
