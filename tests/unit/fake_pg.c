/* The fake database: see fake_pg.h. */
#include "fake_pg.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine.h"
#include "fake_gate.h"
#include "postgres.h"

/* A row as stored, strings kept in place. */
struct row {
    char session[ENGINE_SESSION_MAX + 1];
    char owner[ENGINE_OWNER_MAX + 1];
    size_t session_len, owner_len;
    uint64_t token;
    int64_t expiry_ns;
};

enum batch_state {
    UNFLUSHED, /* sent while the socket was full */
    WAITING,   /* at the database, for the test to answer it */
    DECIDED,   /* its answer waits to be read */
};

struct batch {
    struct pgstore_call *calls; /* the mode's, borrowed */
    size_t n;
    enum batch_state state;
    int err;
    int64_t db_now_ns;
};

struct conn {
    bool made, closed;
    bool connected, broken, full;
    int fds[2]; /* [0] the mode's end, [1] the fake's; -1 when none */
    struct batch pipe[PGSTORE_PIPELINE_MAX];
    size_t first, npipe;
    unsigned fail_batches;
    bool in_job;  /* a blocking call runs on it */
    bool on_loop; /* the loop used it since the last blocking call */
    char errmsg[256];
    char history[FAKE_PG_HISTORY + 1];
    size_t nhistory;
    size_t *sent;
    size_t nsent, cap_sent;
    struct row scratch; /* what get and revoke return */
};

struct record {
    struct fake_pg_decision d;
    bool claimed;
};

_Static_assert(FAKE_PG_NCALLS <= FAKE_GATE_KINDS, "a gate for each call");

struct fake_pg {
    struct fake_gates gates; /* and the lock that guards it all */
    int64_t ttl_ns, now_ns;
    bool hold_batches;

    struct conn conns[FAKE_PG_MAX_CONNS];
    size_t nconns, nclosed;
    unsigned misuses;
    char misuse[256];

    struct row *rows;
    size_t nrows, cap_rows;
    uint64_t floor;
    uint64_t commits;
    struct record *records;
    size_t nrecords, cap_records;
};

struct pgstore {
    struct fake_pg *f;
    size_t index;
};

/* Appends one element of size bytes to *arr (n elements, room for *cap);
 * a test cannot go on without it, so out of memory aborts. */
static void *append(void *arr_p, size_t *n, size_t *cap, size_t size)
{
    void **arr = arr_p;
    if (*n == *cap) {
        size_t c = *cap > 0 ? *cap * 2 : 64;
        void *p = realloc(*arr, c * size);
        if (p == NULL)
            abort();
        *arr = p;
        *cap = c;
    }
    return (char *)*arr + (*n)++ * size;
}

/* A breach of postgres.h's rules (lock held). */
static void misuse(struct fake_pg *f, const char *what, size_t conn)
{
    if (f->misuses++ == 0)
        snprintf(f->misuse, sizeof(f->misuse), "connection %zu: %s", conn,
                 what);
    fprintf(stderr, "fake_pg: connection %zu: %s\n", conn, what);
}

static void note(struct conn *c, char letter)
{
    if (c->nhistory < FAKE_PG_HISTORY)
        c->history[c->nhistory++] = letter;
    c->history[c->nhistory] = '\0';
}

static struct conn *conn_of(const struct pgstore *p)
{
    return &p->f->conns[p->index];
}

static struct conn *conn_at(struct fake_pg *f, size_t i)
{
    if (i >= f->nconns)
        abort(); /* the test's mistake */
    return &f->conns[i];
}

/* --- The socket -------------------------------------------------------- */

static void drain_fd(int fd)
{
    char buf[4096];
    while (fd >= 0 && read(fd, buf, sizeof(buf)) > 0)
        ;
}

/* Makes the mode's end readable. */
static void poke(struct conn *c)
{
    if (c->fds[1] >= 0 && write(c->fds[1], "!", 1) < 0 && errno != EAGAIN)
        abort();
}

/* Fills the mode's end until it is not writable, or empties it. */
static void fill(struct conn *c, bool full)
{
    if (c->fds[0] < 0)
        return;
    if (!full) {
        drain_fd(c->fds[1]);
        return;
    }
    char junk[4096] = {0};
    while (write(c->fds[0], junk, sizeof(junk)) > 0)
        ;
}

