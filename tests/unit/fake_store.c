/* The fake store: see fake_store.h. */
#include "fake_store.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_gate.h"
#include "store.h"

/* A row as stored, strings kept in place (NUL-terminated as well). */
struct row {
    char session[ENGINE_SESSION_MAX + 1];
    char owner[ENGINE_OWNER_MAX + 1];
    size_t session_len, owner_len;
    uint64_t token;
    int64_t expiry_ns;
};

/* A committed ENGINE_PUT, the number of the commit that carried it, and
 * the index of the session's put before it (NO_PUT: none). */
struct put {
    struct row row;
    uint64_t commit;
    size_t prev;
};

#define NO_PUT SIZE_MAX

struct write {
    char key[64];
    struct fake_write w;
};

_Static_assert(FAKE_NCALLS <= FAKE_GATE_KINDS, "a gate for each call");

struct fake {
    struct fake_gates gates; /* and the lock that guards it all */
    pthread_t loop_thread;

    unsigned running; /* calls in progress, store_sync apart */
    unsigned overlaps;
    bool open, closed;
    char errmsg[256];

    struct row *rows;
    size_t nrows;
    uint64_t floor;
    uint64_t commits; /* numbered from 1 */
    uint64_t synced;  /* the last commit a sync covered */
    struct write meta[16];
    size_t nmeta;

    /* What happened, for the checks: grown as needed. */
    struct put *puts;
    size_t nputs, cap_puts;
    /* The last put of each session, by session: open addressing, slots
     * hold put indexes (NO_PUT: free), at most half full. */
    size_t *last;
    size_t nlast, cap_last;
    struct write *writes;
    size_t nwrites, cap_writes;
    size_t *applied;
    size_t napplied, cap_applied;
};

struct store {
    struct fake *f;
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

/* A call other than store_sync starts or ends (lock held). */
static void begin(struct fake *f)
{
    if (f->running++ > 0)
        f->overlaps++;
}

static void end(struct fake *f)
{
    f->running--;
}

static void set_row(struct row *r, const struct lease_row *l)
{
    memcpy(r->session, l->session, l->session_len);
    r->session[l->session_len] = '\0';
    r->session_len = l->session_len;
    if (l->owner_len > 0) /* a release's owner may be NULL */
        memcpy(r->owner, l->owner, l->owner_len);
    r->owner[l->owner_len] = '\0';
    r->owner_len = l->owner_len;
    r->token = l->token;
    r->expiry_ns = l->expiry_ns;
}

static bool same_session(const struct row *r, const char *session,
                         size_t len)
{
    return r->session_len == len && memcmp(r->session, session, len) == 0;
}

static bool same_owner(const struct row *r, const char *owner, size_t len)
{
    /* A released row's owner may be NULL. */
    return r->owner_len == len &&
           (len == 0 || memcmp(r->owner, owner, len) == 0);
}

static uint64_t hash(const char *p, size_t n)
{
    uint64_t h = UINT64_C(14695981039346656037); /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * UINT64_C(1099511628211);
    return h;
}

/* session's slot in a table of last puts: its own, or the free one it
 * would take. */
static size_t *last_slot(const struct fake *f, size_t *table, size_t cap,
                         const char *session, size_t len)
{
    for (size_t i = hash(session, len) & (cap - 1);; i = (i + 1) & (cap - 1))
        if (table[i] == NO_PUT ||
            same_session(&f->puts[table[i]].row, session, len))
            return &table[i];
}

/* Links puts[at], just appended, to the session's puts before it. */
static void index_put(struct fake *f, size_t at)
{
    if (2 * (f->nlast + 1) > f->cap_last) {
        size_t cap = f->cap_last > 0 ? 2 * f->cap_last : 64;
        size_t *table = malloc(cap * sizeof(*table));
        if (table == NULL)
            abort();
        for (size_t i = 0; i < cap; i++)
            table[i] = NO_PUT;
        for (size_t i = 0; i < f->cap_last; i++) {
            if (f->last[i] == NO_PUT)
                continue;
            const struct row *r = &f->puts[f->last[i]].row;
            *last_slot(f, table, cap, r->session, r->session_len) =
                f->last[i];
        }
        free(f->last);
        f->last = table;
        f->cap_last = cap;
    }
    const struct row *r = &f->puts[at].row;
    size_t *slot = last_slot(f, f->last, f->cap_last, r->session,
                             r->session_len);
    f->nlast += *slot == NO_PUT;
    f->puts[at].prev = *slot;
    *slot = at;
}

static size_t find(const struct row *rows, size_t n, const char *session,
                   size_t len)
{
    size_t i = 0;
    while (i < n && !same_session(&rows[i], session, len))
        i++;
    return i;
}

/* Applies the batch to a copy of the rows, and keeps the copy only if
 * every change found the row it expected (lock held). */
static int apply_all(struct fake *f, const struct engine_change *chgs,
                     size_t n)
{
    struct row *rows = malloc((f->nrows + n + 1) * sizeof(*rows));
    if (rows == NULL) {
        snprintf(f->errmsg, sizeof(f->errmsg), "out of memory");
        return STORE_ENOMEM;
    }
    if (f->nrows > 0)
        memcpy(rows, f->rows, f->nrows * sizeof(*rows));
    size_t nrows = f->nrows;
    uint64_t floor = f->floor;
    for (size_t i = 0; i < n; i++) {
        const struct engine_change *c = &chgs[i];
        const struct lease_row *key =
            c->kind == ENGINE_DELETE ? &c->before : &c->after;
        size_t at = find(rows, nrows, key->session, key->session_len);
        bool found = at < nrows;
        bool ok = c->has_before
                      ? found &&
                            same_owner(&rows[at], c->before.owner,
                                       c->before.owner_len) &&
                            rows[at].token == c->before.token
                      : !found;
        if (!ok) {
            free(rows);
            snprintf(f->errmsg, sizeof(f->errmsg),
                     "change %zu of %zu: the row of %.*s is not what the "
                     "engine saw", i, n, (int)key->session_len,
                     key->session);
            return STORE_ECONFLICT;
        }
        if (c->kind == ENGINE_DELETE) {
            if (c->before.token > floor)
                floor = c->before.token;
            rows[at] = rows[--nrows];
        } else {
            set_row(&rows[at], &c->after);
            nrows += !found;
        }
    }
    free(f->rows);
    f->rows = rows;
    f->nrows = nrows;
    f->floor = floor;
    f->commits++;
    for (size_t i = 0; i < n; i++) {
        if (chgs[i].kind != ENGINE_PUT)
            continue;
        struct put *p = append(&f->puts, &f->nputs, &f->cap_puts,
                               sizeof(*p));
        set_row(&p->row, &chgs[i].after);
        p->commit = f->commits;
        index_put(f, f->nputs - 1);
    }
    *(size_t *)append(&f->applied, &f->napplied, &f->cap_applied,
                      sizeof(size_t)) = n;
    return STORE_OK;
}

static struct write *meta_slot(struct fake *f, const char *key)
{
    for (size_t i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta[i].key, key) == 0)
            return &f->meta[i];
    if (f->nmeta == sizeof(f->meta) / sizeof(f->meta[0]))
        abort();
    struct write *m = &f->meta[f->nmeta++];
    snprintf(m->key, sizeof(m->key), "%s", key);
    return m;
}

