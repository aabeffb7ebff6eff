/*
 * leasectl's command line: each option declared once, as a row of one
 * table (its name, its value, its help, the commands that take it), from
 * which getopt's long options, the usage texts and the checks are made;
 * and the commands' synopses and help. Not here: what the commands do
 * (leasectl.c, hold.c).
 *
 * The rules (docs/leasectl.1):
 *
 * 1. leasectl's own options (rows every command takes: the connection,
 *    the output) and a command's options may come before or after the
 *    command and its argument, in any order.
 * 2. "--" ends the options: what follows is arguments only; for hold,
 *    CMD and its arguments, untouched.
 * 3. A command refuses an option that is not one of its own.
 * 4. A value comes from the command line, else the environment variable
 *    of its row (if set and not empty), else the row's default; it is
 *    checked as it is read. An empty value of an option with a default
 *    means the default.
 * 5. --help (or -h) stops the parsing: the help is that of the command
 *    named before it, else leasectl's. `help [COMMAND]` is the same as
 *    `[COMMAND] --help`. --version stops it too.
 * 6. Bad usage is one line saying what is wrong, and one saying where
 *    the help is: the usage itself goes to whoever asks for it.
 */
#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "duration.h"
#include "leasectl.h"
#include "textwrap.h"

#define WIDTH 79       /* of the usage texts */
#define OPTION_COL 23  /* where an option's help starts */
#define SUMMARY_COL 45 /* where a command's summary starts */
#define FIRST_VAL 256  /* getopt's value for row 0: no character's */

#define ON(cmd) (1u << (cmd))
#define ALL (ON(CTL_COMMANDS) - 1) /* leasectl's own option */
#define FIELD(f) offsetof(struct ctl_args, f)

static const struct command {
    const char *name;
    const char *args;    /* the synopsis before the options */
    const char *after;   /* after them: "-- CMD…" for a command to run */
    const char *need;    /* the argument it cannot do without, or NULL */
    int max;             /* arguments it takes (0 to 2) */
    const char *summary; /* its line in leasectl --help */
    const char *help;    /* what `leasectl NAME --help` says it does */
} commands[CTL_COMMANDS] = {
    [CTL_ACQUIRE] = {
        .name = "acquire", .args = "SESSION", .need = "SESSION", .max = 1,
        .summary = "take a lease",
        .help = "Takes the lease of SESSION for owner O (default: "
                "$LEASE_OWNER, or USER@HOST); the same owner again keeps "
                "its token. With --wait, waits for up to D while another "
                "owner holds it, in line (first come first served) at "
                "leased. Exit 3 when held.",
    },
    [CTL_RENEW] = {
        .name = "renew", .args = "[SESSION]", .max = 1,
        .summary = "extend a lease (or the JSON lease on stdin)",
        .help = "Extends the lease of SESSION that owner O (default: "
                "$LEASE_OWNER, or USER@HOST) holds: the one with token N, "
                "or without --token the one O holds now. Without SESSION, "
                "the lease given as JSON on stdin (what acquire --json "
                "prints). Exit 3 when the lease is lost, or not O's.",
    },
    [CTL_RELEASE] = {
        .name = "release", .args = "[SESSION]", .max = 1,
        .summary = "free a lease (or stdin)",
        .help = "Frees a lease given as for renew. Freeing one that is not "
                "held (any more), or not O's, succeeds too (and says so, "
                "without --token).",
    },
    [CTL_GET] = {
        .name = "get", .args = "SESSION", .need = "SESSION", .max = 1,
        .summary = "show a lease",
        .help = "Shows the lease of SESSION; exit 6 when it has none.",
    },
    [CTL_LIST] = {
        .name = "list", .args = "[PREFIX]", .max = 1,
        .summary = "list leases by session id",
        .help = "Lists the leases whose session id starts with PREFIX, by "
                "session id (all of them, or the first N).",
    },
    [CTL_STATS] = {
        .name = "stats",
        .summary = "the daemon's counters",
        .help = "The daemon's counters and state.",
    },
    [CTL_REVOKE] = {
        .name = "revoke", .args = "SESSION", .need = "SESSION", .max = 1,
        .summary = "end any holder's lease (an operator's)",
        .help = "Ends the lease of SESSION whoever holds it, as its "
                "holder's release would: the holder's next renewal fails, "
                "the next acquire gets a greater token. With --token, only "
                "while the lease's token is N. Needs admin=write under a "
                "policy. Exit 6 when nobody holds it, 3 when its token is "
                "another.",
    },
    [CTL_SNAPSHOT] = {
        .name = "snapshot", .args = "save FILE", .need = "save FILE",
        .max = 2,
        .summary = "copy the embedded store to FILE",
        .help = "Writes a consistent copy of the running daemon's SQLite "
                "store to FILE (a new file, complete or not there at all), "
                "to restore as docs/operations.md says. Needs admin=read "
                "and sessions=* under a policy. Over PostgreSQL, use "
                "pg_dump instead (exit 1).",
    },
    [CTL_HEALTH] = {
        .name = "health",
        .summary = "SERVING or not",
        .help = "SERVING (exit 0) or not (exit 4).",
    },
    [CTL_HOLD] = {
        .name = "hold", .args = "SESSION", .after = "-- CMD [ARGS…]",
        .need = "SESSION", .max = 1,
        .summary = "run CMD while holding it",
        .help = "Runs CMD in a process group of its own while holding the "
                "lease of SESSION: renews it, stops the group before the "
                "lease could go to anyone else (SIGTERM --grace before its "
                "deadline, SIGKILL at it) if it is not renewed in time or "
                "is lost, releases it once the group is gone, and exits "
                "with CMD's status. If leasectl dies, the group dies too. "
                "CMD sees LEASE_SESSION, LEASE_OWNER, LEASE_TOKEN and "
                "LEASE_DEADLINE. The owner is O, else $LEASE_OWNER, else "
                "USER@HOST/PID-NONCE (unique to the run). Exit 3 when the "
                "lease is held by another owner (after --wait, if given).",
    },
    [CTL_WATCH] = {
        .name = "watch", .args = "SESSION", .max = 1,
        .summary = "print each change of a lease as it comes",
        .help = "Prints each change of the lease of SESSION, or with "
                "--prefix of every session whose id starts with P, a line "
                "each, once leased stored it: its revision, granted "
                "(owner, token, expiry), released, expired or revoked. "
                "Runs until interrupted (or --limit changes), resuming at "
                "another daemon of --url, or the same one back, without "
                "missing or repeating a change. With --after, the changes "
                "after that revision; exit 10 when they are no longer "
                "kept (read the leases again, and watch without --after).",
    },
};

