/*
 * libfaultfs: an LD_PRELOAD shim for the fault campaign (issue 9). It
 * injects storage faults into one process (the real leased, or a test
 * program) and keeps what a test needs to simulate a power loss after
 * that process is killed.
 *
 * What it is not: a real power loss. Only file contents and sizes are
 * rolled back, and only to the state at each file's last successful
 * fsync/fdatasync. Metadata operations (create, rename, unlink, mkdir:
 * directory entries) always survive; there is no reordering (a disk may
 * keep a later write and lose an earlier one; here the survivor is always
 * exactly the state at the sync), no torn sector, and no loss of pages
 * after a failed sync. Writes it does not see are not undone: writes
 * through mmap (which is why -shm files are left alone: SQLite rebuilds
 * them), by processes without the shim, or through calls it does not
 * interpose (writev, pwritev, open with O_TRUNC, truncate by path,
 * copy_file_range: neither SQLite 3.40 nor leased use them on these
 * files). One process at a time may write a file under the shim.
 *
 * Interposed, because SQLite 3.40 (Debian's libsqlite3) and leased call
 * them on leased.db, leased.db-wal, leased.db-journal and leased.lock:
 * write, pwrite64 (and pwrite, its other name), ftruncate64 (and
 * ftruncate), fsync, fdatasync, unlink (and unlinkat, its other form).
 *
 * Environment:
 *   FAULTFS_DIR       only regular files under this directory (on its
 *                     own filesystem) are affected, except names ending
 *                     in "-shm"; unset, the shim calls straight through
 *                     and does nothing else
 *   FAULTFS_CTL       the control file (below); unset or absent: no faults
 *   FAULTFS_UNDO_DIR  where undo logs go (see faultfs.h); unset: none.
 *                     Keep it outside FAULTFS_DIR.
 *
 * The control file is read again whenever its inode, size or mtime
 * changes (checked at each intercepted call on an affected file), so a
 * test can switch faults while the process runs: write a new file and
 * rename it over the old one. One setting a line, "#" to the end of the
 * line is a comment, unknown lines are ignored:
 *
 *   fsync_eio          fsync/fdatasync do nothing and fail with EIO
 *   fsync_delay_ms N   sleep N ms first (then sync, or fail if fsync_eio)
 *   write_eio          every write, and each ftruncate that grows the
 *                      file, writes nothing and fails with EIO
 *   write_enospc       each write or ftruncate that grows the file writes
 *                      nothing and fails with ENOSPC (overwriting blocks
 *                      already allocated needs no space, as on ext4)
 *   kill_in_fsync P    with probability P (0 < P <= 1) SIGKILL on entry
 *                      to fsync/fdatasync, before syncing ("kill -9
 *                      between commit and fsync")
 *
 * The undo log, and the race it must get right (see faultfs.h for the
 * format and its numbered invariants):
 *
 *   1. Before each write or ftruncate of an affected file, a record of
 *      the old size and the old bytes of the range about to change is
 *      appended (plain write: it must outlive a kill -9, not a power
 *      loss). The record and the real call are made under the file's
 *      mutex, so a record exists only once its write is about to happen,
 *      and a write ends before any later record begins.
 *   2. A sync takes a mark (the next record's seq) under that mutex when
 *      it begins, then calls the real fsync/fdatasync with no lock held:
 *      leased syncs the WAL on one thread while the next commit writes
 *      it on another, and that overlap is what the campaign tests.
 *   3. If the sync succeeds, records below the mark are dropped: their
 *      writes ended before it began, so it covered them. Records made
 *      while it ran stay, since it may not have. A failed sync drops
 *      nothing. The file state is keyed by st_dev/st_ino, so a sync
 *      through another descriptor (leased has its own for the WAL)
 *      counts for the same file.
 *   4. With nothing left after a sync, the log is cut back to its header;
 *      when dead records make up most of a large log (syncs that always
 *      overlap writes), the live ones are copied to a new log renamed
 *      over the old.
 *   5. Unlinking a file's last name deletes its log: a file recreated
 *      under that name is another inode, with a log of its own.
 *
 * The shim is built without sanitizers (it runs inside unsanitized
 * programs such as python3 too). With a daemon built with ASan, preload
 * the ASan runtime first: LD_PRELOAD="$(libasan of leased):libfaultfs.so".
 */
