/*
 * liblease: the C client library of leased.
 *
 * A lease gives one process at a time the ownership of a session (any
 * opaque id), with a fencing token that rises on every change of owner.
 * A struct lease_client talks to one backend:
 *
 *   lease_grpc_open()    a leased daemon (or any server of the
 *                        mecatl.driver.v1.SessionLeaseService protocol)
 *   lease_memory_open()  in this process, with a clock you control; for
 *                        tests and single-process programs
 *   lease_file_open()    a directory shared by the processes of one host
 *   lease_client_create() a backend of your own (struct lease_backend)
 *
 * Every function returns 0 (LEASE_OK) or a negative enum lease_err;
 * lease_errmsg() then says why, in words, for the calling thread.
 *
 * Thread safety: a lease_client may be used from any number of threads at
 * once. struct lease is a plain value: copy it freely.
 */
#ifndef LEASE_H
#define LEASE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LEASE_SESSION_MAX 512 /* bytes of UTF-8, without the NUL */
#define LEASE_OWNER_MAX 256

enum lease_err {
    LEASE_OK = 0,
    /* Acquire: another owner holds a live lease. Renew: ownership is lost
     * (expired and taken over, or released). Stop the work; do not
     * release. */
    LEASE_EHELD = -1,
    /* The service does not serve leases (gRPC UNIMPLEMENTED): switch
     * leasing off; retrying will not help. */
    LEASE_EUNSUPPORTED = -2,
    /* A transient failure (storage, overload, shutdown, network): keep a
     * lease you hold until its expiry and retry. */
    LEASE_EUNAVAILABLE = -3,
    /* A bad argument: empty or over-long id or owner, invalid UTF-8, a
     * bad target. Retrying the same call will not help. */
    LEASE_EINVAL = -4,
    /* No answer within the deadline: the call may or may not have taken
     * effect. Never read it as "not held". */
    LEASE_EDEADLINE = -5,
    LEASE_ENOMEM = -6,
    /* The server knows who the caller is, and its policy does not let it
     * use this session, owner or call (gRPC PERMISSION_DENIED). Nothing
     * changed. Retrying will not help until the policy changes. */
    LEASE_EDENIED = -7,
    /* The server does not know who the caller is: no credentials, or
     * wrong ones (gRPC UNAUTHENTICATED). Nothing changed. Fix the bearer
     * token or the client certificate. */
    LEASE_EUNAUTH = -8,
    /* lease_watch: the changes after the revision asked for are no
     * longer kept (or the revision is ahead of the service's store): read
     * the leases again and watch from 0. */
    LEASE_EGONE = -9,
};

/* A static description of err ("held by another owner", …). */
const char *lease_strerror(int err);

/* Why the calling thread's last failed call failed (a thread-local
 * string, valid until this thread's next call); "" if none. */
const char *lease_errmsg(void);

struct lease {
    char session_id[LEASE_SESSION_MAX + 1]; /* NUL-terminated */
    char owner[LEASE_OWNER_MAX + 1];        /* NUL-terminated */
    uint64_t token;    /* fencing token: >= 1, rises on every takeover */
    int64_t expiry_ns; /* the service's wall clock, ns since the epoch */
    /* The lifetime the service gave this grant, counted from when it
     * decided it (after the call was sent), as the service said it; 0
     * when it did not say (a server of Mecatl's protocol other than
     * leased). Unlike expiry_ns, it needs no agreement of clocks: the
     * lease lasts at least until the call's send time plus ttl_ns on the
     * caller's own clock (less lease_margin_min() for the clocks' rates). */
    int64_t ttl_ns;
};

struct lease_client;

/* Takes session_id for owner. On LEASE_OK, *out is the lease: a takeover
 * gets a token greater than any the session had; the same owner
 * re-acquiring a live lease keeps its token and gets a later expiry.
 * LEASE_EHELD: another owner holds it. Strings are borrowed. */
int lease_acquire(struct lease_client *c, const char *session_id,
                  const char *owner, struct lease *out);

