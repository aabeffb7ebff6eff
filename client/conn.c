/* Targets, TLS, token and failover of a lease service client (see
 * conn.h). */
#include "conn.h"

#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "addr.h"
#include "errmsg.h"
#include "grpc/health/v1/health.pb-c.h"
#include "nanotime.h"
#include "stream.h"
#include "unary.h"

#define DEFAULT_TIMEOUT_MS 5000
#define PEM_MAX (1024 * 1024)
#define TOKEN_MAX 4096
#define RECONNECT_MIN_MS 100
#define RECONNECT_MAX_MS 1000
#define CONNECT_MIN_MS 1000 /* the least time a connection attempt gets */
#define RETRY_PAUSE_MS 100 /* the least a round of retries takes */
/* A stream's: longer than leased's linger between the last call of a
 * drain and its shutdown (200 ms), which a watcher asking again more
 * often would hold off until --drain-timeout. */
#define STREAM_RETRY_PAUSE_MS 500
#define WAIT_SLICE_MS 250  /* waiting for one target to connect */

static char *read_pem(const char *path)
{
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return NULL;
    char *buf = malloc(PEM_MAX + 1);
    size_t n = buf != NULL ? fread(buf, 1, PEM_MAX, f) : 0;
    bool bad = ferror(f) || n == 0;
    fclose(f);
    if (buf == NULL || bad) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

grpc_channel_credentials *conn_credentials(const struct lease_grpc_options *o,
                                           char *errmsg, size_t len)
{
    if (o == NULL || o->tls_ca_file == NULL) {
        if (o != NULL && (o->tls_cert_file || o->tls_key_file)) {
            snprintf(errmsg, len,
                     "a client certificate needs tls_ca_file (TLS)");
            return NULL;
        }
        return grpc_insecure_credentials_create();
    }
    if ((o->tls_cert_file == NULL) != (o->tls_key_file == NULL)) {
        snprintf(errmsg, len, "tls_cert_file and tls_key_file go together");
        return NULL;
    }
    const char *files[3] = {o->tls_ca_file, o->tls_cert_file,
                            o->tls_key_file};
    char *pem[3] = {NULL, NULL, NULL};
    grpc_channel_credentials *creds = NULL;
    size_t i;
    for (i = 0; i < 3; i++) {
        if (files[i] != NULL && (pem[i] = read_pem(files[i])) == NULL)
            break;
    }
    if (i < 3) {
        snprintf(errmsg, len, "cannot read %s", files[i]);
    } else {
        grpc_ssl_pem_key_cert_pair pair = {pem[2], pem[1]};
        creds = grpc_ssl_credentials_create_ex(
            pem[0], pem[1] != NULL ? &pair : NULL, NULL, NULL);
        if (creds == NULL)
            snprintf(errmsg, len, "bad TLS files");
    }
    if (pem[2] != NULL)
        explicit_bzero(pem[2], strlen(pem[2]));
    for (i = 0; i < 3; i++)
        free(pem[i]);
    return creds;
}

static bool token_ok(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n > TOKEN_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = t[i];
        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
              (ch >= '0' && ch <= '9') || strchr("-._~+/=", ch) != NULL))
            return false;
    }
    return true;
}

/* Splits target at commas into c->channels, each checked against the
 * plaintext rule unless TLS. */