static void close_fds(struct conn *c)
{
    for (int i = 0; i < 2; i++) {
        if (c->fds[i] >= 0)
            close(c->fds[i]);
        c->fds[i] = -1;
    }
}

static bool open_fds(struct conn *c)
{
    close_fds(c);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
                   c->fds) != 0) {
        c->fds[0] = c->fds[1] = -1;
        return false;
    }
    if (c->full)
        fill(c, true);
    return true;
}

/* --- Rows and the rules -------------------------------------------------- */

static bool same(const char *a, size_t alen, const char *b, size_t blen)
{
    return alen == blen && (alen == 0 || memcmp(a, b, alen) == 0);
}

static struct row *find(struct fake_pg *f, const char *session, size_t len)
{
    for (size_t i = 0; i < f->nrows; i++)
        if (same(f->rows[i].session, f->rows[i].session_len, session, len))
            return &f->rows[i];
    return NULL;
}

/* The row the rules see for r (NULL: none, with no token floor). */
static const struct rules_row *rules_of(const struct fake_pg *f,
                                        const struct row *r,
                                        struct rules_row *out)
{
    if (r != NULL)
        *out = (struct rules_row){r->owner, r->owner_len, r->token,
                                  r->expiry_ns, false};
    else if (f->floor > 0)
        *out = (struct rules_row){NULL, 0, f->floor, 0, false};
    else
        return NULL;
    return out;
}

static void copy_cut(char *dst, size_t size, const char *src, size_t len)
{
    if (len >= size)
        len = size - 1;
    if (len > 0)
        memcpy(dst, src, len);
    dst[len] = '\0';
}

static void record(struct fake_pg *f, size_t conn, enum rules_op op,
                   const char *session, size_t session_len,
                   const char *owner, size_t owner_len, uint64_t token,
                   int code, uint64_t granted, int64_t expiry_ns,
                   unsigned flags)
{
    struct record *r = append(&f->records, &f->nrecords, &f->cap_records,
                              sizeof(*r));
    *r = (struct record){.d = {.op = op,
                               .token = token,
                               .code = code,
                               .granted = granted,
                               .expiry_ns = expiry_ns,
                               .flags = flags,
                               .commit = f->commits,
                               .conn = conn}};
    copy_cut(r->d.session, sizeof(r->d.session), session, session_len);
    copy_cut(r->d.owner, sizeof(r->d.owner), owner, owner_len);
}

/* Stores after as session's row (owner copied first: it may be the
 * row's own). */
static void store(struct fake_pg *f, struct row *at, const char *session,
                  size_t session_len, const struct rules_row *after)
{
    char owner[ENGINE_OWNER_MAX + 1];
    size_t owner_len = after->owner_len;
    if (owner_len > ENGINE_OWNER_MAX)
        abort();
    if (owner_len > 0)
        memcpy(owner, after->owner, owner_len);
    if (at == NULL) {
        if (session_len > ENGINE_SESSION_MAX)
            abort();
        at = append(&f->rows, &f->nrows, &f->cap_rows, sizeof(*at));
        memcpy(at->session, session, session_len);
        at->session[session_len] = '\0';
        at->session_len = session_len;
    }
    if (owner_len > 0)
        memcpy(at->owner, owner, owner_len);
    at->owner[owner_len] = '\0';
    at->owner_len = owner_len;
    at->token = after->token;
    at->expiry_ns = after->expiry_ns;
}

/* Decides call c of a committing batch on connection conn, and applies
 * it (lock held). */
static void decide_call(struct fake_pg *f, size_t conn, struct pgstore_call *c)
{
    struct row *at = find(f, c->session, c->session_len);
    struct rules_row before;
    const struct rules_row *row = rules_of(f, at, &before);
    bool held = at != NULL && at->owner_len > 0;
    bool live = rules_live(row, f->now_ns);
    struct rules_request req = {c->owner, c->owner_len, c->token};
    struct rules_outcome out;
    c->code = rules_decide(c->op, row, &req, f->now_ns, f->ttl_ns, &out);
    c->granted = 0;
    c->expiry_ns = 0;
    c->flags = 0;
    if (c->code == RULES_OK) {
        if (out.takeover)
            c->flags |= RULES_TAKEOVER | (held && !live ? RULES_EXPIRED : 0);
        if (c->op == RULES_RENEW && !live)
            c->flags |= RULES_RECLAIM;
        c->granted = out.after.token;
        c->expiry_ns = out.after.expiry_ns;
        store(f, at, c->session, c->session_len, &out.after);
    }
    record(f, conn, c->op, c->session, c->session_len, c->owner,
           c->owner_len, c->token, c->code, c->granted, c->expiry_ns,
           c->flags);
}