/* pwrite and pwrite64 (ftruncate, ftruncate64) are two symbols; with
 * 64-bit offsets, <unistd.h> would rename the first to the second. */
#undef _FILE_OFFSET_BITS

#include "faultfs.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FD_SLOTS 4096 /* descriptors above this are resolved every time */
#define CTL_MAX 65536
#define COMPACT_MIN (1u << 20) /* dead bytes before a log is compacted */

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off64_t);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off64_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_unlink)(const char *);
static int (*real_unlinkat)(int, const char *, int);

struct faults {
    bool fsync_eio;
    bool write_eio;
    bool write_enospc;
    unsigned fsync_delay_ms;
    double kill_in_fsync; /* 0: never */
};

/* One affected file (one inode). */
struct file {
    struct file *next;
    dev_t dev;
    ino_t ino;
    /* Guards what follows, and is held across each write's record and
     * real call (invariant 1), never across a real sync. */
    pthread_mutex_t mu;
    bool dead;     /* unlinked: no more records */
    int rd_fd;     /* to read old bytes through a write-only fd; or -1 */
    int log_fd;    /* -1 without FAULTFS_UNDO_DIR */
    char log_path[PATH_MAX];
    struct faultfs_log_header hdr; /* as on disk, dropped included */
    char path[PATH_MAX];
    uint64_t hdr_len;  /* header and path: where records start */
    uint64_t log_end;  /* where the next record goes */
    uint64_t next_seq; /* the next record's seq */
    /* rec_off[i]: where the record with seq rec_base + i starts. */
    uint64_t *rec_off;
    size_t rec_n, rec_cap;
    uint64_t rec_base;
};

/* What was known of a descriptor: which file it was, if affected. */
struct fd_slot {
    bool valid;
    dev_t dev;
    ino_t ino;
    struct file *file; /* borrowed from g.files; NULL: not affected */
};

