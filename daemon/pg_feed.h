/*
 * The shared mode's copy of the database's events for Watch: what one
 * read of them gave (pgstore_events), gathered on the worker that read
 * it, then applied to the replica's history (a copy: history_set_copy)
 * on the loop, which alone appends to it.
 */
#ifndef LEASED_PG_FEED_H
#define LEASED_PG_FEED_H

#include <stddef.h>
#include <stdint.h>

#include "history.h"
#include "store.h"

struct feed {
    struct store_event *evs; /* strings owned, one allocation each */
    size_t n, cap;
    uint64_t top; /* the newest revision the database had */
};

/* pgstore_events()'s ev_cb (arg: the feed): keeps a copy of ev. Returns
 * -1 when out of memory. */
int feed_add(void *arg, const struct store_event *ev);

/* Forgets what was gathered (the feed may be used again). */
void feed_clear(struct feed *f);
void feed_free(struct feed *f); /* and frees its memory */

/* Applies to h what a read of the events after revision `after` (h's
 * newest when it began) gave: its events appended; the history
 * restarted first when those after `after` are gone (the first one read
 * does not follow it), or when the database has none after it but its
 * newest revision is another (gone too, or the database is behind the
 * copy: a restored backup). Returns -1 when out of memory (nothing
 * appended). */
int feed_apply(const struct feed *f, struct history *h, uint64_t after);

#endif
