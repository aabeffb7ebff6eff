/*
 * The file-lock backend (see lease.h, lease_file_open): leases of one
 * host kept in a directory, for processes that share no daemon.
 *
 * A session lives in a slot, named by a hash of its id: HASH.N, with the
 * lock file HASH.N.lock; a slot whose record holds another session (a
 * hash collision) sends the caller to N + 1, so any session id has a name
 * of its own. Each call takes flock(LOCK_EX) on the slot's lock file,
 * reads the record, decides by leased's own rules (core/rules.h; with no
 * restart quarantine, which nothing here needs: every change, renewals
 * too, is on disk before it is answered), and writes the new record
 * atomically and durably: a temporary file, fsync, rename over the
 * record, fsync of the directory. A crash leaves either the old record or
 * the new one (and maybe a temporary file, ignored). Records are never
 * removed: a release keeps the token (a tombstone), so tokens never go
 * down.
 *
 * Record: "leased-lease 1 TOKEN EXPIRY_NS OWNER_LEN SESSION_LEN\n"
 * followed by the owner's and the session's bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "lease.h"
#include "nanotime.h"
#include "rules.h"

#define MAX_SLOTS 64
#define RECORD_MAX (128 + LEASE_OWNER_MAX + LEASE_SESSION_MAX)

struct files {
    char dir[PATH_MAX - 64];
    int64_t ttl_ns;
    int64_t (*now_ns)(void *arg);
    void *arg;
};

struct record {
    bool exists;
    uint64_t token;
    int64_t expiry_ns;
    char owner[LEASE_OWNER_MAX + 1]; /* "" after a release */
    char session[LEASE_SESSION_MAX + 1];
};

static int64_t realtime_ns(void *arg)
{
    (void)arg;
    return nanotime_wall();
}

static uint64_t hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325u;
    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3u;
    return h;
}

static int io_fail(char *errmsg, size_t len, const char *what,
                   const char *path)
{
    snprintf(errmsg, len, "%s %s: %s", what, path, strerror(errno));
    return LEASE_EUNAVAILABLE;
}

/* Reads the record at path; a missing file is no record. */
static int read_record(const char *path, struct record *r, char *errmsg,
                       size_t len)
{
    memset(r, 0, sizeof(*r));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? LEASE_OK
                               : io_fail(errmsg, len, "opening", path);
    char buf[RECORD_MAX + 1];
    ssize_t n = read(fd, buf, RECORD_MAX);
    close(fd);
    if (n < 0)
        return io_fail(errmsg, len, "reading", path);
    buf[n] = '\0';
    unsigned long long token;
    long long expiry;
    size_t olen, slen;
    int used = 0;
    if (sscanf(buf, "leased-lease 1 %llu %lld %zu %zu\n%n", &token, &expiry,
               &olen, &slen, &used) != 4 ||
        used == 0 || olen > LEASE_OWNER_MAX || slen > LEASE_SESSION_MAX ||
        slen == 0 || (size_t)n != (size_t)used + olen + slen) {
        snprintf(errmsg, len, "%s: not a lease record", path);
        return LEASE_EUNAVAILABLE;
    }
    r->exists = true;
    r->token = token;
    r->expiry_ns = expiry;
    memcpy(r->owner, buf + used, olen);
    memcpy(r->session, buf + used + olen, slen);
    return LEASE_OK;
}

/* Replaces the record at path with r, atomically and durably. */
static int write_record(const struct files *f, const char *path,
                        const struct record *r, char *errmsg, size_t len)
{
    char tmp[PATH_MAX + 32], buf[RECORD_MAX + 1];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    size_t olen = strlen(r->owner), slen = strlen(r->session);
    int n = snprintf(buf, sizeof(buf), "leased-lease 1 %" PRIu64 " %" PRId64
                     " %zu %zu\n", r->token, r->expiry_ns, olen, slen);
    memcpy(buf + n, r->owner, olen);
    memcpy(buf + n + olen, r->session, slen);
    size_t total = (size_t)n + olen + slen;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return io_fail(errmsg, len, "creating", tmp);
    bool ok = write(fd, buf, total) == (ssize_t)total && fsync(fd) == 0;
    int e = errno;
    close(fd);
    if (!ok || rename(tmp, path) != 0) {
        e = ok ? errno : e;
        unlink(tmp);
        errno = e;
        return io_fail(errmsg, len, "writing", path);
    }
    int dfd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) != 0) {
        if (dfd >= 0)
            close(dfd);
        return io_fail(errmsg, len, "syncing", f->dir);
    }
    close(dfd);
    return LEASE_OK;
}

/* One call on a session's record. */
struct call {
    enum rules_op op;
    const char *owner;  /* borrowed, NUL-terminated */
    uint64_t token;     /* Renew, Release */
    struct lease *out;  /* Acquire, Renew: the lease granted */
};

/* Decides c on the record r (read under its lock) at now, by the rules
 * every backend shares; on a change, updates r and sets *write. Returns a
 * lease error. */