static struct {
    bool active; /* FAULTFS_DIR is set */
    char dir_env[PATH_MAX];
    char ctl[PATH_MAX]; /* "" without FAULTFS_CTL */
    bool undo;
    char undo_dir[PATH_MAX];
    /* Guards everything below; taken before a file's mutex, never while
     * holding one. */
    pthread_mutex_t mu;
    bool dir_known; /* the directory may be created after we start */
    char dir[PATH_MAX];
    dev_t dir_dev;
    struct file *files;
    /* Unlinked, never freed: another thread may hold one between lookup
     * and its lock (and LeakSanitizer must not call them lost). */
    struct file *gone;
    struct fd_slot fds[FD_SLOTS];
    bool ctl_known;
    struct stat ctl_st;
    struct faults faults;
    pid_t rng_pid;
    uint64_t rng;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t once = PTHREAD_ONCE_INIT;

__attribute__((format(printf, 1, 2), noreturn)) static void
die(const char *fmt, ...)
{
    char msg[PATH_MAX + 256];
    int n = snprintf(msg, sizeof(msg), "libfaultfs: ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = strnlen(msg, sizeof(msg) - 2);
    msg[len++] = '\n';
    if (real_write != NULL)
        (void)!real_write(2, msg, len);
    abort();
}

static void *next_symbol(const char *name)
{
    void *p = dlsym(RTLD_NEXT, name);
    if (p == NULL)
        die("no %s after us: %s", name, dlerror());
    return p;
}

/* ISO C has no cast from void * to a function pointer; POSIX's dlsym
 * needs one. */
#define RESOLVE(fn)                                                       \
    do {                                                                  \
        void *p_ = next_symbol(#fn);                                      \
        memcpy(&real_##fn, &p_, sizeof(p_));                              \
    } while (0)

static void copy_env(char *dst, size_t len, const char *name)
{
    const char *v = getenv(name);
    if (v != NULL && strlen(v) < len)
        strcpy(dst, v);
}

static void init(void)
{
    RESOLVE(write);
    RESOLVE(pwrite);
    RESOLVE(pwrite64);
    RESOLVE(ftruncate);
    RESOLVE(ftruncate64);
    RESOLVE(fsync);
    RESOLVE(fdatasync);
    RESOLVE(unlink);
    RESOLVE(unlinkat);
    copy_env(g.dir_env, sizeof(g.dir_env), "FAULTFS_DIR");
    g.active = g.dir_env[0] != '\0';
    if (!g.active)
        return;
    copy_env(g.ctl, sizeof(g.ctl), "FAULTFS_CTL");
    char undo[PATH_MAX] = "";
    copy_env(undo, sizeof(undo), "FAULTFS_UNDO_DIR");
    if (undo[0] != '\0') {
        if (mkdir(undo, 0700) != 0 && errno != EEXIST)
            die("cannot create %s: %s", undo, strerror(errno));
        if (realpath(undo, g.undo_dir) == NULL)
            die("cannot resolve %s: %s", undo, strerror(errno));
        g.undo = true;
    }
}

static void start(void)
{
    pthread_once(&once, init);
}

static void lock(pthread_mutex_t *mu)
{
    if (pthread_mutex_lock(mu) != 0)
        abort();
}

static void unlock(pthread_mutex_t *mu)
{
    int e = errno; /* callers return the real call's errno */
    pthread_mutex_unlock(mu);
    errno = e;
}

/* Loops over short writes; the undo log must be whole. */
static void write_all(int fd, const void *buf, size_t len, uint64_t off,
                      const char *what)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = real_pwrite64(fd, p, len, (off64_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            die("writing %s: %s", what, n < 0 ? strerror(errno) : "no room");
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
}

/* ---- the undo log ---- */

/* The log of the file dev/ino, into a buffer of PATH_MAX. */
static void log_name(char *buf, dev_t dev, ino_t ino)
{
    if (snprintf(buf, PATH_MAX,
                 "%s/%016" PRIx64 "-%016" PRIx64 FAULTFS_LOG_SUFFIX,
                 g.undo_dir, (uint64_t)dev, (uint64_t)ino) >= PATH_MAX)
        die("FAULTFS_UNDO_DIR is too long");
}

static void index_push(struct file *f, uint64_t off)
{
    if (f->rec_n == f->rec_cap) {
        size_t cap = f->rec_cap ? 2 * f->rec_cap : 64;
        uint64_t *p = realloc(f->rec_off, cap * sizeof(*p));
        if (p == NULL)
            die("out of memory");
        f->rec_off = p;
        f->rec_cap = cap;
    }
    f->rec_off[f->rec_n++] = off;
}

static bool same_file(const struct faultfs_log_header *a,
                      const struct faultfs_log_header *b)
{
    return memcmp(a->magic, b->magic, sizeof(a->magic)) == 0 &&
           a->dev == b->dev && a->ino == b->ino &&
           a->btime_sec == b->btime_sec && a->btime_nsec == b->btime_nsec &&
           a->path_len == b->path_len;
}

/* Takes up the log a killed process left for this very file (not
 * restored: its unsynced writes are still not durable, and a sync of
 * ours will cover them), else starts a new one. */
static void log_open(struct file *f, int fd)
{
    log_name(f->log_path, f->dev, f->ino);
    struct faultfs_log_header want = {
        .magic = FAULTFS_LOG_MAGIC,
        .dev = (uint64_t)f->dev,
        .ino = (uint64_t)f->ino,
        .path_len = (uint32_t)strlen(f->path),
    };
    struct statx stx;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_BTIME, &stx) == 0 &&
        (stx.stx_mask & STATX_BTIME)) {
        want.btime_sec = stx.stx_btime.tv_sec;
        want.btime_nsec = stx.stx_btime.tv_nsec;
    }
    f->log_fd = open(f->log_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (f->log_fd < 0)
        die("cannot open %s: %s", f->log_path, strerror(errno));
    f->hdr_len = sizeof(want) + want.path_len;

    struct faultfs_log_header h;
    char path[PATH_MAX];
    struct stat st;
    bool resume =
        fstat(f->log_fd, &st) == 0 &&
        pread(f->log_fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
        same_file(&h, &want) &&
        pread(f->log_fd, path, want.path_len, sizeof(h)) ==
            (ssize_t)want.path_len &&
        memcmp(path, f->path, want.path_len) == 0;
    if (resume) {
        f->hdr = h;
        f->rec_base = h.dropped;
        uint64_t off = f->hdr_len, next = h.dropped;
        struct faultfs_log_record r;
        bool first = true;
        while (pread(f->log_fd, &r, sizeof(r), (off_t)off) ==
                   (ssize_t)sizeof(r) &&
               r.magic == FAULTFS_RECORD_MAGIC &&
               r.len <= (uint64_t)st.st_size - off - sizeof(r) &&
               (first || r.seq == next)) {
            if (first)
                f->rec_base = r.seq;
            first = false;
            index_push(f, off);
            next = r.seq + 1;
            off += sizeof(r) + r.len;
        }
        f->log_end = off; /* a torn last record goes (invariant 4) */
        f->next_seq = next > h.dropped ? next : h.dropped;
        if (first)
            f->rec_base = f->next_seq;
    } else {
        f->hdr = want;
        f->log_end = f->hdr_len;
        write_all(f->log_fd, &want, sizeof(want), 0, f->log_path);
        write_all(f->log_fd, f->path, want.path_len, sizeof(want),
                  f->log_path);
    }
    if (real_ftruncate64(f->log_fd, (off64_t)f->log_end) != 0)
        die("cannot truncate %s: %s", f->log_path, strerror(errno));
}

/* Reads len bytes at off of the file that fd (with status flags fl) is
 * open on. */
static void read_old(struct file *f, int fd, int fl, char *buf, size_t len,
                     uint64_t off)
{
    if ((fl & O_ACCMODE) == O_WRONLY) {
        if (f->rd_fd < 0) {
            /* Opened once, closed at unlink: closing a descriptor drops
             * the process's POSIX locks on the file. */
            char proc[64];
            snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
            f->rd_fd = open(proc, O_RDONLY | O_CLOEXEC);
            if (f->rd_fd < 0)
                die("cannot read %s: %s", f->path, strerror(errno));
        }
        fd = f->rd_fd;
    }
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, buf + got, len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            die("reading %s: %s", f->path, strerror(errno));
        if (n == 0)
            break; /* shrunk under us by a writer we do not see */
        got += (size_t)n;
    }
    memset(buf + got, 0, len - got);
}

/* Appends the undo record of a change of [off, off + len) of a file of
 * size bytes (invariant 1). Under f->mu. */
static void record(struct file *f, int fd, int fl, uint64_t off, uint64_t len,
                   uint64_t size)
{
    if (f->log_fd < 0 || f->dead)
        return;
    uint64_t old = off < size ? (len < size - off ? len : size - off) : 0;
    struct faultfs_log_record r = {
        .magic = FAULTFS_RECORD_MAGIC,
        .seq = f->next_seq,
        .old_size = size,
        .offset = off,
        .len = old,
    };
    if (old > SIZE_MAX - sizeof(r))
        die("a write of %" PRIu64 " bytes", old);
    char *buf = malloc(sizeof(r) + (size_t)old);
    if (buf == NULL)
        die("out of memory");
    memcpy(buf, &r, sizeof(r));
    read_old(f, fd, fl, buf + sizeof(r), (size_t)old, off);
    /* One write, so that a kill tears at most this record. */
    write_all(f->log_fd, buf, sizeof(r) + (size_t)old, f->log_end,
              f->log_path);
    free(buf);
    index_push(f, f->log_end);
    f->log_end += sizeof(r) + old;
    f->next_seq++;
}

static void write_dropped(struct file *f)
{
    write_all(f->log_fd, &f->hdr.dropped, sizeof(f->hdr.dropped),
              offsetof(struct faultfs_log_header, dropped), f->log_path);
}

/* Copies the live records to a new log and renames it over the old, so
 * that a kill at any point leaves one whole log (invariant 4). */
static void compact(struct file *f, uint64_t live_off)
{
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof(tmp), "%s.tmp", f->log_path);
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        die("cannot open %s: %s", tmp, strerror(errno));
    write_all(fd, &f->hdr, sizeof(f->hdr), 0, tmp);
    write_all(fd, f->path, f->hdr.path_len, sizeof(f->hdr), tmp);
    enum { CHUNK = 65536 };
    char *buf = malloc(CHUNK);
    if (buf == NULL)
        die("out of memory");
    for (uint64_t off = live_off; off < f->log_end;) {
        uint64_t want = f->log_end - off < CHUNK ? f->log_end - off : CHUNK;
        ssize_t n = pread(f->log_fd, buf, (size_t)want, (off_t)off);
        if (n <= 0)
            die("reading %s: %s", f->log_path,
                n < 0 ? strerror(errno) : "short");
        write_all(fd, buf, (size_t)n, f->hdr_len + off - live_off, tmp);
        off += (uint64_t)n;
    }
    free(buf);
    if (rename(tmp, f->log_path) != 0)
        die("cannot rename %s: %s", tmp, strerror(errno));
    close(f->log_fd);
    f->log_fd = fd;
    uint64_t shift = live_off - f->hdr_len;
    size_t gone = (size_t)(f->hdr.dropped - f->rec_base);
    for (size_t i = gone; i < f->rec_n; i++)
        f->rec_off[i - gone] = f->rec_off[i] - shift;
    f->rec_n -= gone;
    f->rec_base = f->hdr.dropped;
    f->log_end -= shift;
}

/* After a successful sync that began at mark (invariant 3). Under f->mu. */
static void synced(struct file *f, uint64_t mark)
{
    if (f->log_fd < 0 || f->dead || mark <= f->hdr.dropped)
        return;
    f->hdr.dropped = mark;
    write_dropped(f);
    if (mark == f->next_seq) {
        if (real_ftruncate64(f->log_fd, (off64_t)f->hdr_len) != 0)
            die("cannot truncate %s: %s", f->log_path, strerror(errno));
        f->log_end = f->hdr_len;
        f->rec_n = 0;
        f->rec_base = mark;
        return;
    }
    uint64_t live_off = f->rec_off[mark - f->rec_base];
    uint64_t dead = live_off - f->hdr_len;
    if (dead >= COMPACT_MIN && dead >= (f->log_end - f->hdr_len) / 2)
        compact(f, live_off);
}

/* ---- which files are affected ---- */

static bool under_dir(const char *path)
{
    size_t n = strlen(g.dir);
    if (n == 1)
        return path[0] == '/'; /* FAULTFS_DIR=/ */
    return strncmp(path, g.dir, n) == 0 && path[n] == '/';
}

static bool is_shm(const char *path)
{
    size_t n = strlen(path);
    return n >= 4 && strcmp(path + n - 4, "-shm") == 0;
}

/* Under g.mu. */
static struct file *find_or_attach(const struct stat *st, const char *path,
                                   int fd)
{
    for (struct file *f = g.files; f != NULL; f = f->next)
        if (f->dev == st->st_dev && f->ino == st->st_ino)
            return f;
    struct file *f = calloc(1, sizeof(*f));
    if (f == NULL)
        die("out of memory");
    f->dev = st->st_dev;
    f->ino = st->st_ino;
    pthread_mutex_init(&f->mu, NULL);
    f->rd_fd = -1;
    f->log_fd = -1;
    snprintf(f->path, sizeof(f->path), "%s", path);
    if (g.undo)
        log_open(f, fd);
    f->next = g.files;
    g.files = f;
    return f;
}

/* The affected file fd is open on, or NULL; *st gets fd's fstat. */
static struct file *lookup(int fd, struct stat *st)
{
    if (!g.active || fd < 0)
        return NULL;
    /* The cheap tests first: most calls are on sockets and pipes. */
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode) || st->st_nlink == 0)
        return NULL;
    lock(&g.mu);
    struct file *f = NULL;
    if (!g.dir_known) {
        struct stat dst;
        if (realpath(g.dir_env, g.dir) != NULL && stat(g.dir, &dst) == 0) {
            g.dir_dev = dst.st_dev;
            g.dir_known = true;
        }
    }
    if (!g.dir_known || st->st_dev != g.dir_dev)
        goto out;
    struct fd_slot *slot = fd < FD_SLOTS ? &g.fds[fd] : NULL;
    if (slot != NULL && slot->valid && slot->dev == st->st_dev &&
        slot->ino == st->st_ino) {
        f = slot->file;
        goto out;
    }
    char proc[64], path[PATH_MAX];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(proc, path, sizeof(path) - 1);
    if (n <= 0)
        goto out;
    path[n] = '\0';
    if (under_dir(path) && !is_shm(path))
        f = find_or_attach(st, path, fd);
    if (slot != NULL)
        *slot = (struct fd_slot){true, st->st_dev, st->st_ino, f};
out:
    unlock(&g.mu);
    return f;
}

/* ---- the control file ---- */

static void parse_ctl(const char *text, struct faults *out)
{
    *out = (struct faults){0};
    char *copy = strdup(text), *save_line;
    if (copy == NULL)
        die("out of memory");
    for (char *line = strtok_r(copy, "\n", &save_line); line != NULL;
         line = strtok_r(NULL, "\n", &save_line)) {
        line[strcspn(line, "#")] = '\0';
        char *save, *key = strtok_r(line, " \t\r", &save);
        char *arg = key ? strtok_r(NULL, " \t\r", &save) : NULL;
        char *end;
        if (key == NULL)
            continue;
        if (strcmp(key, "fsync_eio") == 0) {
            out->fsync_eio = true;
        } else if (strcmp(key, "write_eio") == 0) {
            out->write_eio = true;
        } else if (strcmp(key, "write_enospc") == 0) {
            out->write_enospc = true;
        } else if (strcmp(key, "fsync_delay_ms") == 0 && arg != NULL) {
            unsigned long ms = strtoul(arg, &end, 10);
            if (*end == '\0' && arg[0] != '-' && ms <= 3600000)
                out->fsync_delay_ms = (unsigned)ms;
        } else if (strcmp(key, "kill_in_fsync") == 0 && arg != NULL) {
            double p = strtod(arg, &end);
            if (*end == '\0' && p > 0 && p <= 1)
                out->kill_in_fsync = p;
        }
    }
    free(copy);
}

/* The faults in force now. */
static struct faults faults_now(void)
{
    struct faults none = {0};
    if (g.ctl[0] == '\0')
        return none;
    struct stat st;
    bool exists = stat(g.ctl, &st) == 0;
    lock(&g.mu);
    if (!exists) {
        g.ctl_known = false;
        g.faults = none;
    } else if (!g.ctl_known || st.st_ino != g.ctl_st.st_ino ||
               st.st_dev != g.ctl_st.st_dev ||
               st.st_size != g.ctl_st.st_size ||
               st.st_mtim.tv_sec != g.ctl_st.st_mtim.tv_sec ||
               st.st_mtim.tv_nsec != g.ctl_st.st_mtim.tv_nsec) {
        static char text[CTL_MAX];
        int fd = open(g.ctl, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, text, sizeof(text) - 1) : -1;
        if (fd >= 0)
            close(fd);
        text[n > 0 ? n : 0] = '\0';
        parse_ctl(text, &g.faults);
        g.ctl_st = st;
        g.ctl_known = true;
    }
    struct faults now = g.faults;
    unlock(&g.mu);
    return now;
}

/* True with probability p; seeded from the pid and the time, again in a
 * forked child. */
static bool chance(double p)
{
    lock(&g.mu);
    if (g.rng_pid != getpid()) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        g.rng_pid = getpid();
        g.rng = ((uint64_t)g.rng_pid << 32) ^ (uint64_t)ts.tv_sec ^
                ((uint64_t)ts.tv_nsec << 20) ^ UINT64_C(0x9e3779b97f4a7c15);
    }
    /* xorshift64* */
    g.rng ^= g.rng >> 12;
    g.rng ^= g.rng << 25;
    g.rng ^= g.rng >> 27;
    uint64_t x = g.rng * UINT64_C(0x2545f4914f6cdd1d);
    unlock(&g.mu);
    return (double)(x >> 11) * 0x1.0p-53 < p;
}