/* The oldest batch waiting on conn reaches its end: committed, or failed
 * (lock held). */
static void decide(struct fake_pg *f, size_t i, struct batch *b)
{
    struct conn *c = &f->conns[i];
    if (c->fail_batches > 0) {
        c->fail_batches--;
        b->err = STORE_EFAIL;
        snprintf(c->errmsg, sizeof(c->errmsg),
                 "deciding: injected failure (nothing applied)");
        note(c, 'F');
    } else {
        f->commits++;
        for (size_t k = 0; k < b->n; k++)
            decide_call(f, i, &b->calls[k]);
        b->err = STORE_OK;
        note(c, 'B');
    }
    b->db_now_ns = f->now_ns;
    b->state = DECIDED;
    poke(c);
}

static struct batch *at_pipe(struct conn *c, size_t k)
{
    return &c->pipe[(c->first + k) % PGSTORE_PIPELINE_MAX];
}

/* Decides up to n batches waiting on conn i, in order (lock held). */
static size_t answer(struct fake_pg *f, size_t i, size_t n)
{
    struct conn *c = &f->conns[i];
    size_t done = 0;
    for (size_t k = 0; k < c->npipe && done < n; k++) {
        struct batch *b = at_pipe(c, k);
        if (b->state == UNFLUSHED)
            break;
        if (b->state == WAITING) {
            decide(f, i, b);
            done++;
        }
    }
    if (done > 0)
        fake_gate_notify(&f->gates);
    return done;
}

/* What was sent reaches the database (lock held). */
static void flushed(struct fake_pg *f, size_t i)
{
    struct conn *c = &f->conns[i];
    for (size_t k = 0; k < c->npipe; k++)
        if (at_pipe(c, k)->state == UNFLUSHED)
            at_pipe(c, k)->state = WAITING;
    if (!f->hold_batches)
        answer(f, i, SIZE_MAX);
}

/* --- postgres.h: the pipeline, on the loop ------------------------------ */

/* A pipeline call on p enters (lock taken): the loop has it. */
static struct conn *loop_enter(const struct pgstore *p, const char *what)
{
    struct fake_pg *f = p->f;
    pthread_mutex_lock(&f->gates.mu);
    struct conn *c = conn_of(p);
    if (c->in_job)
        misuse(f, what, p->index);
    c->on_loop = true;
    return c;
}

static int down(struct conn *c, const char *what)
{
    snprintf(c->errmsg, sizeof(c->errmsg), "%s: %s", what,
             c->connected ? "server closed the connection unexpectedly"
                          : "not connected");
    return STORE_EDOWN;
}

enum store_err pgstore_send(struct pgstore *p, struct pgstore_call *calls,
                            size_t n)
{
    struct fake_pg *f = p->f;
    struct conn *c = loop_enter(p, "pgstore_send during a blocking call");
    int rc = STORE_OK;
    if (n == 0 || c->npipe >= PGSTORE_PIPELINE_MAX) {
        misuse(f, "pgstore_send: n is 0, or the pipeline is full",
               p->index);
        rc = STORE_EFAIL;
    } else if (!c->connected || c->broken) {
        rc = down(c, "deciding");
    } else {
        *(size_t *)append(&c->sent, &c->nsent, &c->cap_sent,
                          sizeof(size_t)) = n;
        *at_pipe(c, c->npipe++) = (struct batch){calls, n, UNFLUSHED, 0, 0};
        if (!c->full)
            flushed(f, p->index);
    }
    pthread_mutex_unlock(&f->gates.mu);
    return rc;
}

int pgstore_flush(struct pgstore *p)
{
    struct fake_pg *f = p->f;
    struct conn *c = loop_enter(p, "pgstore_flush during a blocking call");
    int rc = 0;
    if (!c->connected || c->broken)
        rc = down(c, "deciding");
    else if (c->full)
        rc = 1;
    else
        flushed(f, p->index);
    pthread_mutex_unlock(&f->gates.mu);
    return rc;
}