/* --- store.h ---------------------------------------------------------- */

void store_close(struct store *s)
{
    if (s == NULL)
        return;
    struct fake *f = s->f;
    pthread_mutex_lock(&f->gates.mu);
    if (f->running > 0)
        f->overlaps++;
    f->open = false;
    f->closed = true;
    pthread_mutex_unlock(&f->gates.mu);
    free(s);
}

enum store_err store_load(struct store *s,
                          int (*row_cb)(void *arg, const struct lease_row *row),
                          void *arg, uint64_t *floor)
{
    struct fake *f = s->f;
    pthread_mutex_lock(&f->gates.mu);
    begin(f);
    int err = STORE_OK;
    for (size_t i = 0; i < f->nrows && err == STORE_OK; i++) {
        const struct row *r = &f->rows[i];
        struct lease_row l = {r->session, r->session_len, r->owner,
                              r->owner_len, r->token, r->expiry_ns};
        err = row_cb(arg, &l);
    }
    *floor = f->floor;
    end(f);
    pthread_mutex_unlock(&f->gates.mu);
    return err;
}

/* Events are taken and not kept: the mode's tests over this fake look at
 * leases; tests/integration's Watch cases look at events over SQLite. */
enum store_err store_apply_events(struct store *s,
                                  const struct engine_change *chgs, size_t n,
                                  const struct store_event *evs, size_t nevs,
                                  uint64_t keep)
{
    struct fake *f = s->f;
    (void)evs;
    (void)nevs;
    (void)keep;
    pthread_mutex_lock(&f->gates.mu);
    begin(f);
    int err = fake_gate_enter(&f->gates, FAKE_APPLY);
    if (err == STORE_OK)
        err = apply_all(f, chgs, n);
    else
        snprintf(f->errmsg, sizeof(f->errmsg), "injected failure %d", err);
    fake_gate_leave(&f->gates, FAKE_APPLY);
    end(f);
    pthread_mutex_unlock(&f->gates.mu);
    return err;
}

