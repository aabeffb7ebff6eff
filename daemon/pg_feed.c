/* The shared mode's copy of the database's events: see pg_feed.h. */
#include "pg_feed.h"

#include <stdlib.h>
#include <string.h>

int feed_add(void *arg, const struct store_event *ev)
{
    struct feed *f = arg;
    if (f->n == f->cap) {
        size_t cap = f->cap == 0 ? 64 : f->cap * 2;
        struct store_event *evs = realloc(f->evs, cap * sizeof(*evs));
        if (evs == NULL)
            return -1;
        f->evs = evs;
        f->cap = cap;
    }
    const struct lease_row *l = &ev->lease;
    char *text = malloc(l->session_len + l->owner_len + 1);
    if (text == NULL)
        return -1;
    memcpy(text, l->session, l->session_len);
    if (l->owner_len > 0)
        memcpy(text + l->session_len, l->owner, l->owner_len);
    struct store_event *e = &f->evs[f->n++];
    *e = *ev;
    e->lease.session = text;
    e->lease.owner = text + l->session_len;
    return 0;
}

void feed_clear(struct feed *f)
{
    for (size_t i = 0; i < f->n; i++)
        free((char *)f->evs[i].lease.session);
    f->n = 0;
    f->top = 0;
}

void feed_free(struct feed *f)
{
    feed_clear(f);
    free(f->evs);
    f->evs = NULL;
    f->cap = 0;
}

int feed_apply(const struct feed *f, struct history *h, uint64_t after)
{
    if (f->n == 0) {
        if (f->top != after)
            history_restart(h, f->top);
        return 0;
    }
    if (f->evs[0].revision != after + 1)
        history_restart(h, f->evs[0].revision - 1);
    return history_append(h, f->evs, f->n);
}
