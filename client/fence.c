/*
 * Fencing a resource (see lease.h, lease_fence_enter): a small file that
 * keeps the highest fencing token that has written to one resource, and
 * its flock(2), which lets one writer in at a time.
 *
 * It is not a lease: it decides nothing about who holds a session, and
 * asks no service. It only orders the writes of the holders the service
 * already chose, so that a holder paused past its lease cannot write
 * after its successor did. Writers that do not enter it are not stopped.
 *
 * The file: empty (just created: no token yet, read as 0), or exactly 21
 * bytes, the token in 20 decimal digits, zero-padded, and '\n'. The shell
 * recipe (client/examples/fenced-write.sh) reads and writes the same
 * bytes under the same lock, so C and shell writers share one fence.
 *
 * Invariants:
 * 1. The recorded token never goes down: it is read and rewritten only
 *    under the lock, and only with a higher token.
 * 2. A rewrite is the same 21 bytes at offset 0 (never a truncation), so
 *    the file is never shorter than a token; and it is on disk
 *    (fdatasync) before the writer is let in.
 * 3. Anything but the two forms above is refused (LEASE_EUNAVAILABLE),
 *    never read as 0: a damaged fence must not let an old token in.
 *
 * The lock belongs to the open file: a process that dies inside (kill
 * -9) lets the next writer in, and the recorded token stays. A child
 * forked while inside shares the lock until it closes its copy of the
 * descriptor (it is O_CLOEXEC, so an exec closes it).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "client.h"
#include "lease.h"

#define TOKEN_DIGITS 20                  /* UINT64_MAX has 20 digits */
#define LINE_LEN (TOKEN_DIGITS + 1)      /* and '\n' */

struct lease_fence {
    int fd; /* the fence file, locked (flock LOCK_EX) */
};

static int io_fail(const char *what, const char *path)
{
    return client_fail(LEASE_EUNAVAILABLE, "%s %s: %s", what, path,
                       strerror(errno));
}

/* Parses the n bytes of a fence file: true with *token, or false when
 * they are not a fence file. */
static bool parse(const char *buf, ssize_t n, uint64_t *token)
{
    *token = 0;
    if (n == 0)
        return true;
    if (n != LINE_LEN || buf[TOKEN_DIGITS] != '\n')
        return false;
    for (int i = 0; i < TOKEN_DIGITS; i++) {
        if (buf[i] < '0' || buf[i] > '9')
            return false;
        uint64_t d = (uint64_t)(buf[i] - '0');
        if (*token > (UINT64_MAX - d) / 10)
            return false; /* over UINT64_MAX: not a token */
        *token = *token * 10 + d;
    }
    return true;
}

int lease_fence_enter(const char *path, uint64_t token,
                      struct lease_fence **out)
{
    if (out != NULL)
        *out = NULL;
    if (path == NULL || out == NULL || token == 0)
        return client_fail(LEASE_EINVAL, "want a fence path and a token > 0");
    /* Allocated first, so that no token is recorded for a writer that
     * then could not be let in. */
    struct lease_fence *f = malloc(sizeof(*f));
    if (f == NULL)
        return client_fail(LEASE_ENOMEM, "out of memory");
    int rc = LEASE_OK;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
        rc = io_fail("opening", path);
        goto out;
    }
    int locked;
    while ((locked = flock(fd, LOCK_EX)) != 0 && errno == EINTR)
        ;
    if (locked != 0) {
        rc = io_fail("locking", path);
        goto out;
    }
    char buf[LINE_LEN + 1]; /* one byte more, to see a longer file */
    ssize_t n = pread(fd, buf, sizeof(buf), 0);
    if (n < 0) {
        rc = io_fail("reading", path);
        goto out;
    }
    uint64_t highest;
    if (!parse(buf, n, &highest)) {
        rc = client_fail(LEASE_EUNAVAILABLE, "%s is not a fence file", path);
        goto out;
    }
    if (token < highest) {
        rc = client_fail(LEASE_EHELD,
                         "token %" PRIu64 " is older than token %" PRIu64
                         ", which has written through %s",
                         token, highest, path);
        goto out;
    }
    if (token > highest) {
        char line[LINE_LEN + 1];
        snprintf(line, sizeof(line), "%0*" PRIu64 "\n", TOKEN_DIGITS, token);
        ssize_t w = pwrite(fd, line, LINE_LEN, 0);
        if (w != LINE_LEN) {
            if (w >= 0)
                errno = ENOSPC; /* a short write sets no errno */
            rc = io_fail("writing", path);
            goto out;
        }
        if (fdatasync(fd) != 0) {
            rc = io_fail("syncing", path);
            goto out;
        }
    }
    f->fd = fd;
    fd = -1;
    *out = f;
    f = NULL;
out:
    if (fd >= 0)
        close(fd); /* and the lock with it */
    free(f);
    return rc;
}

void lease_fence_leave(struct lease_fence *f)
{
    if (f == NULL)
        return;
    close(f->fd); /* lets the next writer in */
    free(f);
}