int pgstore_read(struct pgstore *p)
{
    struct fake_pg *f = p->f;
    struct conn *c = loop_enter(p, "pgstore_read during a blocking call");
    int rc = STORE_OK;
    if (!c->connected || c->broken)
        rc = down(c, "deciding");
    else
        drain_fd(c->fds[0]);
    pthread_mutex_unlock(&f->gates.mu);
    return rc;
}

int pgstore_done(struct pgstore *p, struct pgstore_call **calls, int *err,
                 int64_t *db_now_ns)
{
    struct fake_pg *f = p->f;
    struct conn *c = loop_enter(p, "pgstore_done during a blocking call");
    int rc = 0;
    if (c->npipe == 0) {
        rc = 0;
    } else if (!c->connected || c->broken) {
        rc = down(c, "deciding");
    } else if (at_pipe(c, 0)->state == DECIDED) {
        struct batch *b = at_pipe(c, 0);
        *calls = b->calls;
        *err = b->err;
        *db_now_ns = b->db_now_ns;
        c->first = (c->first + 1) % PGSTORE_PIPELINE_MAX;
        c->npipe--;
        rc = 1;
    }
    pthread_mutex_unlock(&f->gates.mu);
    return rc;
}

int pgstore_socket(const struct pgstore *p)
{
    struct fake_pg *f = p->f;
    struct conn *c = loop_enter(p, "pgstore_socket during a blocking call");
    int fd = c->connected ? c->fds[0] : -1;
    pthread_mutex_unlock(&f->gates.mu);
    return fd;
}

void pgstore_disconnect(struct pgstore *p)
{
    struct fake_pg *f = p->f;
    struct conn *c =
        loop_enter(p, "pgstore_disconnect during a blocking call");
    close_fds(c);
    c->connected = c->broken = false;
    c->npipe = 0; /* dropped: never committed */
    note(c, '|');
    fake_gate_notify(&f->gates);
    pthread_mutex_unlock(&f->gates.mu);
}

uint64_t pgstore_warnings(struct pgstore *p, char *msg, size_t len)
{
    struct fake_pg *f = p->f;
    loop_enter(p, "pgstore_warnings during a blocking call");
    pthread_mutex_unlock(&f->gates.mu);
    return 0;
}

/* The lines of Waits are not faked: the mode under test has no
 * listening connection, so it never sends a step of one. */
void pgstore_set_listener(struct pgstore *p, int32_t key, int32_t pid)
{
    if (key != 0 || pid != 0) {
        pthread_mutex_lock(&p->f->gates.mu);
        misuse(p->f, "a listening connection (not faked)", 0);
        pthread_mutex_unlock(&p->f->gates.mu);
    }
}

enum store_err pgstore_listen(struct pgstore *p, int32_t *key, int32_t *pid)
{
    abort(); /* not faked (above) */
}

int pgstore_notified(struct pgstore *p,
                     void (*granted)(void *arg, uint64_t call, uint64_t token,
                                     int64_t expiry_ns, unsigned flags),
                     void *arg, bool *events)
{
    abort(); /* not faked (above) */
}

/* Nor are the events, which only the listening connection reads. */
enum store_err pgstore_events(struct pgstore *p, uint64_t after, size_t max,
                              int (*ev_cb)(void *arg,
                                           const struct store_event *ev),
                              void *arg, uint64_t *top)
{
    abort();
}

enum store_err pgstore_tell(struct pgstore *p, size_t max)
{
    abort();
}

enum store_err pgstore_compact(struct pgstore *p, uint64_t keep)
{
    abort();
}

const char *pgstore_errmsg(const struct pgstore *p)
{
    /* Read by the thread that has the connection, which set it. */
    return conn_of(p)->errmsg;
}

/* --- postgres.h: the blocking calls, on a worker ------------------------- */

/* A blocking call of kind k on p enters (lock taken): waits at the gate
 * while it is held, and returns the error it is to end with. */