enum kind {
    FLAG,     /* bool, takes no value */
    TEXT,     /* const char * */
    DURATION, /* int64_t ns, of at least min_ms; "inf" if inf */
    COUNT,    /* long, 1 or more */
    NUMBER,   /* struct ctl_number */
};

static const struct row {
    const char *name;  /* --name */
    const char *value; /* what its value is called; NULL for a FLAG */
    enum kind kind;
    size_t field;      /* where it goes in struct ctl_args */
    int64_t min_ms;    /* DURATION: the least */
    bool inf;          /* DURATION: takes "inf", no limit (CTL_FOREVER) */
    const char *def;   /* the default, NULL: none (zero) */
    const char *env;   /* the variable that overrides the default */
    unsigned commands; /* ON(CTL_…) of each command that takes it; ALL */
    const char *help;
} rows[] = {
    /* leasectl's own: the connection and the output. */
    {.name = "url", .value = "HOST:PORT[,…]", .kind = TEXT,
     .field = FIELD(url), .def = "127.0.0.1:7443", .env = "LEASED_URL",
     .commands = ALL, .help = "the daemon(s), or unix:/PATH"},
    {.name = "tls-ca", .value = "FILE", .kind = TEXT,
     .field = FIELD(tls_ca_file), .commands = ALL,
     .help = "TLS, trusting these CA certificates"},
    {.name = "tls-cert", .value = "FILE", .kind = TEXT,
     .field = FIELD(tls_cert_file), .commands = ALL,
     .help = "a client certificate (mutual TLS), with --tls-key"},
    {.name = "tls-key", .value = "FILE", .kind = TEXT,
     .field = FIELD(tls_key_file), .commands = ALL,
     .help = "the key of --tls-cert"},
    {.name = "tls-server-name", .value = "N", .kind = TEXT,
     .field = FIELD(tls_server_name), .commands = ALL,
     .help = "the name in the server's certificate"},
    {.name = "token-file", .value = "FILE", .kind = TEXT,
     .field = FIELD(token_file), .env = "LEASED_TOKEN_FILE",
     .commands = ALL,
     .help = "a bearer token (the first line that is not a comment)"},
    {.name = "timeout", .value = "D", .kind = DURATION,
     .field = FIELD(timeout_ns), .min_ms = 1, .def = "5s", .commands = ALL,
     .help = "the most the command waits for the service, connecting "
             "included (with --wait, on top of the wait)"},
    {.name = "json", .kind = FLAG, .field = FIELD(json), .commands = ALL,
     .help = "one JSON object per result, for scripts"},
    {.name = "help", .kind = FLAG, .field = FIELD(help), .commands = ALL,
     .help = "this (also -h); `leasectl help COMMAND` for a command"},
    {.name = "version", .kind = FLAG, .field = FIELD(version),
     .commands = ALL, .help = "print leasectl's version"},
    /* The commands'. */
    {.name = "owner", .value = "O", .kind = TEXT, .field = FIELD(owner),
     .commands = ON(CTL_ACQUIRE) | ON(CTL_RENEW) | ON(CTL_RELEASE) |
                 ON(CTL_HOLD),
     .help = "act as owner O (default: $LEASE_OWNER, else USER@HOST; for "
             "hold, USER@HOST/PID-NONCE)"},
    {.name = "token", .value = "N", .kind = NUMBER, .field = FIELD(token),
     .commands = ON(CTL_RENEW) | ON(CTL_RELEASE) | ON(CTL_REVOKE),
     .help = "the lease with fencing token N only (default: renew and "
             "release, the one the owner holds now; revoke, any)"},
    {.name = "wait", .value = "D", .kind = DURATION, .field = FIELD(wait_ns),
     .inf = true, .commands = ON(CTL_ACQUIRE) | ON(CTL_HOLD),
     .help = "wait for up to D while another owner holds the lease (inf: "
             "for as long as it takes): in line at leased, granted as the "
             "lease ends; a server without Wait is asked every 250ms"},
    {.name = "limit", .value = "N", .kind = COUNT, .field = FIELD(limit),
     .commands = ON(CTL_LIST) | ON(CTL_WATCH), .help = "the first N only"},
    {.name = "prefix", .value = "P", .kind = TEXT, .field = FIELD(prefix),
     .commands = ON(CTL_WATCH),
     .help = "every session whose id starts with P (\"\": all) instead of "
             "SESSION"},
    {.name = "after", .value = "N", .kind = NUMBER, .field = FIELD(after),
     .commands = ON(CTL_WATCH),
     .help = "the changes after revision N (default: from now on)"},
    {.name = "grace", .value = "D", .kind = DURATION,
     .field = FIELD(grace_ns), .min_ms = 1, .commands = ON(CTL_HOLD),
     .help = "from SIGTERM to SIGKILL of CMD's group, which comes at the "
             "lease's deadline; at most half the TTL (default: 5s, or a "
             "tenth of the TTL if less)"},
    {.name = "ttl", .value = "D", .kind = DURATION, .field = FIELD(ttl_ns),
     .min_ms = 1, .commands = ON(CTL_HOLD),
     .help = "trust the lease for D only; no longer than the service's TTL "
             "(default: the TTL the service says)"},
};