/* ---- writes ---- */

enum change {
    WRITE_HERE, /* write(): at the file position, or the end if O_APPEND */
    WRITE_AT,   /* pwrite() */
    TRUNCATE,
};

/* Before a write or ftruncate of fd. NULL: fd is not affected, call
 * through. Otherwise either *err is the errno to fail with, or the undo
 * record is made and f->mu is held: make the real call, then unlock. */
static struct file *begin(int fd, enum change kind, int64_t off, size_t n,
                          int *err)
{
    *err = 0;
    struct stat st;
    struct file *f = off < 0 ? NULL : lookup(fd, &st);
    if (f == NULL)
        return NULL;
    struct faults c = faults_now();
    int fl = fcntl(fd, F_GETFL);
    lock(&f->mu);
    if (fl < 0 || fstat(fd, &st) != 0) {
        unlock(&f->mu);
        return NULL; /* the real call will say what is wrong */
    }
    uint64_t size = (uint64_t)st.st_size, start, len;
    bool grows;
    if (kind == TRUNCATE) {
        grows = (uint64_t)off > size;
        start = grows ? size : (uint64_t)off;
        len = grows ? 0 : size - (uint64_t)off;
    } else {
        if (kind == WRITE_HERE)
            off = (fl & O_APPEND) ? (int64_t)size : lseek(fd, 0, SEEK_CUR);
        if (off < 0) {
            unlock(&f->mu);
            return NULL;
        }
        start = (uint64_t)off;
        len = n;
        grows = start + len > size;
    }
    if ((kind != TRUNCATE && n > 0 && c.write_eio) ||
        (grows && (c.write_eio || c.write_enospc))) {
        unlock(&f->mu);
        *err = c.write_eio ? EIO : ENOSPC;
        return f;
    }
    if (kind == TRUNCATE || n > 0)
        record(f, fd, fl, start, len, size);
    return f;
}