static int open_targets(struct conn *c, const char *target,
                        const struct lease_grpc_options *o,
                        grpc_channel_credentials *creds, char *errmsg,
                        size_t len)
{
    bool tls = o != NULL && o->tls_ca_file != NULL;
    /* Reconnect soon after a server comes back (a restart takes about a
     * second, far less than a TTL): gRPC would otherwise back off for up
     * to two minutes, and a holder's renewals fail meanwhile. */
    grpc_arg args_v[6] = {
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
         .value.integer = RECONNECT_MIN_MS},
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
         .value.integer = RECONNECT_MAX_MS},
        /* gRPC 1.51 connects again only after resolving the name again,
         * which it does at most every 30 s by default. */
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS,
         .value.integer = RECONNECT_MAX_MS},
        /* An attempt to connect gives up after a call's deadline (not
         * gRPC's 20 s): a server that drops packets then fails calls at
         * once, so the next target is tried, and a destroyed client's
         * attempt ends soon. */
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
         .value.integer = c->timeout_ms < CONNECT_MIN_MS ? CONNECT_MIN_MS
                                                         : c->timeout_ms},
        /* An admin Snapshot is the whole database in one message (gRPC's
         * default allows 4 MiB). */
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
         .value.integer = CONN_MAX_RECEIVE_BYTES},
        {.type = GRPC_ARG_STRING, .key = GRPC_SSL_TARGET_NAME_OVERRIDE_ARG},
    };
    grpc_channel_args args = {5, args_v};
    if (tls && o->tls_server_name != NULL) {
        args_v[5].value.string = (char *)o->tls_server_name;
        args.num_args = 6;
    }
    const char *p = target;
    for (;;) {
        size_t n = strcspn(p, ",");
        char one[512], why[200];
        if (n == 0 || n >= sizeof(one))
            return errmsg_fail(LEASE_EINVAL, errmsg, len,
                               "target %s: an empty or too long address",
                               target);
        if (c->ntargets == CONN_MAX_TARGETS)
            return errmsg_fail(LEASE_EINVAL, errmsg, len,
                               "target %s: more than %d addresses", target,
                               CONN_MAX_TARGETS);
        memcpy(one, p, n);
        one[n] = '\0';
        bool plaintext_ok;
        if (addr_check(one, &plaintext_ok, why, sizeof(why)) != 0)
            return errmsg_fail(LEASE_EINVAL, errmsg, len, "target %s: %s", one,
                               why);
        if (!plaintext_ok && !tls)
            return errmsg_fail(
                LEASE_EINVAL, errmsg, len,
                "target %s: not a loopback address: plaintext is "
                "allowed only on loopback or a unix socket (give "
                "tls_ca_file for TLS)",
                one);
        c->channels[c->ntargets++] = grpc_channel_create(one, creds, &args);
        if (p[n] == '\0')
            return LEASE_OK;
        p += n + 1;
    }
}

int conn_open(struct conn *c, const char *target,
              const struct lease_grpc_options *o, char *errmsg, size_t len)
{
    grpc_init();
    c->timeout_ms = o != NULL && o->timeout_ms > 0 ? o->timeout_ms
                                                   : DEFAULT_TIMEOUT_MS;
    int err = LEASE_OK;
    if (target == NULL)
        err = errmsg_fail(LEASE_EINVAL, errmsg, len, "target is NULL");
    else if (o != NULL && o->token != NULL && !token_ok(o->token))
        err = errmsg_fail(LEASE_EINVAL, errmsg, len,
                          "token: 1..%d characters of A-Z a-z 0-9 "
                          "-._~+/=",
                          TOKEN_MAX);
    if (err == LEASE_OK && o != NULL && o->token != NULL) {
        char value[TOKEN_MAX + 8];
        snprintf(value, sizeof(value), "Bearer %s", o->token);
        c->auth.key = grpc_slice_from_static_string("authorization");
        c->auth.value = grpc_slice_from_copied_string(value);
        explicit_bzero(value, sizeof(value));
        c->has_token = true;
    }
    grpc_channel_credentials *creds =
        err == LEASE_OK ? conn_credentials(o, errmsg, len) : NULL;
    if (err == LEASE_OK)
        err = creds != NULL
                  ? open_targets(c, target, o, creds, errmsg, len)
                  : LEASE_EINVAL;
    if (creds != NULL)
        grpc_channel_credentials_release(creds);
    if (err != LEASE_OK)
        conn_close(c);
    return err;
}

void conn_close(struct conn *c)
{
    for (size_t t = 0; t < c->ntargets; t++)
        grpc_channel_destroy(c->channels[t]);
    c->ntargets = 0;
    if (c->has_token) {
        grpc_slice_unref(c->auth.key);
        grpc_slice_unref(c->auth.value);
        c->has_token = false;
    }
    grpc_shutdown();
}

/* Sleeps until the monotonic time ms, if later than now; returns now. */
static int64_t pause_until(int64_t ms)
{
    int64_t now = nanotime_mono_ms();
    if (now < ms) {
        struct timespec ts = {(ms - now) / 1000, (ms - now) % 1000 * 1000000};
        nanosleep(&ts, NULL);
        now = nanotime_mono_ms();
    }
    return now;
}

/* deadline, or slice from now if sooner. */
static gpr_timespec deadline_in(int64_t end_ms, int64_t slice_ms)
{
    int64_t now = nanotime_mono_ms();
    int64_t until = now + slice_ms < end_ms ? now + slice_ms : end_ms;
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                        gpr_time_from_millis(until - now, GPR_TIMESPAN));
}

