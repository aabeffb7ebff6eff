/*
 * leasectl's parts: the command line (options.c); what leasectl says of
 * the connection, and --timeout as the limit of the whole command
 * (connection.c); how a lease is printed, and names escaped (output.c);
 * the commands (leasectl.c); `hold` (hold.c); and `watch` (watch.c).
 */
#ifndef LEASECTL_H
#define LEASECTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "conn.h"
#include "lease.h"
#include "nanotime.h"

/* Exit codes (docs/leasectl.1). */
enum {
    EXIT_OK = 0,
    EXIT_FAILED = 1,      /* anything else */
    EXIT_USAGE = 2,
    EXIT_HELD = 3,        /* held by another owner, or ownership lost */
    EXIT_UNAVAILABLE = 4, /* unavailable, or no answer in time */
    EXIT_INVALID = 5,     /* refused as invalid */
    EXIT_NOT_FOUND = 6,   /* get: no lease */
    EXIT_UNSUPPORTED = 7, /* the server does not serve leases */
    EXIT_DENIED = 8,      /* the server's policy refused the caller */
    EXIT_UNAUTHENTICATED = 9, /* no valid credentials */
    EXIT_GONE = 10, /* watch: the revision to resume from is not kept */
};

/* The commands, in the order of the usage. */
enum ctl_cmd {
    CTL_ACQUIRE,
    CTL_RENEW,
    CTL_RELEASE,
    CTL_GET,
    CTL_LIST,
    CTL_STATS,
    CTL_REVOKE,
    CTL_SNAPSHOT,
    CTL_HEALTH,
    CTL_HOLD,
    CTL_WATCH,
    CTL_COMMANDS, /* how many */
    CTL_NONE = -1 /* none (yet): leasectl itself */
};

/* --wait inf: for as long as it takes. */
#define CTL_FOREVER INT64_MAX

struct ctl_number {
    bool set;
    uint64_t value;
};

/* The command line (docs/leasectl.1), as ctl_parse reads it. Strings are
 * borrowed from argv, the environment or options.c's table; a value not
 * given is its default (zero without one). */
struct ctl_args {
    int cmd;   /* enum ctl_cmd */
    bool help;    /* --help: print ctl_help(cmd), and do nothing else */
    bool version; /* --version: print the version, and nothing else */
    /* leasectl's own options. */
    const char *url;
    const char *tls_ca_file, *tls_cert_file, *tls_key_file;
    const char *tls_server_name;
    const char *token_file; /* NULL: none */
    int64_t timeout_ns;
    bool json;
    /* The commands' options. */
    const char *owner; /* NULL: the default owner (ctl_owner) */
    struct ctl_number token;
    int64_t wait_ns; /* CTL_FOREVER: no limit */
    int64_t grace_ns, ttl_ns;
    long limit; /* 0: none */
    const char *prefix; /* watch --prefix; NULL: not given */
    struct ctl_number after; /* watch --after */
    /* The command's argument (SESSION or PREFIX, argv's); NULL: none.
     * snapshot: the word "save", and FILE in arg2. */
    char *arg, *arg2;
    /* hold: CMD and its arguments, the words after "--" (argv's own,
     * NULL-terminated). */
    char **run;
};

/* Parses argv (argc words) into *a: options before or after the command,
 * "--" ending them, each option checked against the commands that take
 * it, and the command's arguments. Returns EXIT_OK (with a->help or
 * a->version set, the caller prints that and stops), or EXIT_USAGE
 * having said why on stderr (ctl_usage). */
int ctl_parse(int argc, char **argv, struct ctl_args *a);

/* Prints the help of command cmd (CTL_NONE: leasectl's usage) to f. */
void ctl_help(FILE *f, int cmd);

/* The name of command cmd; NULL for CTL_NONE. */
const char *ctl_command_name(int cmd);

/* Reports bad usage of command cmd (CTL_NONE: of leasectl itself) on
 * stderr, "leasectl: CMD: why", then where its help is ("Try 'leasectl
 * help CMD'."); returns EXIT_USAGE. */