static int decide(const struct files *f, struct record *r,
                  const struct call *c, int64_t now, bool *write,
                  char *errmsg, size_t len)
{
    struct rules_row row = {
        .owner = r->owner,
        .owner_len = strlen(r->owner),
        .token = r->token,
        .expiry_ns = r->expiry_ns,
    };
    struct rules_request req = {c->owner, strlen(c->owner), c->token};
    struct rules_outcome o;
    enum rules_code code = rules_decide(c->op, r->exists ? &row : NULL,
                                        &req, now, f->ttl_ns, &o);
    switch (code) {
    case RULES_OK:
        break;
    case RULES_NOOP:
        return LEASE_OK;
    case RULES_HELD:
    case RULES_LOST:
        snprintf(errmsg, len, "%s", rules_reason(code));
        return LEASE_EHELD;
    }
    if (o.durable) { /* a new owner, or none (a tombstone) */
        /* o.after.owner is the caller's (a takeover) or NULL (a release),
         * never r->owner itself. */
        if (o.after.owner_len > 0)
            memcpy(r->owner, o.after.owner, o.after.owner_len);
        r->owner[o.after.owner_len] = '\0';
    }
    r->token = o.after.token;
    r->expiry_ns = o.after.expiry_ns;
    *write = true;
    if (c->out != NULL)
        client_fill(c->out, r->session, strlen(r->session), r->owner,
                    strlen(r->owner), r->token, r->expiry_ns, f->ttl_ns);
    return LEASE_OK;
}

/* Finds session's slot, locks it, runs decide, writes what it changed. */
static int with_session(struct files *f, const char *session,
                        const struct call *c, char *errmsg, size_t len)
{
    uint64_t h = hash(session);
    for (int slot = 0; slot < MAX_SLOTS; slot++) {
        char path[PATH_MAX], lock[PATH_MAX + 8];
        snprintf(path, sizeof(path), "%s/%016" PRIx64 ".%d", f->dir, h,
                 slot);
        snprintf(lock, sizeof(lock), "%s.lock", path);
        int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (lfd < 0)
            return io_fail(errmsg, len, "opening", lock);
        while (flock(lfd, LOCK_EX) != 0 && errno == EINTR)
            ;
        struct record r;
        int rc = read_record(path, &r, errmsg, len);
        if (rc == LEASE_OK && r.exists && strcmp(r.session, session) != 0) {
            close(lfd); /* another session's slot: the next one */
            continue;
        }
        if (rc == LEASE_OK) {
            if (!r.exists)
                snprintf(r.session, sizeof(r.session), "%s", session);
            bool write = false;
            rc = decide(f, &r, c, f->now_ns(f->arg), &write, errmsg, len);
            int wrc = rc == LEASE_OK && write
                          ? write_record(f, path, &r, errmsg, len)
                          : LEASE_OK;
            if (wrc != LEASE_OK)
                rc = wrc;
        }
        close(lfd); /* and the lock with it */
        return rc;
    }
    snprintf(errmsg, len, "more than %d sessions share one hash",
             MAX_SLOTS);
    return LEASE_EUNAVAILABLE;
}

static int file_acquire(void *impl, const char *session_id, const char *owner,
                        struct lease *out, char *errmsg, size_t len)
{
    struct call c = {RULES_ACQUIRE, owner, 0, out};
    return with_session(impl, session_id, &c, errmsg, len);
}

static int file_renew(void *impl, const struct lease *cur, struct lease *out,
                      char *errmsg, size_t len)
{
    struct lease copy = *cur; /* out may be cur */
    struct call c = {RULES_RENEW, copy.owner, copy.token, out};
    return with_session(impl, copy.session_id, &c, errmsg, len);
}

static int file_release(void *impl, const struct lease *cur, char *errmsg,
                        size_t len)
{
    struct call c = {RULES_RELEASE, cur->owner, cur->token, NULL};
    return with_session(impl, cur->session_id, &c, errmsg, len);
}

static const struct lease_backend file_backend = {
    .acquire = file_acquire,
    .renew = file_renew,
    .release = file_release,
    .destroy = free,
};

int lease_file_open(const char *dir, int64_t ttl_ns,
                    int64_t (*now_ns)(void *arg), void *arg,
                    struct lease_client **out)
{
    *out = NULL;
    if (dir == NULL || ttl_ns <= 0)
        return client_fail(LEASE_EINVAL, "want a directory and a TTL > 0");
    struct files *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return client_fail(LEASE_ENOMEM, "out of memory");
    if (strlen(dir) >= sizeof(f->dir)) {
        free(f);
        return client_fail(LEASE_EINVAL, "directory name too long");
    }
    snprintf(f->dir, sizeof(f->dir), "%s", dir);
    f->ttl_ns = ttl_ns;
    f->now_ns = now_ns != NULL ? now_ns : realtime_ns;
    f->arg = arg;
    struct stat st;
    if ((mkdir(dir, 0700) != 0 && errno != EEXIST) || stat(dir, &st) != 0 ||
        !S_ISDIR(st.st_mode)) {
        int e = errno;
        free(f);
        return client_fail(LEASE_EINVAL, "directory %s: %s", dir,
                           strerror(e));
    }
    if ((*out = lease_client_create(&file_backend, f)) == NULL) {
        free(f);
        return client_fail(LEASE_ENOMEM, "out of memory");
    }
    return LEASE_OK;
}
