/*
 * The data directory: created if missing, and locked (flock on
 * DIR/leased.lock) so that a second leased on it refuses to start.
 */
#ifndef LEASED_DATADIR_H
#define LEASED_DATADIR_H

#include <stddef.h>

/* How long a write to the database in it waits for another process's
 * lock (store_open's busy_timeout_ms). */
#define DATADIR_BUSY_TIMEOUT_MS 2000

/* Creates dir (mode 0700, parents too) if missing and takes its lock.
 * Returns the lock's file descriptor (keep it open while running), or -1
 * with errmsg set. */
int datadir_lock(const char *dir, char *errmsg, size_t errmsg_len);

#endif