int ctl_usage(int cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

struct ctl {
    struct lease_client *client; /* the lease calls, through liblease */
    struct conn conn;            /* admin and health calls */
    struct ctl_args args;
    const char *cmd;                /* the command's name, for messages */
    struct lease_grpc_options opts; /* what client was opened with */
};

/* watch (watch.c). */
int ctl_watch(struct ctl *c);

/* The exit code of a liblease error. */
int ctl_exit_of(int lease_err);

/* Reports a failed lease call on stderr, "leasectl: WHAT: reason
 * (STATUS_NAME)"; returns its exit code. */
int ctl_fail(int lease_err, const char *what);

/* Before anything uses gRPC: unless $GRPC_VERBOSITY or $GRPC_TRACE asks
 * for them, gRPC's own log lines are dropped (leasectl says what went
 * wrong itself). */
void ctl_quiet_grpc(void);

/* Before opening: without --tls-ca, a target of the URL that is not
 * loopback is refused on stderr, naming --tls-ca; returns EXIT_INVALID
 * then, else EXIT_OK (a malformed URL is left to liblease to report). */
int ctl_check_url(const struct ctl *c);

/* Before a command's first call: when nothing listens at the URL (every
 * target refuses, within a second), says so on stderr, with what is
 * probably wrong when one side only speaks TLS, and returns
 * EXIT_UNAVAILABLE, rather than have liblease wait out its timeout for a
 * daemon to come back; EXIT_OK otherwise. */
int ctl_reach(struct ctl *c);

/* Starts the watchdog of --timeout (c->args; c->cmd names the command):
 * timeout (and --wait, unless inf) from now, it says on stderr that no
 * answer came in time and ends the process with EXIT_UNAVAILABLE. With
 * --wait inf there is none. Call once, after hold_block_signals. Returns
 * 0 or an errno. */
int ctl_deadline_start(const struct ctl *c);

/* Stops the watchdog. False when it is too late: it has fired and is
 * ending the process. */
bool ctl_deadline_stop(void);

/* Before a command says how it ended (a failure, or a result it then
 * writes): stops the watchdog, or, when it has fired or its time has
 * come (it is saying why and ending the process), waits for that end, so
 * that a command says one thing, never two, and a call that gave up as
 * the time ran out is told as the time running out. */
void ctl_deadline_settle(void);

/* The owner to act as (docs/leasectl.1): flag (--owner) if not NULL,
 * else $LEASE_OWNER if set and not empty, else USER@HOST, made unique to
 * this run with unique (hold's): USER@HOST/PID-NONCE. Returns flag, the
 * environment's string, or buf (len bytes) filled. */
const char *ctl_owner(const char *flag, bool unique, char *buf, size_t len);

/* A lease as leasectl shows it. Strings are borrowed. */
struct ctl_view {
    const char *session_id, *owner;
    uint64_t token;
    int64_t expiry_ns; /* wall clock */
    int live;          /* 1 live, 0 not, -1 not said (a lease call's) */
    /* The end of the restart quarantine on this host's wall clock, while
     * one runs: a live lease is live until this or its expiry, whichever
     * is later. 0 when none runs (or it is not known). */
    int64_t quarantine_end_ns;
};

/* Prints v, as text (output.c's rules) or JSON, on stdout. */
void ctl_print_view(const struct ctl *c, const struct ctl_view *v);

/* Prints a change of a lease (watch): a line of text, or a JSON object
 * with --json. */
void ctl_print_event(const struct ctl *c, const struct lease_event *ev);

/* Prints a lease a lease call returned, as ctl_print_view. */
void ctl_print_lease(const struct ctl *c, const struct lease *l);

/* The most bytes ctl_escaped() makes of n bytes, with the NUL. */
#define CTL_ESCAPED_LEN(n) (4 * (n) + 1)

/* s with what could act on a terminal escaped (output.c), into buf (len
 * bytes: CTL_ESCAPED_LEN(strlen(s)) holds all of it, less is cut short);
 * returns buf. */
const char *ctl_escaped(const char *s, char *buf, size_t len);

/* Acquire, and with wait_ns > 0 wait for the lease while another holds
 * it, until it is granted or wait_ns has passed (CTL_FOREVER: until it
 * is granted): lease_wait, in line at leased. */
int ctl_acquire(struct ctl *c, const char *session, const char *owner,
                int64_t wait_ns, struct lease *out);

/* For hold, before any other thread starts (they inherit the mask):
 * blocks SIGTERM, SIGINT, SIGHUP and SIGCHLD and starts the thread that
 * takes them. Returns 0 or an errno. */
int hold_block_signals(void);

/* `leasectl hold SESSION [--owner O] [--wait D] [--grace D] [--ttl D] --
 * CMD ARGS…`, as c->args has it. Returns the exit code. */
int ctl_hold(struct ctl *c);

/* Starts run(NULL) on a thread of its own, detached (it lives as long as
 * the process, or ends by itself). Returns 0 or an errno. */
int ctl_start_thread(void *(*run)(void *));

/* `leasectl snapshot save FILE`. Returns the exit code. */
int ctl_snapshot(struct ctl *c);

/* An admin or health call: *resp (free it with
 * protobuf_c_message_free_unpacked) and EXIT_OK, or the exit code of a
 * failure it printed. */
int ctl_call(struct ctl *c, const char *path, const ProtobufCMessage *req,
             const ProtobufCMessageDescriptor *desc, ProtobufCMessage **resp);

#endif