/* As lease_acquire, but while another owner holds the lease, waits for
 * it until deadline_ns (CLOCK_MONOTONIC; INT64_MAX: no end), then
 * LEASE_EHELD. Against leased, the call waits in the session's line,
 * first come first served, and is granted the moment the lease is
 * released or expires (leased.v1.Leases/Wait); against a server without
 * it (another server of Mecatl's protocol) and the other backends, it
 * tries acquire every 250 ms, in no order. A wait that ends at the
 * deadline (or finds no server up until then) is settled by one more
 * acquire, whose answer is lease_wait's: a grant made as the deadline
 * passed is never left unknown. The lease's ttl_ns counts from the
 * grant: a holder counts its deadline from when it called, which is
 * earlier (or hands the session to lease_keeper_start, whose acquire is
 * the same owner's again and keeps the token). */
int lease_wait(struct lease_client *c, const char *session_id,
               const char *owner, int64_t deadline_ns, struct lease *out);

/* Extends *cur (same owner and token). On LEASE_OK, *out (which may be
 * cur) has the same token and a strictly later expiry; this also reclaims
 * an expired lease nobody took over. LEASE_EHELD: ownership is lost. */
int lease_renew(struct lease_client *c, const struct lease *cur,
                struct lease *out);

/* As lease_renew, but gives up at deadline_ns (CLOCK_MONOTONIC) when that
 * comes before the client's own timeout: LEASE_EDEADLINE then, the
 * outcome unknown. A holder calls this with the time its lease is
 * trusted until, so that no renewal waits past it. A backend without
 * renew_until (one of your own) runs its renew, which cannot be cut
 * short. */
int lease_renew_until(struct lease_client *c, const struct lease *cur,
                      int64_t deadline_ns, struct lease *out);

/* The least a holder takes off its lease's lifetime (ttl_ns) to get its
 * local deadline: 1 % of the TTL for the rates of two hosts' clocks (a
 * working clock is off by far less than that), and 20 ms for a holder
 * that wakes a little late on a loaded machine. */
static inline int64_t lease_margin_min(int64_t ttl_ns)
{
    return ttl_ns / 100 + 20000000;
}

/* Frees *cur if owner and token still match; otherwise does nothing and
 * still returns LEASE_OK (release is idempotent). */
int lease_release(struct lease_client *c, const struct lease *cur);

/* Frees the client and its backend. Accepts NULL. */
void lease_client_destroy(struct lease_client *c);

/* ---- The gRPC driver ------------------------------------------------ */

struct lease_grpc_options {
    /* Deadline of each call; 0 means 5000 ms. On expiry a call returns
     * LEASE_EDEADLINE (outcome unknown). */
    int64_t timeout_ms;
    /* TLS (1.2+): a PEM file of the CA certificates that signed the
     * server's; NULL for plaintext. */
    const char *tls_ca_file;
    /* A client certificate and its key (PEM files), for a server that
     * asks for one (mutual TLS); both or neither, with tls_ca_file. */
    const char *tls_cert_file, *tls_key_file;
    /* The name to check the server's certificate against, when it is not
     * the target's host; NULL: the host. */
    const char *tls_server_name;
    /* A bearer token sent with every call (`authorization: Bearer …`);
     * NULL for none. Characters as in RFC 6750: A-Z a-z 0-9 -._~+/= */
    const char *token;
};

/* Opens a client to the lease service at target: "HOST:PORT" or
 * "unix:/PATH", or several separated by commas ("a:7443,b:7443"): a call
 * that finds one unavailable (gRPC UNAVAILABLE: not reachable, draining),
 * or not connected and silent for its share of the timeout, is tried on
 * the next, and the client stays with the one that answered; leased's
 * calls are safe to repeat. Plaintext (no tls_ca_file) only to
 * loopback (127.0.0.0/8, [::1], localhost) or unix sockets, as Mecatl's
 * own client: any other host is refused with LEASE_EINVAL. opts may be
 * NULL; its strings are read during the call only. Connects lazily: an
 * unreachable server shows as LEASE_EUNAVAILABLE (or LEASE_EDEADLINE) on
 * the first call. */
int lease_grpc_open(const char *target, const struct lease_grpc_options *opts,
                    struct lease_client **out);

/* For a program about to exit: waits up to timeout_ms for gRPC to finish
 * closing the channels of destroyed clients and to shut down. gRPC does
 * that on its own threads after lease_client_destroy returns; exiting
 * meanwhile races OpenSSL's exit-time cleanup against those threads
 * (leak checkers then report OpenSSL's per-thread error state). Returns
 * LEASE_OK, or LEASE_EDEADLINE while a client is open or something else
 * in the process still uses gRPC. */
