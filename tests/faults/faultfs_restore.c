/*
 * faultfs-restore UNDO_DIR: the "power loss" half of libfaultfs
 * (faultfs.c). Run only once every process that wrote under the shim is
 * dead (kill -9): it applies each undo log in UNDO_DIR, last record first
 * (faultfs.h, invariant 3), so that each file holds, byte for byte, what
 * it held at its last successful fsync/fdatasync; then deletes the logs
 * and the "-shm" file beside each restored database (its wal-index would
 * describe WAL frames that are gone; with no process open, SQLite
 * rebuilds it from the WAL).
 *
 * A log whose file is gone, or is another inode now (deleted and
 * recreated, or renamed over: metadata is not simulated), is deleted
 * unapplied. One line per log on stdout says what was done. Exit status
 * 0, or 1 if a log could not be read or applied (that log is kept).
 */
#include "faultfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static bool read_at(int fd, void *buf, size_t len, uint64_t off)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = pread(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return true;
}

static bool write_at(int fd, const void *buf, size_t len, uint64_t off)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = pwrite(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return true;
}

/* Deletes the wal-index beside the database that path belongs to. */
static void remove_shm(const char *path)
{
    char db[PATH_MAX + 8];
    snprintf(db, sizeof(db), "%s", path);
    if (ends_with(db, "-wal"))
        db[strlen(db) - 4] = '\0';
    else if (ends_with(db, "-journal"))
        db[strlen(db) - 8] = '\0';
    strcat(db, "-shm");
    if (unlink(db) == 0)
        printf("removed %s\n", db);
}

/* Undoes the live records of the log at log_fd (header h) on the file at
 * path: last first. */
static int undo(int log_fd, const struct faultfs_log_header *h,
                uint64_t log_size, const char *path, size_t *undone)
{
    /* Where each live record starts, in order. */
    uint64_t *offs = NULL;
    size_t n = 0, cap = 0;
    uint64_t off = sizeof(*h) + h->path_len, next = 0;
    bool first = true;
    struct faultfs_log_record r;
    while (log_size - off >= sizeof(r) && read_at(log_fd, &r, sizeof(r), off) &&
           r.magic == FAULTFS_RECORD_MAGIC &&
           r.len <= log_size - off - sizeof(r) && (first || r.seq == next)) {
        first = false;
        next = r.seq + 1;
        if (r.seq >= h->dropped) {
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                uint64_t *p = realloc(offs, cap * sizeof(*p));
                if (p == NULL) {
                    free(offs);
                    fprintf(stderr, "out of memory\n");
                    return -1;
                }
                offs = p;
            }
            offs[n++] = off;
        }
        off += sizeof(r) + r.len;
    }
    /* Anything after `off` is a record cut short by the kill: its write
     * never happened (invariant 4). */
    int rc = 0, fd = -1;
    char *buf = NULL;
    if (n > 0 && (fd = open(path, O_RDWR | O_CLOEXEC)) < 0) {
        fprintf(stderr, "cannot open %s: %s\n", path, strerror(errno));
        rc = -1;
    }
    for (size_t i = n; rc == 0 && i-- > 0;) {
        char *p = read_at(log_fd, &r, sizeof(r), offs[i])
                      ? realloc(buf, r.len ? (size_t)r.len : 1)
                      : NULL;
        if (p != NULL)
            buf = p;
        if (p == NULL ||
            !read_at(log_fd, buf, (size_t)r.len, offs[i] + sizeof(r)) ||
            ftruncate(fd, (off_t)r.old_size) != 0 ||
            !write_at(fd, buf, (size_t)r.len, r.offset)) {
            fprintf(stderr, "undoing record %" PRIu64 " on %s: %s\n", r.seq,
                    path, strerror(errno));
            rc = -1;
        }
    }
    if (fd >= 0 && close(fd) != 0)
        rc = -1;
    free(buf);
    free(offs);
    *undone = n;
    return rc;
}

static int restore(const char *log)
{
    int fd = open(log, O_RDONLY | O_CLOEXEC);
    struct stat lst;
    struct faultfs_log_header h;
    char path[PATH_MAX];
    if (fd < 0 || fstat(fd, &lst) != 0 || !read_at(fd, &h, sizeof(h), 0) ||
        memcmp(h.magic, FAULTFS_LOG_MAGIC, sizeof(h.magic)) != 0 ||
        h.path_len == 0 || h.path_len >= sizeof(path) ||
        !read_at(fd, path, h.path_len, sizeof(h))) {
        fprintf(stderr, "%s: not an undo log\n", log);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    path[h.path_len] = '\0';

    struct statx stx;
    int rc = 0;
    if (statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS | STATX_BTIME,
              &stx) != 0) {
        printf("skipped %s: %s\n", path, strerror(errno));
    } else if (makedev(stx.stx_dev_major, stx.stx_dev_minor) != h.dev ||
               stx.stx_ino != h.ino ||
               ((stx.stx_mask & STATX_BTIME) &&
                (stx.stx_btime.tv_sec != h.btime_sec ||
                 stx.stx_btime.tv_nsec != h.btime_nsec))) {
        printf("skipped %s: another file now (the log's was deleted)\n",
               path);
    } else {
        size_t undone = 0;
        rc = undo(fd, &h, (uint64_t)lst.st_size, path, &undone);
        if (rc == 0)
            printf("restored %s: %zu changes undone\n", path, undone);
        remove_shm(path);
    }
    close(fd);
    if (rc == 0 && unlink(log) != 0) {
        fprintf(stderr, "cannot remove %s: %s\n", log, strerror(errno));
        rc = -1;
    }
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: faultfs-restore UNDO_DIR\n");
        return 2;
    }
    DIR *d = opendir(argv[1]);
    if (d == NULL) {
        fprintf(stderr, "%s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    int failed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char log[PATH_MAX];
        if (snprintf(log, sizeof(log), "%s/%s", argv[1], e->d_name) >=
            (int)sizeof(log))
            continue;
        if (ends_with(e->d_name, FAULTFS_LOG_SUFFIX ".tmp"))
            unlink(log); /* a compaction the kill cut short */
        else if (ends_with(e->d_name, FAULTFS_LOG_SUFFIX))
            failed |= restore(log) != 0;
    }
    closedir(d);
    return failed;
}