#define NROWS (sizeof(rows) / sizeof(rows[0]))
static_assert(NROWS <= 32, "a row's bit in the mask of given options");

const char *ctl_command_name(int cmd)
{
    return cmd >= 0 && cmd < CTL_COMMANDS ? commands[cmd].name : NULL;
}

/* ---- Writing the usage (wrapped by core/textwrap) ------------------ */

/* Pads from column *col to column to, or goes to a new line first when
 * *col is past to less 2. */
static void pad(FILE *f, int *col, int to)
{
    if (*col > to - 2) {
        fputc('\n', f);
        *col = 0;
    }
    fprintf(f, "%*s", to - *col, "");
    *col = to;
}

/* "acquire SESSION [--owner O] [--wait D]": the command, its argument,
 * its own options and what comes after them, as units that wrap whole. */
static void synopsis(FILE *f, int *col, int indent, int cmd)
{
    const struct command *c = &commands[cmd];
    textwrap_unit(f, col, WIDTH, indent, c->name, strlen(c->name), true);
    if (c->args != NULL)
        textwrap_unit(f, col, WIDTH, indent, c->args, strlen(c->args), false);
    for (size_t i = 0; i < NROWS; i++) {
        if (rows[i].commands == ALL || !(rows[i].commands & ON(cmd)))
            continue;
        char unit[64];
        int n = snprintf(unit, sizeof(unit), "[--%s%s%s]", rows[i].name,
                         rows[i].value != NULL ? " " : "",
                         rows[i].value != NULL ? rows[i].value : "");
        assert(n > 0 && (size_t)n < sizeof(unit));
        textwrap_unit(f, col, WIDTH, indent, unit, (size_t)n, false);
    }
    if (c->after != NULL)
        textwrap_unit(f, col, WIDTH, indent, c->after, strlen(c->after), false);
}