int lease_grpc_wait_shutdown(int timeout_ms);

/* ---- The in-memory backend ------------------------------------------ */

/* Opens an in-process lease table with the semantics of leased: leases
 * live ttl_ns; now_ns(arg) gives the time in ns since the Unix epoch (it
 * must never go back; NULL means CLOCK_REALTIME). Nothing is persisted. */
int lease_memory_open(int64_t ttl_ns, int64_t (*now_ns)(void *arg),
                      void *arg, struct lease_client **out);

/* ---- The file-lock backend ------------------------------------------- */

/* Opens a lease table kept in directory dir (created with mode 0700 if
 * missing; create it yourself to share it between users), for the
 * processes of one host, with no daemon. Each call locks the session's
 * lock file (flock), and writes its record atomically and durably (a
 * temporary file, fsync, rename, fsync of the directory): tokens never go
 * down across crashes or power loss, and a release keeps the token.
 * Leases live ttl_ns on the clock now_ns(arg) (wall time in ns since the
 * epoch, shared by every process using dir; NULL: CLOCK_REALTIME). dir is
 * copied. Records are never removed (one small file and a lock file per
 * session ever used). */
int lease_file_open(const char *dir, int64_t ttl_ns,
                    int64_t (*now_ns)(void *arg), void *arg,
                    struct lease_client **out);

/* ---- Watching ------------------------------------------------------- */

/* A change of a lease (leased.v1.Leases/Watch). Renewals are not
 * changes. */
enum lease_event_kind {
    LEASE_GRANTED = 1, /* a new holder, with a new token */
    LEASE_RELEASED,    /* its holder let go */
    LEASE_EXPIRED,     /* it ran out without a renewal */
    LEASE_REVOKED,     /* an operator ended it */
};

struct lease_event {
    uint64_t revision; /* rises with every change the service stores */
    enum lease_event_kind kind;
    /* GRANTED: the new lease (expiry_ns as granted); the others: the
     * lease that ended. ttl_ns is 0. */
    struct lease lease;
};

/* Calls fn(arg, ev) for each change of session_id's lease, or, when
 * prefix is true, of the lease of every session whose id starts with
 * session_id ("" then: every session), in the order of their revisions,
 * each once the service stored it; on the calling thread, from the
 * first change after *revision (0: from now on). *revision follows the
 * stream: the last revision it covered, changes of other sessions
 * included, so a later lease_watch from it misses nothing and repeats
 * nothing. It lasts until fn returns non-zero (then LEASE_OK), or until
 * deadline_ns (CLOCK_MONOTONIC; INT64_MAX: no end; LEASE_EDEADLINE).
 * A service that goes away or drains is watched again at the next
 * target (or the same one, back), from *revision, until the deadline.
 * LEASE_EGONE: what followed *revision is no longer kept (leased keeps
 * its last --watch-history changes): read the leases again and watch
 * from 0. LEASE_EUNSUPPORTED from a service without Watch (and from the
 * in-memory and file backends). */
int lease_watch(struct lease_client *c, const char *session_id, bool prefix,
                uint64_t *revision, int64_t deadline_ns,
                int (*fn)(void *arg, const struct lease_event *ev), void *arg);

/* ---- Backends of your own ------------------------------------------- */

/* A backend: each function has the contract of the lease_ call of the
 * same name, gets arguments already checked (non-empty, within the size
 * limits, valid UTF-8), and may write a reason into errmsg (len bytes).
 * The functions must be safe to call from several threads at once. */
struct lease_backend {
    int (*acquire)(void *impl, const char *session_id, const char *owner,
                   struct lease *out, char *errmsg, size_t len);
    int (*renew)(void *impl, const struct lease *cur, struct lease *out,
                 char *errmsg, size_t len);
    int (*release)(void *impl, const struct lease *cur, char *errmsg,
                   size_t len);
    void (*destroy)(void *impl); /* may be NULL */
    /* renew, giving up at deadline_ns (CLOCK_MONOTONIC) if its own
     * timeout ends later (lease_renew_until). May be NULL: renew then. */
    int (*renew_until)(void *impl, const struct lease *cur,
                       int64_t deadline_ns, struct lease *out, char *errmsg,
                       size_t len);
    /* acquire, waiting in line until deadline_ns (CLOCK_MONOTONIC;
     * INT64_MAX: no end) while another owner holds the lease
     * (lease_wait); LEASE_EDEADLINE when it ended first. May be NULL, or
     * answer LEASE_EUNSUPPORTED: lease_wait polls acquire then. */
    int (*wait)(void *impl, const char *session_id, const char *owner,
                int64_t deadline_ns, struct lease *out, char *errmsg,
                size_t len);
    /* lease_watch (session_id checked; "" only with prefix). May be
     * NULL: LEASE_EUNSUPPORTED. */
    int (*watch)(void *impl, const char *session_id, bool prefix,
                 uint64_t *revision, int64_t deadline_ns,
                 int (*fn)(void *arg, const struct lease_event *ev), void *arg,
                 char *errmsg, size_t len);
};