static int job_enter(struct pgstore *p, enum fake_pg_call k)
{
    struct fake_pg *f = p->f;
    pthread_mutex_lock(&f->gates.mu);
    struct conn *c = conn_of(p);
    if (c->in_job)
        misuse(f, "two blocking calls at once", p->index);
    if (c->npipe > 0 && k != FAKE_PG_CONNECT)
        misuse(f, "a blocking call while a batch is in flight", p->index);
    c->in_job = true;
    c->on_loop = false;
    int err = fake_gate_enter(&f->gates, k);
    if (err != STORE_OK)
        snprintf(c->errmsg, sizeof(c->errmsg), "injected failure %d", err);
    else if (k != FAKE_PG_CONNECT && (!c->connected || c->broken))
        err = down(c, "a blocking call");
    return err;
}

static void job_leave(struct pgstore *p, enum fake_pg_call k, int err,
                      char letter)
{
    struct fake_pg *f = p->f;
    struct conn *c = conn_of(p);
    note(c, err == STORE_OK ? letter : k == FAKE_PG_CONNECT ? 'n' : 'x');
    c->in_job = false;
    fake_gate_leave(&f->gates, k);
    pthread_mutex_unlock(&f->gates.mu);
}

enum store_err pgstore_connect(struct pgstore *p,
                               struct pgstore_primary *primary)
{
    int err = job_enter(p, FAKE_PG_CONNECT);
    struct conn *c = conn_of(p);
    c->npipe = 0;
    c->connected = c->broken = false;
    close_fds(c);
    if (err == STORE_OK && !open_fds(c)) {
        snprintf(c->errmsg, sizeof(c->errmsg), "socketpair: %s",
                 strerror(errno));
        err = STORE_EDOWN;
    }
    c->connected = err == STORE_OK;
    if (primary != NULL)
        *primary = (struct pgstore_primary){false, 1, 0};
    job_leave(p, FAKE_PG_CONNECT, err, 'N');
    return err;
}

static void to_lease_row(const struct row *r, struct lease_row *out)
{
    *out = (struct lease_row){r->session, r->session_len, r->owner,
                              r->owner_len, r->token, r->expiry_ns};
}

enum store_err pgstore_get(struct pgstore *p, const char *session,
                           size_t session_len, struct lease_row *row,
                           bool *live, bool *found)
{
    struct fake_pg *f = p->f;
    int err = job_enter(p, FAKE_PG_GET);
    if (err == STORE_OK) {
        struct row *at = find(f, session, session_len);
        *found = at != NULL && at->owner_len > 0;
        if (*found) {
            struct conn *c = conn_of(p);
            c->scratch = *at;
            to_lease_row(&c->scratch, row);
            struct rules_row rr;
            *live = rules_live(rules_of(f, at, &rr), f->now_ns);
        }
    }
    job_leave(p, FAKE_PG_GET, err, 'G');
    return err;
}

static int bytewise(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c != 0 ? c : alen < blen ? -1 : alen > blen;
}

static int by_session(const void *a, const void *b)
{
    const struct row *x = a, *y = b;
    return bytewise(x->session, x->session_len, y->session, y->session_len);
}

enum store_err
pgstore_list(struct pgstore *p, const char *prefix, size_t prefix_len,
             const char *after, size_t after_len, size_t limit,
             int (*row_cb)(void *arg, const struct lease_row *row, bool live),
             void *arg)
{
    struct fake_pg *f = p->f;
    int err = job_enter(p, FAKE_PG_LIST);
    struct row *sorted = NULL;
    if (err == STORE_OK && f->nrows > 0) {
        sorted = malloc(f->nrows * sizeof(*sorted));
        if (sorted == NULL)
            abort();
        memcpy(sorted, f->rows, f->nrows * sizeof(*sorted));
        qsort(sorted, f->nrows, sizeof(*sorted), by_session);
    }
    for (size_t i = 0, n = 0; err == STORE_OK && sorted != NULL &&
                              i < f->nrows && n < limit;
         i++) {
        const struct row *r = &sorted[i];
        if (r->owner_len == 0 || r->session_len < prefix_len ||
            memcmp(r->session, prefix, prefix_len) != 0 ||
            bytewise(r->session, r->session_len, after, after_len) <= 0)
            continue;
        struct lease_row l;
        to_lease_row(r, &l);
        struct rules_row rr;
        err = row_cb(arg, &l, rules_live(rules_of(f, r, &rr), f->now_ns));
        n++;
    }
    free(sorted);
    err = err < 0 ? err : STORE_OK; /* 1: row_cb stopped the list */
    job_leave(p, FAKE_PG_LIST, err, 'L');
    return err;
}