/* "  --wait D             keep trying…": the row and its help, with its
 * default and variable. */
static void option_line(FILE *f, const struct row *r)
{
    int col = fprintf(f, "  --%s", r->name);
    if (r->value != NULL) {
        fprintf(f, " %s", r->value);
        col += 1 + textwrap_width(r->value, strlen(r->value));
    }
    pad(f, &col, OPTION_COL);
    char text[512];
    if (r->env != NULL && r->def != NULL)
        snprintf(text, sizeof(text), "%s [$%s, else %s]", r->help, r->env,
                 r->def);
    else if (r->env != NULL || r->def != NULL)
        snprintf(text, sizeof(text), "%s [%s%s]", r->help,
                 r->env != NULL ? "$" : "",
                 r->env != NULL ? r->env : r->def);
    else
        snprintf(text, sizeof(text), "%s", r->help);
    textwrap_text(f, &col, WIDTH, OPTION_COL, text);
    fputc('\n', f);
}

static void paragraph(FILE *f, const char *text)
{
    int col = 0;
    textwrap_text(f, &col, WIDTH, 0, text);
    fputc('\n', f);
}

static void usage(FILE *f)
{
    fputs("Usage: leasectl [OPTIONS] COMMAND [ARGS]\n\nCommands:\n", f);
    for (int k = 0; k < CTL_COMMANDS; k++) {
        int col = fprintf(f, "  ");
        synopsis(f, &col, 4, k);
        pad(f, &col, SUMMARY_COL);
        textwrap_text(f, &col, WIDTH, SUMMARY_COL, commands[k].summary);
        fputc('\n', f);
    }
    fputc('\n', f);
    paragraph(f, "The owner is --owner O, else $LEASE_OWNER, else USER@HOST "
                 "(for hold, USER@HOST/PID-NONCE: unique to the run). renew "
                 "and release without --token act on the lease the owner "
                 "holds now.");
    fputs("\nOptions (before or after the command; -- ends them):\n", f);
    for (size_t i = 0; i < NROWS; i++)
        if (rows[i].commands == ALL)
            option_line(f, &rows[i]);
    fputc('\n', f);
    paragraph(f, "Exit: 0 ok, 1 failure, 2 usage, 3 held or lost, 4 "
                 "unavailable or no answer, 5 invalid, 6 not found, 7 not a "
                 "lease service, 8 denied by the policy, 9 not "
                 "authenticated, 10 watch: revision no longer kept.");
}

void ctl_help(FILE *f, int cmd)
{
    if (cmd == CTL_NONE) {
        usage(f);
        return;
    }
    int col = fprintf(f, "Usage: leasectl ");
    synopsis(f, &col, 16, cmd);
    fputc('\n', f);
    paragraph(f, commands[cmd].help);
    bool header = false;
    for (size_t i = 0; i < NROWS; i++) {
        if (rows[i].commands == ALL || !(rows[i].commands & ON(cmd)))
            continue;
        if (!header)
            fputc('\n', f);
        header = true;
        option_line(f, &rows[i]);
    }
    fputc('\n', f);
    paragraph(f, "leasectl's own options (see leasectl help) may come "
                 "before or after\nthe command; -- ends the options.");
}