ssize_t write(int fd, const void *buf, size_t n)
{
    start();
    int err;
    struct file *f = begin(fd, WRITE_HERE, 0, n, &err);
    if (f == NULL)
        return real_write(fd, buf, n);
    if (err != 0) {
        errno = err;
        return -1;
    }
    ssize_t r = real_write(fd, buf, n);
    unlock(&f->mu);
    return r;
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    start();
    int err;
    struct file *f = begin(fd, WRITE_AT, off, n, &err);
    if (f == NULL)
        return real_pwrite(fd, buf, n, off);
    if (err != 0) {
        errno = err;
        return -1;
    }
    ssize_t r = real_pwrite(fd, buf, n, off);
    unlock(&f->mu);
    return r;
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off)
{
    start();
    int err;
    struct file *f = begin(fd, WRITE_AT, off, n, &err);
    if (f == NULL)
        return real_pwrite64(fd, buf, n, off);
    if (err != 0) {
        errno = err;
        return -1;
    }
    ssize_t r = real_pwrite64(fd, buf, n, off);
    unlock(&f->mu);
    return r;
}

int ftruncate(int fd, off_t len)
{
    start();
    int err;
    struct file *f = begin(fd, TRUNCATE, len, 0, &err);
    if (f == NULL)
        return real_ftruncate(fd, len);
    if (err != 0) {
        errno = err;
        return -1;
    }
    int r = real_ftruncate(fd, len);
    unlock(&f->mu);
    return r;
}

