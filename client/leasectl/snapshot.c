/*
 * `leasectl snapshot save FILE`: the admin service's Snapshot (a copy of
 * the embedded store, made by SQLite in one read transaction beside the
 * daemon's commits) written to FILE so that FILE is either the whole copy
 * or not there: a temporary file beside it, fsynced, renamed over FILE,
 * and the directory fsynced, so that the rename outlives a crash too.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json.h"
#include "leasectl.h"
#include "leased/admin/v1/admin.pb-c.h"

static const char sqlite_magic[16] = "SQLite format 3";

/* Writes all of buf to fd; 0 or an errno. */
static int write_all(int fd, const uint8_t *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* fsyncs the directory that holds path; 0 or an errno. */
static int sync_dir(const char *path)
{
    char copy[4096];
    snprintf(copy, sizeof(copy), "%s", path);
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    int err = fsync(fd) == 0 ? 0 : errno;
    close(fd);
    return err;
}

/* buf (len bytes) into path, whole or not at all; 0 or an errno, with
 * what failed in *what. */
static int save(const char *path, const uint8_t *buf, size_t len,
                const char **what)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp-%ld", path, (long)getpid()) >=
        (int)sizeof(tmp)) {
        *what = "naming the temporary file";
        return ENAMETOOLONG;
    }
    *what = "creating";
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno;
    int err = write_all(fd, buf, len);
    *what = "writing";
    if (err == 0 && fsync(fd) != 0) {
        err = errno;
        *what = "syncing";
    }
    if (close(fd) != 0 && err == 0) {
        err = errno;
        *what = "closing";
    }
    if (err == 0 && rename(tmp, path) != 0) {
        err = errno;
        *what = "renaming the temporary file to";
    }
    if (err != 0) {
        unlink(tmp);
        return err;
    }
    *what = "syncing the directory of";
    return sync_dir(path);
}

int ctl_snapshot(struct ctl *c)
{
    int rc = ctl_reach(c);
    if (rc != EXIT_OK)
        return rc;
    Leased__Admin__V1__SnapshotRequest req =
        LEASED__ADMIN__V1__SNAPSHOT_REQUEST__INIT;
    ProtobufCMessage *resp;
    rc = ctl_call(c, "/leased.admin.v1.Admin/Snapshot", &req.base,
                  &leased__admin__v1__snapshot_response__descriptor, &resp);
    if (rc == EXIT_HELD) /* FAILED_PRECONDITION: over PostgreSQL */
        return EXIT_FAILED;
    if (rc != EXIT_OK)
        return rc;
    ctl_deadline_settle(); /* the answer came: FILE is written whole */
    const ProtobufCBinaryData *db =
        &((Leased__Admin__V1__SnapshotResponse *)resp)->database;
    const char *file = c->args.arg2, *what = "";
    int err = 0;
    if (db->len < sizeof(sqlite_magic) ||
        memcmp(db->data, sqlite_magic, sizeof(sqlite_magic)) != 0) {
        fprintf(stderr, "leasectl: snapshot: the answer is no SQLite "
                        "database (%zu bytes): nothing written\n",
                db->len);
        rc = EXIT_FAILED;
    } else if ((err = save(file, db->data, db->len, &what)) != 0) {
        fprintf(stderr, "leasectl: snapshot: %s %s: %s\n", what, file,
                strerror(err));
        rc = EXIT_FAILED;
    } else if (c->args.json) {
        printf("{\"saved\":");
        json_put_string(stdout, file);
        printf(",\"bytes\":%zu}\n", db->len);
    } else {
        printf("saved %s: %zu bytes\n", file, db->len);
    }
    protobuf_c_message_free_unpacked(resp, NULL);
    return rc;
}