int ctl_usage(int cmd, const char *fmt, ...)
{
    fprintf(stderr, "leasectl: ");
    if (cmd != CTL_NONE)
        fprintf(stderr, "%s: ", commands[cmd].name);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (cmd != CTL_NONE)
        fprintf(stderr, "\nTry 'leasectl help %s'.\n", commands[cmd].name);
    else
        fputs("\nTry 'leasectl help'.\n", stderr);
    return EXIT_USAGE;
}

/* ---- Parsing -------------------------------------------------------- */

/* Sets r's field in *a from text; false if text is no value of r's. */
static bool set(struct ctl_args *a, const struct row *r, const char *text)
{
    void *field = (char *)a + r->field;
    char *end;
    switch (r->kind) {
    case FLAG:
        *(bool *)field = true;
        return true;
    case TEXT:
        *(const char **)field =
            text[0] == '\0' && r->def != NULL ? r->def : text;
        return true;
    case DURATION:
        if (r->inf && strcmp(text, "inf") == 0) {
            *(int64_t *)field = CTL_FOREVER;
            return true;
        }
        return duration_parse(text, (int64_t *)field) == 0 &&
               *(int64_t *)field >= r->min_ms * 1000000;
    case COUNT:
        errno = 0;
        *(long *)field = strtol(text, &end, 10);
        return errno == 0 && *end == '\0' && text[0] != '\0' &&
               *(long *)field >= 1;
    case NUMBER: {
        struct ctl_number *num = field;
        errno = 0;
        num->value = strtoull(text, &end, 10);
        num->set = true;
        return errno == 0 && *end == '\0' && text[0] != '\0' &&
               text[0] != '-';
    }
    }
    return false;
}

/* Says on stderr that text is no value of r's (from what: "--url",
 * "$LEASED_URL"), for command cmd; returns EXIT_USAGE. */
static int bad_value(int cmd, const struct row *r, const char *what,
                     const char *text)
{
    switch (r->kind) {
    case DURATION:
        if (r->min_ms > 0)
            return ctl_usage(cmd, "%s: not a duration from %lldms to %dh: %s",
                             what, (long long)r->min_ms, DURATION_MAX_HOURS,
                             text);
        return ctl_usage(cmd, "%s: not a duration of at most %dh%s: %s", what,
                         DURATION_MAX_HOURS, r->inf ? ", nor inf" : "", text);
    case COUNT:
        return ctl_usage(cmd, "%s: not a number above 0: %s", what, text);
    default:
        return ctl_usage(cmd, "%s: not a number: %s", what, text);
    }
}

/* What getopt_long (opterr 0, optstring starting with ":") returned
 * instead of a row's value: '?' or ':'. */
static int bad_option(int cmd, int opt, char **argv)
{
    /* optind is past the option in error; optopt is the long option's
     * value, 0 when unknown (or ambiguous). */
    const char *arg = argv[optind - 1];
    int n = (int)strcspn(arg, "=");
    if (opt == ':')
        return ctl_usage(cmd, "option %s needs a value", arg);
    if (strncmp(arg, "--", 2) == 0 && optopt == 0)
        return ctl_usage(cmd, "unknown option %.*s", n, arg);
    if (strncmp(arg, "--", 2) == 0 && arg[n] == '=')
        return ctl_usage(cmd, "option %.*s takes no value", n, arg);
    return ctl_usage(cmd, "unknown option -%c", optopt);
}

/* A word that is not an option: "help" (before the command), the
 * command, else its argument (the first beyond what it takes into
 * *unexpected). */
static int word(struct ctl_args *a, char *w, const char **unexpected)
{
    if (a->cmd == CTL_NONE && !a->help && strcmp(w, "help") == 0) {
        a->help = true; /* and the next word, if any, is the command */
        return EXIT_OK;
    }
    if (a->cmd == CTL_NONE) {
        for (int k = 0; k < CTL_COMMANDS; k++) {
            if (strcmp(commands[k].name, w) == 0) {
                a->cmd = k;
                return EXIT_OK;
            }
        }
        return ctl_usage(CTL_NONE, "unknown command %s", w);
    }
    if (a->arg == NULL && commands[a->cmd].max > 0)
        a->arg = w;
    else if (a->arg2 == NULL && commands[a->cmd].max > 1)
        a->arg2 = w;
    else if (*unexpected == NULL)
        *unexpected = w;
    return EXIT_OK;
}