int ftruncate64(int fd, off64_t len)
{
    start();
    int err;
    struct file *f = begin(fd, TRUNCATE, len, 0, &err);
    if (f == NULL)
        return real_ftruncate64(fd, len);
    if (err != 0) {
        errno = err;
        return -1;
    }
    int r = real_ftruncate64(fd, len);
    unlock(&f->mu);
    return r;
}

/* ---- syncs ---- */

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int sync_file(int fd, int (*real)(int))
{
    struct stat st;
    struct file *f = lookup(fd, &st);
    if (f == NULL)
        return real(fd);
    struct faults c = faults_now();
    if (c.kill_in_fsync > 0 && chance(c.kill_in_fsync))
        raise(SIGKILL);
    lock(&f->mu);
    uint64_t mark = f->next_seq; /* invariant 2 */
    unlock(&f->mu);
    if (c.fsync_delay_ms > 0)
        sleep_ms(c.fsync_delay_ms);
    if (c.fsync_eio) {
        errno = EIO;
        return -1;
    }
    int rc = real(fd);
    if (rc == 0) {
        lock(&f->mu);
        synced(f, mark);
        unlock(&f->mu);
    }
    return rc;
}

int fsync(int fd)
{
    start();
    return sync_file(fd, real_fsync);
}

int fdatasync(int fd)
{
    start();
    return sync_file(fd, real_fdatasync);
}