enum store_err pgstore_revoke(struct pgstore *p, const char *session,
                              size_t session_len, uint64_t token,
                              struct lease_row *row, bool *found, bool *revoked)
{
    struct fake_pg *f = p->f;
    int err = job_enter(p, FAKE_PG_REVOKE);
    if (err == STORE_OK) {
        struct row *at = find(f, session, session_len);
        struct rules_row before;
        struct rules_request req = {NULL, 0, token};
        struct rules_outcome out;
        int code = rules_decide(RULES_REVOKE, rules_of(f, at, &before),
                                &req, f->now_ns, f->ttl_ns, &out);
        *found = code != RULES_NOOP;
        *revoked = code == RULES_OK;
        if (*found) {
            struct conn *c = conn_of(p);
            c->scratch = *at; /* as it was */
            to_lease_row(&c->scratch, row);
        }
        if (code == RULES_OK) {
            f->commits++;
            store(f, at, session, session_len, &out.after);
        }
        if (code == RULES_OK)
            record(f, p->index, RULES_REVOKE, session, session_len, "", 0,
                   token, code, out.after.token, out.after.expiry_ns, 0);
    }
    job_leave(p, FAKE_PG_REVOKE, err, 'R');
    return err;
}

enum store_err pgstore_stats(struct pgstore *p, struct pgstore_stats *st)
{
    struct fake_pg *f = p->f;
    int err = job_enter(p, FAKE_PG_STATS);
    if (err == STORE_OK) {
        *st = (struct pgstore_stats){.entries = f->nrows,
                                     .high_water = f->floor};
        for (size_t i = 0; i < f->nrows; i++) {
            struct rules_row rr;
            st->live += rules_live(rules_of(f, &f->rows[i], &rr), f->now_ns);
            if (f->rows[i].token > st->high_water)
                st->high_water = f->rows[i].token;
        }
    }
    job_leave(p, FAKE_PG_STATS, err, 'S');
    return err;
}

enum store_err pgstore_collect(struct pgstore *p, size_t max, size_t *collected,
                               size_t *expired)
{
    struct fake_pg *f = p->f;
    int err = job_enter(p, FAKE_PG_COLLECT);
    *collected = *expired = 0;
    for (size_t i = 0; err == STORE_OK && i < f->nrows &&
                       *collected < max;) {
        struct row *r = &f->rows[i];
        struct rules_row rr;
        if (rules_live(rules_of(f, r, &rr), f->now_ns) ||
            r->expiry_ns > f->now_ns - f->ttl_ns) {
            i++;
            continue;
        }
        ++*collected;
        *expired += r->owner_len > 0;
        if (r->token > f->floor)
            f->floor = r->token;
        *r = f->rows[--f->nrows];
    }
    job_leave(p, FAKE_PG_COLLECT, err, 'C');
    return err;
}

void pgstore_close(struct pgstore *p)
{
    if (p == NULL)
        return;
    struct fake_pg *f = p->f;
    pthread_mutex_lock(&f->gates.mu);
    struct conn *c = conn_of(p);
    if (c->in_job || c->npipe > 0)
        misuse(f, "closed while in use", p->index);
    close_fds(c);
    c->connected = false;
    c->closed = true;
    f->nclosed++;
    fake_gate_notify(&f->gates);
    pthread_mutex_unlock(&f->gates.mu);
    free(p);
}

/* The daemon's ways in; tests use fake_pg_open(). */
enum store_err pgstore_open(const struct pgstore_options *o,
                            struct pgstore **out, char *errmsg, size_t len)
{
    snprintf(errmsg, len, "the fake database opens with fake_pg_open()");
    *out = NULL;
    return STORE_ECONFIG;
}

enum store_err pgstore_import(struct pgstore *p, const struct lease_row *rows,
                              size_t n, uint64_t floor, int64_t quarantine_ns)
{
    return STORE_ECONFIG;
}

enum store_err pgstore_raise_tokens(struct pgstore *p, uint64_t floor,
                                    size_t *raised)
{
    return STORE_ECONFIG;
}

/* --- The test's side ------------------------------------------------------ */