enum store_err store_apply(struct store *s, const struct engine_change *chgs,
                           size_t n)
{
    return store_apply_events(s, chgs, n, NULL, 0, 0);
}

enum store_err store_load_events(struct store *s,
                                 int (*ev_cb)(void *arg,
                                              const struct store_event *ev),
                                 void *arg)
{
    (void)s;
    (void)ev_cb;
    (void)arg;
    return STORE_OK;
}

enum store_err store_sync(struct store *s)
{
    struct fake *f = s->f;
    pthread_mutex_lock(&f->gates.mu);
    uint64_t covers = f->commits; /* those that ended before it began */
    int err = fake_gate_enter(&f->gates, FAKE_SYNC);
    if (err == STORE_OK && covers > f->synced)
        f->synced = covers;
    fake_gate_leave(&f->gates, FAKE_SYNC);
    pthread_mutex_unlock(&f->gates.mu);
    if (err == STORE_OK)
        return STORE_OK;
    errno = EIO;
    return STORE_ESYNC;
}

enum store_err store_cap_expiries(struct store *s, int64_t cap_ns,
                                  size_t *capped)
{
    struct fake *f = s->f;
    pthread_mutex_lock(&f->gates.mu);
    begin(f);
    *capped = 0;
    for (size_t i = 0; i < f->nrows; i++) {
        if (f->rows[i].expiry_ns > cap_ns) {
            f->rows[i].expiry_ns = cap_ns;
            ++*capped;
        }
    }
    end(f);
    pthread_mutex_unlock(&f->gates.mu);
    return STORE_OK;
}

enum store_err store_get_meta(struct store *s, const char *key, int64_t *value)
{
    struct fake *f = s->f;
    pthread_mutex_lock(&f->gates.mu);
    begin(f);
    *value = meta_slot(f, key)->w.value;
    end(f);
    pthread_mutex_unlock(&f->gates.mu);
    return STORE_OK;
}

enum store_err store_set_meta(struct store *s, const char *key, int64_t value)
{
    struct fake *f = s->f;
    pthread_mutex_lock(&f->gates.mu);
    begin(f);
    int err = fake_gate_enter(&f->gates, FAKE_SET_META);
    if (err == STORE_OK || err == STORE_ESYNC) { /* committed */
        meta_slot(f, key)->w.value = value;
        f->commits++;
        if (err == STORE_OK) /* its own sync covers every commit */
            f->synced = f->commits;
    }
    if (err == STORE_ESYNC)
        snprintf(f->errmsg, sizeof(f->errmsg), "syncing the WAL: %s",
                 strerror(EIO));
    else if (err != STORE_OK)
        snprintf(f->errmsg, sizeof(f->errmsg), "injected failure %d", err);
    struct write *w = append(&f->writes, &f->nwrites, &f->cap_writes,
                             sizeof(*w));
    snprintf(w->key, sizeof(w->key), "%s", key);
    w->w = (struct fake_write){value, err,
                               pthread_equal(pthread_self(), f->loop_thread)};
    fake_gate_leave(&f->gates, FAKE_SET_META);
    end(f);
    pthread_mutex_unlock(&f->gates.mu);
    return err;
}

/* The daemon's way in (mode_embedded's open); tests use fake_open(). */
enum store_err store_open(const char *path, int busy_timeout_ms,
                          struct store **out, char *errmsg, size_t errmsg_len)
{
    snprintf(errmsg, errmsg_len, "the fake store opens with fake_open()");
    *out = NULL;
    return STORE_EIO;
}

enum store_err store_raise_tokens(struct store *s, uint64_t floor,
                                  size_t *raised)
{
    return STORE_EIO;
}

enum store_err store_list(struct store *s, const char *prefix,
                          size_t prefix_len, const char *after,
                          size_t after_len, size_t limit,
                          int (*row_cb)(void *arg, const struct lease_row *row),
                          void *arg)
{
    return STORE_EIO;
}

enum store_err store_snapshot(struct store *s, void **out, size_t *len)
{
    return STORE_EIO;
}

void store_snapshot_free(void *p)
{
    free(p);
}

const char *store_list_errmsg(const struct store *s)
{
    return "the fake store neither lists nor snapshots";
}

const char *store_errmsg(const struct store *s)
{
    return s->f->errmsg;
}

/* --- The test's side ---------------------------------------------------- */

struct fake *fake_create(void (*changed)(void *arg), void *arg)
{
    struct fake *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return NULL;
    fake_gate_init(&f->gates, FAKE_GATE_MS, changed, arg);
    f->loop_thread = pthread_self();
    return f;
}