/* ---- unlink (invariant 5) ---- */

static void forget(dev_t dev, ino_t ino)
{
    lock(&g.mu);
    for (struct file **p = &g.files; *p != NULL; p = &(*p)->next) {
        struct file *f = *p;
        if (f->dev != dev || f->ino != ino)
            continue;
        *p = f->next;
        f->next = g.gone;
        g.gone = f;
        for (int i = 0; i < FD_SLOTS; i++)
            if (g.fds[i].file == f)
                g.fds[i].valid = false;
        lock(&f->mu);
        f->dead = true;
        if (f->log_fd >= 0)
            close(f->log_fd);
        if (f->rd_fd >= 0)
            close(f->rd_fd);
        f->log_fd = f->rd_fd = -1;
        unlock(&f->mu);
        break;
    }
    /* Also the log of a file this process never wrote (a killed one's). */
    char log[PATH_MAX];
    log_name(log, dev, ino);
    real_unlink(log);
    unlock(&g.mu);
}

int unlink(const char *path)
{
    start();
    struct stat st;
    bool last = g.active && g.undo && lstat(path, &st) == 0 &&
                S_ISREG(st.st_mode) && st.st_nlink == 1;
    int rc = real_unlink(path);
    if (rc == 0 && last)
        forget(st.st_dev, st.st_ino);
    return rc;
}

int unlinkat(int dirfd, const char *path, int flags)
{
    start();
    struct stat st;
    bool last = g.active && g.undo && !(flags & AT_REMOVEDIR) &&
                fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                S_ISREG(st.st_mode) && st.st_nlink == 1;
    int rc = real_unlinkat(dirfd, path, flags);
    if (rc == 0 && last)
        forget(st.st_dev, st.st_ino);
    return rc;
}
