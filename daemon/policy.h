/*
 * The policy file (--policy-file): what each caller (identity.h) may do.
 * Without one, every authenticated caller may do everything.
 *
 * One rule per line, fields separated by blanks (spaces, tabs, and
 * carriage returns, so that CRLF files work); a field starting with '#'
 * comments out the rest of its line:
 *
 *   IDENTITY [sessions=PREFIX[,PREFIX...]] [owners=PREFIX[,PREFIX...]]
 *            [admin=none|read|write]
 *
 * A call is allowed when its session id starts with one of the caller's
 * session prefixes and (Acquire, Renew, Release) its owner with one of
 * its owner prefixes. admin=read allows the admin service's reads: Get
 * of its own sessions, List (which shows only them) and Stats
 * (service-wide counts, no session); admin=write those and Revoke of its
 * own sessions, whoever holds them. A field left out allows nothing; `*`
 * as the whole value of sessions= or owners= allows everything. Prefixes are literal bytes, matched exactly,
 * and may hold neither '"', ',' nor blanks; `*` is only ever the whole
 * value, and an empty prefix is an error.
 *
 * IDENTITY is matched exactly; `*` is the rule for every identity
 * without a line of its own (the empty identity of a caller with no
 * token and no certificate included). An identity with no rule may do
 * nothing. An identity is 1..IDENTITY_MAX printable ASCII characters
 * other than '"', '\' and '='. No identity may have two rules, and a file
 * with no rule at all is refused (it would refuse every call).
 *
 * The file must not be writable by group or others (whoever can write it
 * can grant themselves anything). Errors name the file and the line.
 *
 * Reloads swap the whole rule set at once; a call is decided by one set,
 * and a List keeps its set (policy_release) until its answer is sent.
 */
#ifndef LEASED_POLICY_H
#define LEASED_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "request.h"

#define POLICY_FILE_MAX (1024 * 1024)

struct policy;
struct policy_rule;

/* Reads path (borrowed; kept for reloads). Returns NULL with errmsg set
 * when the file is missing, unreadable, writable by others, too large,
 * has no rule, or has a bad line. */
struct policy *policy_load(const char *path, char *errmsg, size_t len);

/* Parses text (text_len bytes, borrowed; not NUL-terminated) as
 * policy_load() parses a file; name stands for the file in messages. The
 * policy has no file to reload. For tests and fuzzing. */
struct policy *policy_parse(const char *name, const char *text,
                            size_t text_len, char *errmsg, size_t len);

/* Reads the file again; on any error the old rules stay and errmsg says
 * why. Returns 0 or -1. */
int policy_reload(struct policy *p, char *errmsg, size_t len);

/* Rules in force. */
size_t policy_count(struct policy *p);

/* Whether req (decoded, its identity set) is within the policy. If not,
 * returns false with req->status and req->reason set (PERMISSION_DENIED),
 * and counts the denial. A List may come back with req->list_rule set
 * (hold it until the answer is sent, then policy_release() it), and its
 * prefix narrowed to the one prefix of the caller's it can reach. Any
 * thread. */
bool policy_authorize(struct policy *p, struct request *req);

/* Whether rule lets its caller see session (n bytes). */
bool policy_visible(const struct policy_rule *rule, const char *session,
                    size_t n);

/* Lets go of a rule policy_authorize() handed out. Accepts NULL. */
void policy_release(const struct policy_rule *rule);

/* Writes the denial counters in the Prometheus text format:
 * leased_permission_denied_total{identity="..."} for each identity with
 * a rule of its own, and identity="*" for every other. Any thread. */
void policy_write_metrics(struct policy *p, FILE *f);

/* Once nothing uses it any more. Accepts NULL. */
void policy_free(struct policy *p);

#endif