grpc_status_code conn_call(struct conn *c, const char *path, int64_t end_ns,
                           const ProtobufCMessage *req,
                           const ProtobufCMessageDescriptor *desc,
                           ProtobufCMessage **resp, int64_t *ttl_ns,
                           char *details, size_t details_len)
{
    int64_t end = nanotime_mono_ms() + c->timeout_ms;
    if (end_ns > 0 && end_ns / 1000000 < end)
        end = end_ns / 1000000;
    size_t first = atomic_load(&c->current);
    const grpc_metadata *md = c->has_token ? &c->auth : NULL;
    /* First every target at once, failing fast: a live one answers, or
     * the next is tried. With several, one not connected yet gets its
     * share of the time only: a host that drops packets never answers
     * (were the call to get through late, repeating it elsewhere is
     * safe). */
    for (size_t k = 0; k < c->ntargets; k++) {
        size_t t = (first + k) % c->ntargets;
        bool share = c->ntargets > 1 &&
                     grpc_channel_check_connectivity_state(
                         c->channels[t], 0) != GRPC_CHANNEL_READY;
        int64_t slice = c->timeout_ms / (share ? (int64_t)c->ntargets : 1);
        grpc_status_code status =
            unary_call(c->channels[t], path, md, c->has_token, false, req,
                       desc, deadline_in(end, slice), resp, ttl_ns, details,
                       details_len);
        if (status != GRPC_STATUS_UNAVAILABLE &&
            !(share && status == GRPC_STATUS_DEADLINE_EXCEEDED)) {
            if (t != first)
                atomic_store(&c->current, t);
            return status;
        }
    }
    /* All unavailable: until the deadline, in turn, wait a while for
     * each to connect (a server restarting takes about a second; gRPC
     * 1.51 connects again only for calls that wait). A round takes at
     * least RETRY_PAUSE_MS: servers that answer UNAVAILABLE at once
     * (storage failing, draining) are asked again ten times a second,
     * not as fast as they answer; the last ends at the deadline, not
     * before it. The first round's reason is the one reported if none
     * comes back. */
    char why[256];
    snprintf(why, sizeof(why), "%s", details);
    for (int64_t round = nanotime_mono_ms(); round < end;
         round = pause_until(round + RETRY_PAUSE_MS < end
                                 ? round + RETRY_PAUSE_MS
                                 : end)) {
        for (size_t k = 0; k < c->ntargets && nanotime_mono_ms() < end; k++) {
            size_t t = (first + k) % c->ntargets;
            grpc_status_code status = unary_call(
                c->channels[t], path, md, c->has_token, true, req, desc,
                deadline_in(end, WAIT_SLICE_MS), resp, ttl_ns, details,
                details_len);
            if (status != GRPC_STATUS_UNAVAILABLE &&
                status != GRPC_STATUS_DEADLINE_EXCEEDED) {
                if (t != first)
                    atomic_store(&c->current, t);
                return status;
            }
        }
    }
    snprintf(details, details_len, "%s", why);
    return GRPC_STATUS_UNAVAILABLE;
}

grpc_status_code conn_call_long(struct conn *c, const char *path,
                                int64_t end_ns, const ProtobufCMessage *req,
                                const ProtobufCMessageDescriptor *desc,
                                ProtobufCMessage **resp, int64_t *ttl_ns,
                                char *details, size_t details_len)
{
    int64_t end = end_ns == INT64_MAX ? INT64_MAX : end_ns / 1000000;
    size_t first = atomic_load(&c->current);
    const grpc_metadata *md = c->has_token ? &c->auth : NULL;
    char why[256] = "";
    for (int64_t round = nanotime_mono_ms();;) {
        for (size_t k = 0; k < c->ntargets; k++) {
            size_t t = (first + k) % c->ntargets;
            int64_t now = nanotime_mono_ms();
            gpr_timespec deadline = end == INT64_MAX
                                        ? gpr_inf_future(GPR_CLOCK_MONOTONIC)
                                        : deadline_in(end, end - now);
            /* Not wait_for_ready: a target that refuses connections
             * fails at once, and the next is tried. */
            grpc_status_code status =
                unary_call(c->channels[t], path, md, c->has_token, false, req,
                           desc, deadline, resp, ttl_ns, details, details_len);
            if (status != GRPC_STATUS_UNAVAILABLE) {
                if (t != first)
                    atomic_store(&c->current, t);
                return status;
            }
            if (why[0] == '\0')
                snprintf(why, sizeof(why), "%s", details);
        }
        if (nanotime_mono_ms() >= end)
            break;
        round = pause_until(
            end - round > RETRY_PAUSE_MS ? round + RETRY_PAUSE_MS : end);
    }
    snprintf(details, details_len, "%s", why);
    return GRPC_STATUS_UNAVAILABLE;
}

/* Has ch connect (gRPC 1.51 connects again only when asked), waiting up
 * to ms, or until end_ms if sooner, for it to be ready. */