struct fake_pg *fake_pg_create(int64_t ttl_ns, void (*changed)(void *arg),
                               void *arg)
{
    struct fake_pg *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return NULL;
    fake_gate_init(&f->gates, FAKE_PG_GATE_MS, changed, arg);
    f->ttl_ns = ttl_ns;
    f->now_ns = INT64_C(1000000000000);
    for (size_t i = 0; i < FAKE_PG_MAX_CONNS; i++)
        f->conns[i].fds[0] = f->conns[i].fds[1] = -1;
    return f;
}

void fake_pg_destroy(struct fake_pg *f)
{
    if (f == NULL)
        return;
    for (size_t i = 0; i < f->nconns; i++) {
        close_fds(&f->conns[i]);
        free(f->conns[i].sent);
    }
    fake_gate_destroy(&f->gates);
    free(f->rows);
    free(f->records);
    free(f);
}

struct pgstore *fake_pg_open(struct fake_pg *f)
{
    struct pgstore *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    pthread_mutex_lock(&f->gates.mu);
    struct conn *c = f->nconns < FAKE_PG_MAX_CONNS ? &f->conns[f->nconns]
                                                   : NULL;
    if (c == NULL || !open_fds(c)) {
        pthread_mutex_unlock(&f->gates.mu);
        free(p);
        return NULL;
    }
    p->f = f;
    p->index = f->nconns++;
    c->made = c->connected = c->on_loop = true;
    pthread_mutex_unlock(&f->gates.mu);
    return p;
}

size_t fake_pg_conns(struct fake_pg *f)
{
    pthread_mutex_lock(&f->gates.mu);
    size_t n = f->nconns;
    pthread_mutex_unlock(&f->gates.mu);
    return n;
}

size_t fake_pg_closed(struct fake_pg *f)
{
    pthread_mutex_lock(&f->gates.mu);
    size_t n = f->nclosed;
    pthread_mutex_unlock(&f->gates.mu);
    return n;
}

void fake_pg_set_now(struct fake_pg *f, int64_t now_ns)
{
    pthread_mutex_lock(&f->gates.mu);
    f->now_ns = now_ns;
    pthread_mutex_unlock(&f->gates.mu);
}

void fake_pg_hold_batches(struct fake_pg *f, bool hold)
{
    pthread_mutex_lock(&f->gates.mu);
    f->hold_batches = hold;
    for (size_t i = 0; !hold && i < f->nconns; i++)
        answer(f, i, SIZE_MAX);
    pthread_mutex_unlock(&f->gates.mu);
}

size_t fake_pg_answer(struct fake_pg *f, size_t conn, size_t n)
{
    pthread_mutex_lock(&f->gates.mu);
    conn_at(f, conn);
    size_t done = answer(f, conn, n);
    pthread_mutex_unlock(&f->gates.mu);
    return done;
}

static size_t count_state(struct fake_pg *f, size_t conn, int state)
{
    pthread_mutex_lock(&f->gates.mu);
    struct conn *c = conn_at(f, conn);
    size_t n = 0;
    for (size_t k = 0; k < c->npipe; k++)
        n += state < 0 || at_pipe(c, k)->state == (enum batch_state)state;
    pthread_mutex_unlock(&f->gates.mu);
    return n;
}

size_t fake_pg_waiting(struct fake_pg *f, size_t conn)
{
    return count_state(f, conn, WAITING);
}

size_t fake_pg_in_flight(struct fake_pg *f, size_t conn)
{
    return count_state(f, conn, -1);
}

size_t fake_pg_sent(struct fake_pg *f, size_t conn, size_t *sizes,
                    size_t max)
{
    pthread_mutex_lock(&f->gates.mu);
    struct conn *c = conn_at(f, conn);
    for (size_t i = 0; i < c->nsent && i < max; i++)
        sizes[i] = c->sent[i];
    size_t n = c->nsent;
    pthread_mutex_unlock(&f->gates.mu);
    return n;
}

void fake_pg_fail_batches(struct fake_pg *f, size_t conn, unsigned n)
{
    pthread_mutex_lock(&f->gates.mu);
    conn_at(f, conn)->fail_batches = n;
    pthread_mutex_unlock(&f->gates.mu);
}

void fake_pg_break(struct fake_pg *f, size_t conn)
{
    pthread_mutex_lock(&f->gates.mu);
    struct conn *c = conn_at(f, conn);
    if (c->connected && !c->broken) {
        c->broken = true;
        poke(c);
        fake_gate_notify(&f->gates);
    }
    pthread_mutex_unlock(&f->gates.mu);
}

