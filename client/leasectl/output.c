/*
 * What leasectl prints of a lease, as text for a person or JSON for a
 * script, and the escaping that keeps a name from acting on a terminal.
 * Not here: getting the lease (leasectl.c).
 *
 * 1. Session ids and owners are any UTF-8 but NUL (docs/protocol.md), so
 *    they may hold control characters. In text they are shown escaped:
 *    C0 controls and DEL as \n, \t, \r or \xNN, C1 controls as \uNNNN,
 *    a backslash as \\, and, in a string that is not UTF-8 (from a server
 *    other than leased), every byte above 0x7f as \xNN. So a name never
 *    colours the terminal, moves its cursor, or forges a line. JSON
 *    escapes them its own way (json.c).
 * 2. A line says what holds now: an expired lease is "expired", and a
 *    live one whose expiry the restart quarantine outlasts says until
 *    when it is live, and why (docs/protocol.md, "Restart quarantine").
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "json.h"
#include "leasectl.h"
#include "validate.h"

const char *ctl_escaped(const char *s, char *buf, size_t len)
{
    size_t n = strlen(s);
    bool utf8 = n == 0 || validate_string((const unsigned char *)s, n, n) ==
                              NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        unsigned char next = (unsigned char)s[i + 1];
        char piece[8];
        if (ch == '\\')
            snprintf(piece, sizeof(piece), "\\\\");
        else if (ch == '\n')
            snprintf(piece, sizeof(piece), "\\n");
        else if (ch == '\t')
            snprintf(piece, sizeof(piece), "\\t");
        else if (ch == '\r')
            snprintf(piece, sizeof(piece), "\\r");
        else if (ch < 0x20 || ch == 0x7f || (!utf8 && ch > 0x7f))
            snprintf(piece, sizeof(piece), "\\x%02x", ch);
        else if (utf8 && ch == 0xc2 && next >= 0x80 && next <= 0x9f)
            snprintf(piece, sizeof(piece), "\\u%04x", s[++i] & 0xff);
        else
            snprintf(piece, sizeof(piece), "%c", ch);
        size_t p = strlen(piece);
        if (k + p >= len)
            break;
        memcpy(buf + k, piece, p);
        k += p;
    }
    if (len > 0)
        buf[k] = '\0';
    return buf;
}

/* "2026-11-30T17:00:00.123456789Z" */
static void format_time(int64_t ns, char *out, size_t len)
{
    time_t s = (time_t)(ns / 1000000000);
    struct tm tm;
    gmtime_r(&s, &tm);
    char day[32];
    strftime(day, sizeof(day), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, len, "%s.%09lldZ", day, (long long)(ns % 1000000000));
}

/* "2026-11-30T17:00:00.123456789Z (in 3.5s)", or "(3.5s ago)". */
static void format_when(int64_t ns, int64_t now_ns, char *out, size_t len)
{
    char when[48];
    format_time(ns, when, sizeof(when));
    double s = (double)(ns - now_ns) / 1e9;
    if (s >= 0)
        snprintf(out, len, "%s (in %.1fs)", when, s);
    else
        snprintf(out, len, "%s (%.1fs ago)", when, -s);
}

void ctl_print_view(const struct ctl *c, const struct ctl_view *v)
{
    int64_t until = v->expiry_ns > v->quarantine_end_ns
                        ? v->expiry_ns
                        : v->quarantine_end_ns;
    char when[48];
    format_time(v->expiry_ns, when, sizeof(when));
    if (c->args.json) {
        printf("{\"session_id\":");
        json_put_string(stdout, v->session_id);
        printf(",\"owner\":");
        json_put_string(stdout, v->owner);
        printf(",\"token\":%" PRIu64 ",\"expiry\":\"%s\",\"expiry_ns\":%lld",
               v->token, when, (long long)v->expiry_ns);
        if (v->live >= 0)
            printf(",\"live\":%s", v->live ? "true" : "false");
        if (v->live > 0) {
            format_time(until, when, sizeof(when));
            printf(",\"live_until\":\"%s\",\"live_until_ns\":%lld", when,
                   (long long)until);
        }
        printf("}\n");
        return;
    }
    char session[CTL_ESCAPED_LEN(LEASE_SESSION_MAX)];
    char owner[CTL_ESCAPED_LEN(LEASE_OWNER_MAX)];
    printf("%s  owner %s  token %" PRIu64 "  ",
           ctl_escaped(v->session_id, session, sizeof(session)),
           ctl_escaped(v->owner, owner, sizeof(owner)), v->token);
    int64_t now = nanotime_wall();
    char expiry[80], live_until[80];
    format_when(v->expiry_ns, now, expiry, sizeof(expiry));
    format_when(until, now, live_until, sizeof(live_until));
    if (v->live == 0)
        printf("expired %s\n", expiry);
    else if (v->live < 0 || (until == v->expiry_ns && until > now))
        printf("expires %s\n", expiry);
    else if (until > now)
        printf("live until %s: restart quarantine; expiry %s\n", live_until,
               expiry);
    else /* the quarantine's end unknown, or just passed */
        printf("live past its expiry %s: restart quarantine\n", expiry);
}

void ctl_print_event(const struct ctl *c, const struct lease_event *ev)
{
    static const char *const kinds[] = {[LEASE_GRANTED] = "granted",
                                        [LEASE_RELEASED] = "released",
                                        [LEASE_EXPIRED] = "expired",
                                        [LEASE_REVOKED] = "revoked"};
    const char *kind = ev->kind >= LEASE_GRANTED && ev->kind <= LEASE_REVOKED
                           ? kinds[ev->kind]
                           : "changed"; /* a kind of a later leased */
    const struct lease *l = &ev->lease;
    char when[48];
    format_time(l->expiry_ns, when, sizeof(when));
    if (c->args.json) {
        printf("{\"revision\":%" PRIu64 ",\"kind\":\"%s\",\"session_id\":",
               ev->revision, kind);
        json_put_string(stdout, l->session_id);
        printf(",\"owner\":");
        json_put_string(stdout, l->owner);
        printf(",\"token\":%" PRIu64 ",\"expiry\":\"%s\",\"expiry_ns\":%lld}\n",
               l->token, when, (long long)l->expiry_ns);
        return;
    }
    char session[CTL_ESCAPED_LEN(LEASE_SESSION_MAX)];
    char owner[CTL_ESCAPED_LEN(LEASE_OWNER_MAX)];
    printf("%" PRIu64 "  %s  %s  owner %s  token %" PRIu64, ev->revision, kind,
           ctl_escaped(l->session_id, session, sizeof(session)),
           ctl_escaped(l->owner, owner, sizeof(owner)), l->token);
    if (ev->kind == LEASE_GRANTED)
        printf("  expires %s", when);
    printf("\n");
}

void ctl_print_lease(const struct ctl *c, const struct lease *l)
{
    struct ctl_view v = {.session_id = l->session_id, .owner = l->owner,
                         .token = l->token, .expiry_ns = l->expiry_ns,
                         .live = -1};
    ctl_print_view(c, &v);
}