static void connect_within(grpc_channel *ch, int64_t ms, int64_t end_ms)
{
    grpc_connectivity_state s = grpc_channel_check_connectivity_state(ch, 1);
    if (s == GRPC_CHANNEL_READY)
        return;
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    gpr_timespec deadline = deadline_in(end_ms, ms);
    while (s != GRPC_CHANNEL_READY && s != GRPC_CHANNEL_SHUTDOWN) {
        grpc_channel_watch_connectivity_state(ch, s, deadline, cq, NULL);
        grpc_event ev = grpc_completion_queue_next(
            cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (!ev.success)
            break; /* the deadline */
        s = grpc_channel_check_connectivity_state(ch, 1);
    }
    grpc_completion_queue_shutdown(cq);
    while (
        grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
            .type != GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
}

grpc_status_code conn_stream(struct conn *c, const char *path, int64_t end_ns,
                             const ProtobufCMessage *req,
                             const ProtobufCMessageDescriptor *desc,
                             int (*on_msg)(void *arg, ProtobufCMessage *msg),
                             void *arg, char *details, size_t details_len)
{
    int64_t end = end_ns == INT64_MAX ? INT64_MAX : end_ns / 1000000;
    const grpc_metadata *md = c->has_token ? &c->auth : NULL;
    char why[256] = "";
    for (int64_t round = nanotime_mono_ms();;) {
        size_t first = atomic_load(&c->current);
        for (size_t k = 0; k < c->ntargets; k++) {
            size_t t = (first + k) % c->ntargets;
            connect_within(c->channels[t], WAIT_SLICE_MS, end);
            int64_t now = nanotime_mono_ms();
            gpr_timespec deadline = end == INT64_MAX
                                        ? gpr_inf_future(GPR_CLOCK_MONOTONIC)
                                        : deadline_in(end, end - now);
            bool stopped;
            size_t received;
            grpc_status_code status = stream_call(
                c->channels[t], path, md, c->has_token, req, desc, deadline,
                on_msg, arg, &stopped, &received, details, details_len);
            if (stopped)
                return GRPC_STATUS_OK;
            if (status != GRPC_STATUS_UNAVAILABLE) {
                if (t != first)
                    atomic_store(&c->current, t);
                return status;
            }
            if (received > 0) { /* it served a while: its reason is news */
                atomic_store(&c->current, t);
                snprintf(why, sizeof(why), "%s", details);
                round = nanotime_mono_ms();
            } else if (why[0] == '\0') {
                snprintf(why, sizeof(why), "%s", details);
            }
        }
        if (nanotime_mono_ms() >= end)
            break;
        round = pause_until(end - round > STREAM_RETRY_PAUSE_MS
                                ? round + STREAM_RETRY_PAUSE_MS
                                : end);
    }
    snprintf(details, details_len, "%s", why);
    return GRPC_STATUS_UNAVAILABLE;
}

/* The reason in gRPC's text for a failed connection, without what it
 * says around it: "failed to connect to all addresses; last error:
 * UNKNOWN: ipv4:127.0.0.1:7443: Failed to connect to remote host:
 * Connection refused" is "Connection refused" (gRPC 1.51; any other
 * text is kept whole). */
static const char *connect_reason(const char *details)
{
    static const char *const skip[] = {"last error: ", ": ", ": ",
                                       "Failed to connect to remote host: "};
    const char *p = details;
    for (size_t i = 0; i < sizeof(skip) / sizeof(skip[0]); i++) {
        const char *at = strstr(p, skip[i]);
        if (at == NULL)
            return i < 3 ? details : p;
        p = at + strlen(skip[i]);
    }
    return p;
}

bool conn_reachable(struct conn *c, int64_t timeout_ms, char *why,
                    size_t len)
{
    int64_t end = nanotime_mono_ms() + timeout_ms;
    Grpc__Health__V1__HealthCheckRequest req =
        GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    for (size_t t = 0; t < c->ntargets; t++) {
        char details[256];
        ProtobufCMessage *resp;
        grpc_status_code status = unary_call(
            c->channels[t], "/grpc.health.v1.Health/Check", NULL, 0, false,
            &req.base, &grpc__health__v1__health_check_response__descriptor,
            deadline_in(end, timeout_ms), &resp, NULL, details,
            sizeof(details));
        if (resp != NULL)
            protobuf_c_message_free_unpacked(resp, NULL);
        /* A server's own UNAVAILABLE (draining) came over a connection. */
        if (status != GRPC_STATUS_UNAVAILABLE ||
            grpc_channel_check_connectivity_state(c->channels[t], 0) ==
                GRPC_CHANNEL_READY)
            return true;
        if (t == 0)
            snprintf(why, len, "%s", connect_reason(details));
    }
    return false;
}

bool conn_wait_shutdown(int timeout_ms)
{
    int64_t end = nanotime_mono_ms() + timeout_ms;
    while (grpc_is_initialized()) {
        int64_t now = nanotime_mono_ms();
        if (now >= end)
            return false;
        pause_until(now + 10);
    }
    return true;
}