/* Wraps a backend (borrowed; it must outlive the client) and its impl
 * (taken: destroyed with the client). NULL when out of memory. */
struct lease_client *lease_client_create(const struct lease_backend *backend,
                                         void *impl);

/* ---- The keeper ----------------------------------------------------- */

/* A keeper holds one lease for a server that owns a session: it acquires
 * it, renews it on a thread of its own at about a third of the TTL (less
 * a random tenth, so that many keepers do not renew in step), says when
 * it is lost or the service is in trouble, and releases it on stop.
 *
 * The deadline rule: the lease is trusted until its local deadline, the
 * send time of the last successful renewal (or of the acquire) plus the
 * TTL, less a margin, on the monotonic clock. The service decided the
 * grant after that send time, so on the service's own clock the lease
 * lasts longer, whatever the two wall clocks say. The TTL is the one the
 * service says with each grant (struct lease's ttl_ns). No renewal waits
 * past the deadline (each call is cut short there, or at a third of the
 * TTL if that comes first), and a second thread of the keeper's acts at
 * the deadline itself, even while a call is blocked: from then on
 * lease_keeper_valid() says false, and lost has been called. Act on the
 * session only while lease_keeper_valid() says true, in pieces of work
 * shorter than the margin. */
struct lease_keeper;
struct lease_keeper_set;

struct lease_keeper_callbacks {
    /* The lease is lost: a renewal was refused (err LEASE_EHELD: the
     * lease expired and another owner took it, or it was released behind
     * the keeper's back), or the local deadline came with no renewal
     * (err: the last failure, such as LEASE_EUNAVAILABLE,
     * LEASE_EDEADLINE, LEASE_EDENIED or LEASE_EUNAUTH). Stop working on
     * the session; the keeper will not release it. Called once, on one
     * of the keeper's threads, no later than the deadline. May be NULL. */
    void (*lost)(void *arg, const struct lease *l, int err);
    /* A renewal failed but the lease is still trusted (until the local
     * deadline); the keeper retries. Called on the keeper's thread. May
     * be NULL. */
    void (*trouble)(void *arg, const struct lease *l, int err,
                    const char *why);
    void *arg;
    /* What the keeper's user should know, though it changes no outcome:
     * the service does not say its TTL (a server of Mecatl's protocol
     * other than leased), and the keeper estimates it from the grant's
     * expiry and this host's wall clock, which assumes the two clocks
     * agree. Called once, from lease_keeper_start on its caller's
     * thread. May be NULL. (Last, so that {lost, trouble, arg} still
     * means what it did.) */
    void (*warning)(void *arg, const struct lease *l, const char *what);
};

struct lease_keeper_options {
    /* A TTL to trust when it is shorter than the service's; longer is
     * refused (LEASE_EINVAL). 0: the service's. With a service that does
     * not say its TTL, this is the TTL trusted, and 0 estimates it (see
     * warning above). */
    int64_t ttl_ns;
    /* Taken off the local deadline: the longest a piece of work runs
     * after lease_keeper_valid() said true, with the clocks' allowance.
     * 0: a tenth of the TTL. Never less than lease_margin_min(TTL). */
    int64_t margin_ns;
    /* A monotonic clock in ns for tests; NULL: CLOCK_MONOTONIC. With a
     * clock of your own the keeper looks at it every few milliseconds. */
    int64_t (*now_ns)(void *arg);
    void *clock_arg;
    /* A set to join (see lease_keeper_set_create); may be NULL. */
    struct lease_keeper_set *set;
};