void fake_destroy(struct fake *f)
{
    if (f == NULL)
        return;
    fake_gate_destroy(&f->gates);
    free(f->rows);
    free(f->puts);
    free(f->last);
    free(f->writes);
    free(f->applied);
    free(f);
}

struct store *fake_open(struct fake *f)
{
    struct store *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->f = f;
    pthread_mutex_lock(&f->gates.mu);
    f->open = true;
    f->closed = false;
    pthread_mutex_unlock(&f->gates.mu);
    return s;
}

bool fake_closed(struct fake *f)
{
    pthread_mutex_lock(&f->gates.mu);
    bool closed = f->closed;
    pthread_mutex_unlock(&f->gates.mu);
    return closed;
}

void fake_hold(struct fake *f, enum fake_call c)
{
    fake_gate_hold(&f->gates, c);
}

void fake_step(struct fake *f, enum fake_call c)
{
    fake_gate_step(&f->gates, c);
}

void fake_release(struct fake *f, enum fake_call c)
{
    fake_gate_release(&f->gates, c);
}

void fake_fail(struct fake *f, enum fake_call c, int err)
{
    fake_gate_fail(&f->gates, c, err, 0); /* for good */
}

unsigned fake_entered(struct fake *f, enum fake_call c)
{
    return fake_gate_read(&f->gates, &f->gates.gate[c].entered);
}

unsigned fake_waiting(struct fake *f, enum fake_call c)
{
    return fake_gate_read(&f->gates, &f->gates.gate[c].waiting);
}

unsigned fake_returned(struct fake *f, enum fake_call c)
{
    return fake_gate_read(&f->gates, &f->gates.gate[c].returned);
}

unsigned fake_timeouts(struct fake *f)
{
    return fake_gate_read(&f->gates, &f->gates.timeouts);
}

unsigned fake_overlaps(struct fake *f)
{
    return fake_gate_read(&f->gates, &f->overlaps);
}

void fake_put_meta(struct fake *f, const char *key, int64_t value)
{
    pthread_mutex_lock(&f->gates.mu);
    meta_slot(f, key)->w.value = value;
    pthread_mutex_unlock(&f->gates.mu);
}

int64_t fake_meta(struct fake *f, const char *key)
{
    pthread_mutex_lock(&f->gates.mu);
    int64_t v = meta_slot(f, key)->w.value;
    pthread_mutex_unlock(&f->gates.mu);
    return v;
}

size_t fake_writes(struct fake *f, const char *key, struct fake_write *w,
                   size_t max)
{
    pthread_mutex_lock(&f->gates.mu);
    size_t n = 0;
    for (size_t i = 0; i < f->nwrites; i++) {
        if (strcmp(f->writes[i].key, key) != 0)
            continue;
        if (n < max)
            w[n] = f->writes[i].w;
        n++;
    }
    pthread_mutex_unlock(&f->gates.mu);
    return n;
}

size_t fake_applied(struct fake *f, size_t *sizes, size_t max)
{
    pthread_mutex_lock(&f->gates.mu);
    size_t n = f->napplied;
    for (size_t i = 0; i < n && i < max; i++)
        sizes[i] = f->applied[i];
    pthread_mutex_unlock(&f->gates.mu);
    return n;
}

/* The first commit that gave session to owner with token and, when
 * expiry_ns >= 0, that expiry (lock held); 0 if none did. */
static uint64_t first_put(const struct fake *f, const char *session,
                          const char *owner, uint64_t token,
                          int64_t expiry_ns)
{
    if (f->cap_last == 0)
        return 0;
    size_t session_len = strlen(session), owner_len = strlen(owner);
    uint64_t first = 0;
    for (size_t i = *last_slot(f, f->last, f->cap_last, session,
                               session_len);
         i != NO_PUT; i = f->puts[i].prev) { /* newest first */
        const struct row *r = &f->puts[i].row;
        if (r->token == token &&
            (expiry_ns < 0 || r->expiry_ns == expiry_ns) &&
            same_owner(r, owner, owner_len))
            first = f->puts[i].commit;
    }
    return first;
}

bool fake_committed(struct fake *f, const char *session, const char *owner,
                    uint64_t token, int64_t expiry_ns)
{
    pthread_mutex_lock(&f->gates.mu);
    bool yes = first_put(f, session, owner, token, expiry_ns) > 0;
    pthread_mutex_unlock(&f->gates.mu);
    return yes;
}

bool fake_synced(struct fake *f, const char *session, const char *owner,
                 uint64_t token)
{
    pthread_mutex_lock(&f->gates.mu);
    uint64_t commit = first_put(f, session, owner, token, -1);
    bool yes = commit > 0 && commit <= f->synced;
    pthread_mutex_unlock(&f->gates.mu);
    return yes;
}
