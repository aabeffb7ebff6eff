/*
 * The undo log of libfaultfs (faultfs.c), which faultfs-restore
 * (faultfs_restore.c) applies: one format, defined here once.
 *
 * One log per affected file, named "<dev>-<ino>.undo" (16 hex digits
 * each) in $FAULTFS_UNDO_DIR, so that a file deleted and recreated under
 * the same name gets a log of its own. In host byte order (the log never
 * leaves the machine that wrote it):
 *
 *   struct faultfs_log_header
 *   path                  header.path_len bytes, no NUL: the file's
 *                         absolute path when the log was started
 *   struct faultfs_log_record, then record.len old bytes   (repeated)
 *
 * Invariants:
 *   1. Records are in the order of the writes they undo, and their seq
 *      numbers increase by one from record to record.
 *   2. A record with seq < header.dropped is dead: a successful sync that
 *      began after its write ended made that write durable.
 *   3. Undoing the live records from last to first (set the size to
 *      old_size, then write the old bytes at offset) gives back the file
 *      as it was at its last successful sync (or when the log started),
 *      provided only writers under libfaultfs changed the file.
 *   4. A record cut short at the end (the process died while appending
 *      it) is ignored: its write had not happened yet.
 */
#ifndef LEASED_FAULTFS_H
#define LEASED_FAULTFS_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#define FAULTFS_LOG_MAGIC "FFSUNDO1"
#define FAULTFS_LOG_SUFFIX ".undo"
#define FAULTFS_RECORD_MAGIC UINT32_C(0x52534646) /* "FFSR" */

struct faultfs_log_header {
    char magic[8]; /* FAULTFS_LOG_MAGIC, no NUL */
    uint64_t dev;  /* st_dev and st_ino of the file this log undoes */
    uint64_t ino;
    int64_t btime_sec; /* its birth time, or 0 where statx has none: */
    uint32_t btime_nsec; /* tells a reused inode number apart */
    uint32_t path_len;
    uint64_t dropped; /* records with seq < dropped are dead */
};

struct faultfs_log_record {
    uint32_t magic; /* FAULTFS_RECORD_MAGIC */
    uint32_t reserved;
    uint64_t seq;
    uint64_t old_size; /* the file's size before the write */
    uint64_t offset;   /* where the old bytes go back */
    uint64_t len;      /* how many old bytes follow */
};

static_assert(sizeof(struct faultfs_log_header) == 48, "no padding");
static_assert(offsetof(struct faultfs_log_header, dropped) == 40,
              "dropped is rewritten in place");
static_assert(sizeof(struct faultfs_log_record) == 40, "no padding");

#endif