/* Acquires session for owner through c (borrowed: it must outlive the
 * keeper) and starts keeping it. LEASE_EHELD (or any failure) returns at
 * once, with no keeper. opts and callbacks may be NULL; strings are
 * copied. On LEASE_OK, *granted (may be NULL) is the lease. */
int lease_keeper_start(struct lease_client *c, const char *session_id,
                       const char *owner,
                       const struct lease_keeper_options *opts,
                       const struct lease_keeper_callbacks *cb,
                       struct lease_keeper **out, struct lease *granted);

/* Whether the lease may still be trusted: not lost, and its local
 * deadline not passed. Any thread. */
int lease_keeper_valid(struct lease_keeper *k);

/* The local deadline, on the keeper's clock (CLOCK_MONOTONIC unless
 * now_ns): the lease is trusted until then, and lost then unless a
 * renewal moves it later. Any thread. */
int64_t lease_keeper_deadline(struct lease_keeper *k);

/* The lease as last granted (the token a fencing check needs). */
void lease_keeper_lease(struct lease_keeper *k, struct lease *out);

/* Stops renewing, releases the lease unless it was lost (with the
 * client's own call deadline, whatever the caller is doing), and frees
 * the keeper. Returns the release's result (LEASE_OK when lost). Accepts
 * NULL. Not from a callback. */
int lease_keeper_stop(struct lease_keeper *k);

/* A set of keepers, so that shutting down releases every lease still
 * held. */
struct lease_keeper_set *lease_keeper_set_create(void);

/* Stops every keeper still in the set (releasing their leases), then
 * frees it. Accepts NULL. */
void lease_keeper_set_destroy(struct lease_keeper_set *s);

/* ---- Fencing a resource --------------------------------------------- */

/* A fence keeps, in a small file, the highest fencing token that has
 * written to one resource (a file, a directory, anything the holders of
 * one session write), and lets a writer in only with a token at least as
 * high. A holder that was paused past its lease (a GC pause, SIGSTOP, a
 * slow disk) and wakes up to write is refused, because its successor,
 * with a greater token, wrote first. One fence file per resource and
 * session (the tokens of different sessions do not compare), on a file
 * system every writer shares, with working flock(2).
 *
 * The file holds the token as one line of 20 decimal digits, rewritten in
 * place under flock(2): the shell recipe of docs/client.md reads and
 * writes the same file, so that C and shell writers share a fence. */
struct lease_fence;

/* Opens the fence file path (created, mode 0666 less the umask, if
 * missing), waits for its lock, and compares token with the highest token
 * recorded there. Lower: LEASE_EHELD (a newer holder has written: write
 * nothing; the lock is let go). Equal or higher: LEASE_OK, the token is
 * recorded durably (fdatasync) when higher, and *out holds the lock:
 * write the resource, then lease_fence_leave(). Hold it no longer than
 * the write: other writers wait meanwhile (a child forked inside shares
 * the lock until it closes its copy of the descriptor, which an exec
 * does). LEASE_EINVAL: token 0, or a NULL path or out;
 * LEASE_EUNAVAILABLE: the file cannot be opened, locked, read or
 * written, or does not hold a token (lease_errmsg() says which). path is
 * read during the call only. */
int lease_fence_enter(const char *path, uint64_t token,
                      struct lease_fence **out);

/* Lets the fence go and frees it. Accepts NULL. */
void lease_fence_leave(struct lease_fence *f);

/* ---- The conformance suite ------------------------------------------ */

/* What the suite needs to drive a backend. */
struct lease_conformance {
    struct lease_client *client; /* borrowed */
    int64_t ttl_ns;              /* the lease lifetime the backend grants */
    /* Moves the backend's clock forward by ns: advance a fake clock, or
     * sleep for a real one. */
    void (*advance)(void *arg, int64_t ns);
    void *arg;
    /* Prefix of the session ids the suite makes up (unique ones are added
     * to it); NULL means "conformance". */
    const char *prefix;
    /* Where each check's result goes ("ok …" / "FAIL …"); NULL: nowhere. */
    FILE *report;
};

/* Runs every conformance check (the behaviours of Mecatl's suite and
 * more: see docs/client.md) against conf->client. Returns the number of
 * checks that failed: 0 means the backend conforms. */
int lease_conformance_run(const struct lease_conformance *conf);

#ifdef __cplusplus
}
#endif

#endif