void fake_pg_set_full(struct fake_pg *f, size_t conn, bool full)
{
    pthread_mutex_lock(&f->gates.mu);
    struct conn *c = conn_at(f, conn);
    if (c->full != full) {
        c->full = full;
        fill(c, full);
    }
    pthread_mutex_unlock(&f->gates.mu);
}

bool fake_pg_connected(struct fake_pg *f, size_t conn)
{
    pthread_mutex_lock(&f->gates.mu);
    bool yes = conn_at(f, conn)->connected;
    pthread_mutex_unlock(&f->gates.mu);
    return yes;
}

bool fake_pg_on_loop(struct fake_pg *f, size_t conn)
{
    pthread_mutex_lock(&f->gates.mu);
    bool yes = conn_at(f, conn)->on_loop;
    pthread_mutex_unlock(&f->gates.mu);
    return yes;
}

void fake_pg_hold(struct fake_pg *f, enum fake_pg_call c)
{
    fake_gate_hold(&f->gates, c);
}

void fake_pg_step(struct fake_pg *f, enum fake_pg_call c)
{
    fake_gate_step(&f->gates, c);
}

void fake_pg_release(struct fake_pg *f, enum fake_pg_call c)
{
    fake_gate_release(&f->gates, c);
}

void fake_pg_fail(struct fake_pg *f, enum fake_pg_call c, int err,
                  unsigned n)
{
    fake_gate_fail(&f->gates, c, err, n);
}

unsigned fake_pg_entered(struct fake_pg *f, enum fake_pg_call c)
{
    return fake_gate_read(&f->gates, &f->gates.gate[c].entered);
}

unsigned fake_pg_waiting_calls(struct fake_pg *f, enum fake_pg_call c)
{
    return fake_gate_read(&f->gates, &f->gates.gate[c].waiting);
}

unsigned fake_pg_returned(struct fake_pg *f, enum fake_pg_call c)
{
    return fake_gate_read(&f->gates, &f->gates.gate[c].returned);
}

unsigned fake_pg_timeouts(struct fake_pg *f)
{
    return fake_gate_read(&f->gates, &f->gates.timeouts);
}

unsigned fake_pg_misuses(struct fake_pg *f, char *why, size_t len)
{
    pthread_mutex_lock(&f->gates.mu);
    unsigned n = f->misuses;
    if (why != NULL && len > 0)
        snprintf(why, len, "%s", f->misuse);
    pthread_mutex_unlock(&f->gates.mu);
    return n;
}

size_t fake_pg_decisions(struct fake_pg *f, const char *session,
                         struct fake_pg_decision *d, size_t max)
{
    pthread_mutex_lock(&f->gates.mu);
    size_t n = 0;
    for (size_t i = 0; i < f->nrecords; i++) {
        if (strcmp(f->records[i].d.session, session) != 0)
            continue;
        if (n < max)
            d[n] = f->records[i].d;
        n++;
    }
    pthread_mutex_unlock(&f->gates.mu);
    return n;
}

bool fake_pg_claim(struct fake_pg *f, enum rules_op op, const char *session,
                   const char *owner, uint64_t token, int code,
                   uint64_t granted, int64_t expiry_ns)
{
    pthread_mutex_lock(&f->gates.mu);
    bool yes = false;
    for (size_t i = 0; i < f->nrecords && !yes; i++) {
        struct record *r = &f->records[i];
        if (r->claimed || r->d.op != op || r->d.code != code ||
            r->d.token != token || strcmp(r->d.session, session) != 0 ||
            strcmp(r->d.owner, owner) != 0 ||
            (code == RULES_OK &&
             (r->d.granted != granted || r->d.expiry_ns != expiry_ns)))
            continue;
        r->claimed = yes = true;
    }
    pthread_mutex_unlock(&f->gates.mu);
    return yes;
}

uint64_t fake_pg_commits(struct fake_pg *f)
{
    pthread_mutex_lock(&f->gates.mu);
    uint64_t n = f->commits;
    pthread_mutex_unlock(&f->gates.mu);
    return n;
}

void fake_pg_history(struct fake_pg *f, size_t conn, char *out, size_t len)
{
    pthread_mutex_lock(&f->gates.mu);
    snprintf(out, len, "%s", conn_at(f, conn)->history);
    pthread_mutex_unlock(&f->gates.mu);
}