int ctl_parse(int argc, char **argv, struct ctl_args *a)
{
    *a = (struct ctl_args){.cmd = CTL_NONE};
    struct option longopts[NROWS + 1];
    for (size_t i = 0; i < NROWS; i++) {
        const struct row *r = &rows[i];
        if (r->def != NULL) {
            bool ok = set(a, r, r->def);
            assert(ok);
            (void)ok;
        }
        const char *env = r->env != NULL ? getenv(r->env) : NULL;
        if (env != NULL && env[0] != '\0' && !set(a, r, env)) {
            char what[64];
            snprintf(what, sizeof(what), "$%s", r->env);
            return bad_value(CTL_NONE, r, what, env);
        }
        longopts[i] = (struct option){
            r->name, r->kind == FLAG ? no_argument : required_argument, NULL,
            FIRST_VAL + (int)i};
    }
    longopts[NROWS] = (struct option){NULL, 0, NULL, 0};

    uint32_t given = 0; /* a bit per row */
    const char *unexpected = NULL;
    opterr = 0;  /* our messages, not getopt's */
    optind = 0;  /* getopt starts afresh */
    for (;;) {
        int i = optind > 0 ? optind : 1;
        if (i >= argc)
            break;
        if (strcmp(argv[i], "--") == 0) {
            if (a->cmd != CTL_NONE && commands[a->cmd].after != NULL) {
                a->run = argv + i + 1; /* CMD: up to argv's NULL */
                break;
            }
            for (i++; i < argc; i++) {
                int rc = word(a, argv[i], &unexpected);
                if (rc != EXIT_OK)
                    return rc;
            }
            break;
        }
        if (argv[i][0] != '-' || argv[i][1] == '\0') {
            int rc = word(a, argv[i], &unexpected);
            if (rc != EXIT_OK)
                return rc;
            optind = i + 1; /* getopt goes on after it */
            continue;
        }
        /* "+": never passes over a word (we take those above). */
        int opt = getopt_long(argc, argv, "+:h", longopts, NULL);
        if (opt == -1)
            break;
        if (opt == 'h') {
            a->help = true;
            return EXIT_OK;
        }
        if (opt < FIRST_VAL)
            return bad_option(a->cmd, opt, argv);
        const struct row *r = &rows[opt - FIRST_VAL];
        if (!set(a, r, optarg)) {
            char what[64];
            snprintf(what, sizeof(what), "--%s", r->name);
            return bad_value(a->cmd, r, what, optarg);
        }
        if (r->field == FIELD(help) || r->field == FIELD(version))
            return EXIT_OK;
        given |= UINT32_C(1) << (opt - FIRST_VAL);
    }

    if (a->help) /* `help [COMMAND]` */
        return EXIT_OK;
    if (a->cmd == CTL_NONE)
        return ctl_usage(CTL_NONE, "missing COMMAND");
    const struct command *c = &commands[a->cmd];
    for (size_t i = 0; i < NROWS; i++)
        if ((given >> i & 1) && !(rows[i].commands & ON(a->cmd)))
            return ctl_usage(a->cmd, "%s takes no --%s", c->name,
                             rows[i].name);
    if (c->after != NULL && (a->run == NULL || a->run[0] == NULL))
        return ctl_usage(a->cmd, "missing -- CMD");
    if (c->need != NULL &&
        (a->arg == NULL || (c->max > 1 && a->arg2 == NULL)))
        return ctl_usage(a->cmd, "missing %s", c->need);
    if (a->cmd == CTL_WATCH && (a->arg == NULL) == (a->prefix == NULL))
        return ctl_usage(a->cmd, "want SESSION or --prefix P");
    if (a->cmd == CTL_SNAPSHOT && strcmp(a->arg, "save") != 0)
        return ctl_usage(a->cmd, "want save FILE, not %s", a->arg);
    if (unexpected != NULL)
        return ctl_usage(a->cmd, "unexpected argument %s", unexpected);
    /* Said here in leasectl's words, not liblease's (tls_cert_file…). */
    if ((a->tls_cert_file == NULL) != (a->tls_key_file == NULL))
        return ctl_usage(a->cmd, "--tls-cert and --tls-key go together");
    if (a->tls_cert_file != NULL && a->tls_ca_file == NULL)
        return ctl_usage(a->cmd, "--tls-cert needs --tls-ca (TLS)");
    return EXIT_OK;
}
