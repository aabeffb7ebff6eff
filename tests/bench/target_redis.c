/*
 * The Redis target: redis://host:port, with hiredis' async API on a libuv
 * loop per thread (an adapter of our own: the one in hiredis 0.14,
 * hiredis/adapters/libuv.h, ignores a poll error, so a refused connect
 * leaves its commands waiting forever). Each thread has its share of
 * the `connections`, and its slots' commands are pipelined on them: every
 * slot has one command in flight.
 *
 * A session is the key "/leasebench/<session name>", its value the owner:
 *
 *   acquire  SET key owner NX PX ttl_ms       nil reply: HELD
 *   renew    EVALSHA of a compare-and-PEXPIRE  0: HELD (lost)
 *   release  EVALSHA of a compare-and-DEL      0: HELD (not ours)
 *
 * The scripts are loaded once per thread (SCRIPT LOAD, on a blocking
 * connection that also checks that the server answers); Redis keeps them
 * for every connection. Redis has no fencing token: the token is 0.
 *
 * Errors: STATUS_CONNECT when the connection broke or a command could not
 * be sent (reported on the loop's next tick, reconnecting), UNKNOWN for an
 * error reply, INTERNAL for an unexpected reply, DEADLINE_EXCEEDED for the
 * commands of a connection that kept one waiting over 10 s (it is
 * dropped).
 */
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "bench.h"

#define CALL_TIMEOUT_MS 10000
#define TICK_MS 50
#define KEY_PREFIX "/leasebench/"

/* gRPC status codes, for errors by status like the other targets. */
#define STATUS_UNKNOWN 2
#define STATUS_DEADLINE_EXCEEDED 4
#define STATUS_INTERNAL 13

static const char renew_script[] =
    "if redis.call('get',KEYS[1])==ARGV[1] then "
    "return redis.call('pexpire',KEYS[1],ARGV[2]) else return 0 end";
static const char release_script[] =
    "if redis.call('get',KEYS[1])==ARGV[1] then "
    "return redis.call('del',KEYS[1]) else return 0 end";

struct redis_thread;

struct redis_conn {
    struct redis_thread *rt;
    redisAsyncContext *ac; /* NULL while disconnected */
    bool timed_out;        /* dropped for a command over the timeout */
};

struct redis_thread {
    struct bench_thread *t;
    uv_loop_t loop;
    uv_timer_t timer;
    char host[256];
    int port;
    char sha_renew[41], sha_release[41];
    struct redis_conn *conns;
    size_t nconns;
    /* Slots whose command could not be sent: reported on the next tick,
     * not from inside start() (which bench_done() calls). */
    struct slot **failed;
    size_t nfailed;
    int errors_logged;
};

/* hiredis on libuv: one poll handle per connection. */
struct uv_events {
    redisAsyncContext *ac; /* NULL once hiredis cleaned up */
    uv_poll_t handle;
    int events;
};

static void ev_poll(uv_poll_t *handle, int status, int events)
{
    struct uv_events *p = handle->data;
    /* On an error (libuv stopped the handle), let hiredis find it by
     * doing what it waited for. */
    int ev = status != 0 ? p->events : events;
    if (p->ac != NULL && (ev & UV_READABLE))
        redisAsyncHandleRead(p->ac);
    if (p->ac != NULL && (ev & UV_WRITABLE))
        redisAsyncHandleWrite(p->ac);
}

static void ev_update(struct uv_events *p)
{
    if (p->events != 0)
        uv_poll_start(&p->handle, p->events, ev_poll);
    else
        uv_poll_stop(&p->handle);
}

static void ev_add_read(void *data)
{
    struct uv_events *p = data;
    p->events |= UV_READABLE;
    ev_update(p);
}

static void ev_del_read(void *data)
{
    struct uv_events *p = data;
    p->events &= ~UV_READABLE;
    ev_update(p);
}

static void ev_add_write(void *data)
{
    struct uv_events *p = data;
    p->events |= UV_WRITABLE;
    ev_update(p);
}

static void ev_del_write(void *data)
{
    struct uv_events *p = data;
    p->events &= ~UV_WRITABLE;
    ev_update(p);
}

static void ev_closed(uv_handle_t *handle)
{
    free(handle->data);
}

static void ev_cleanup(void *data)
{
    struct uv_events *p = data;
    p->ac = NULL;
    uv_close((uv_handle_t *)&p->handle, ev_closed);
}

static int ev_attach(redisAsyncContext *ac, uv_loop_t *loop)
{
    struct uv_events *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return REDIS_ERR;
    if (uv_poll_init(loop, &p->handle, ac->c.fd) != 0) {
        free(p);
        return REDIS_ERR;
    }
    p->ac = ac;
    p->handle.data = p;
    ac->ev.data = p;
    ac->ev.addRead = ev_add_read;
    ac->ev.delRead = ev_del_read;
    ac->ev.addWrite = ev_add_write;
    ac->ev.delWrite = ev_del_write;
    ac->ev.cleanup = ev_cleanup;
    return REDIS_OK;
}

static void log_error(struct redis_thread *rt, const char *what)
{
    if (rt->errors_logged >= 3)
        return;
    rt->errors_logged++;
    fprintf(stderr, "leasebench: redis %s:%d: %s\n", rt->host, rt->port,
            what);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct redis_conn *conn = ac->data;
    if (status != REDIS_OK) {
        /* hiredis frees the context after this, with no disconnect
         * callback: it never was connected. */
        log_error(conn->rt, ac->errstr);
        conn->ac = NULL;
    }
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    struct redis_conn *conn = ac->data;
    if (status != REDIS_OK)
        log_error(conn->rt, ac->errstr);
    conn->ac = NULL;
}

static void conn_open(struct redis_conn *conn)
{
    struct redis_thread *rt = conn->rt;
    redisAsyncContext *ac = redisAsyncConnect(rt->host, rt->port);
    if (ac == NULL)
        return;
    if (ac->err) {
        log_error(rt, ac->errstr);
        redisAsyncFree(ac);
        return;
    }
    ac->data = conn;
    if (ev_attach(ac, &rt->loop) != REDIS_OK) {
        redisAsyncFree(ac);
        return;
    }
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    conn->ac = ac;
}

/* Splits "host:port" ("[v6]:port" too). */
static int parse_hostport(const char *hostport, char *host, size_t size,
                          int *port)
{
    const char *colon = strrchr(hostport, ':');
    if (colon == NULL || colon == hostport)
        return -1;
    const char *h = hostport;
    size_t n = (size_t)(colon - hostport);
    if (h[0] == '[' && n >= 2 && h[n - 1] == ']') {
        h++;
        n -= 2;
    }
    if (n >= size)
        return -1;
    memcpy(host, h, n);
    host[n] = '\0';
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end != '\0' || p <= 0 || p > 65535)
        return -1;
    *port = (int)p;
    return 0;
}

/* SCRIPT LOAD on a blocking connection: the scripts' SHA1s. */
static int load_scripts(struct redis_thread *rt)
{
    struct timeval timeout = {5, 0};
    redisContext *c = redisConnectWithTimeout(rt->host, rt->port, timeout);
    if (c == NULL || c->err) {
        fprintf(stderr, "leasebench: redis %s:%d: %s\n", rt->host, rt->port,
                c != NULL ? c->errstr : "cannot connect");
        redisFree(c);
        return -1;
    }
    redisSetTimeout(c, timeout);
    const char *scripts[2] = {renew_script, release_script};
    char *shas[2] = {rt->sha_renew, rt->sha_release};
    for (int i = 0; i < 2; i++) {
        redisReply *r = redisCommand(c, "SCRIPT LOAD %s", scripts[i]);
        if (r == NULL || r->type != REDIS_REPLY_STRING || r->len != 40) {
            fprintf(stderr, "leasebench: redis SCRIPT LOAD: %s\n",
                    r == NULL ? c->errstr
                    : r->type == REDIS_REPLY_ERROR ? r->str
                                                   : "unexpected reply");
            if (r != NULL)
                freeReplyObject(r);
            redisFree(c);
            return -1;
        }
        memcpy(shas[i], r->str, 41);
        freeReplyObject(r);
    }
    redisFree(c);
    return 0;
}

static int redis_thread_init(struct bench_thread *t, const char *hostport)
{
    struct bench_run *run = t->run;
    struct redis_thread *rt = calloc(1, sizeof(*rt));
    if (rt == NULL)
        return -1;
    rt->t = t;
    if (parse_hostport(hostport, rt->host, sizeof(rt->host), &rt->port) != 0) {
        fprintf(stderr, "leasebench: redis: bad address %s\n", hostport);
        free(rt);
        return -1;
    }
    if (load_scripts(rt) != 0) {
        free(rt);
        return -1;
    }
    size_t n = run->connections / run->threads +
               ((size_t)t->id < run->connections % run->threads);
    rt->nconns = n > 0 ? n : 1;
    rt->conns = calloc(rt->nconns, sizeof(*rt->conns));
    rt->failed = calloc(t->nslots > 0 ? t->nslots : 1, sizeof(*rt->failed));
    if (rt->conns == NULL || rt->failed == NULL)
        return -1;
    uv_loop_init(&rt->loop);
    uv_timer_init(&rt->loop, &rt->timer);
    rt->timer.data = rt;
    for (size_t i = 0; i < rt->nconns; i++) {
        rt->conns[i].rt = rt;
        conn_open(&rt->conns[i]);
    }
    t->target = rt;
    return 0;
}

/* A reply (NULL: the connection is gone) to slot s's command. */
static void on_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    struct slot *s = privdata;
    struct redis_thread *rt = s->thread->target;
    struct redis_conn *conn = ac->data;
    redisReply *reply = r;
    enum bench_result result = RESULT_ERROR;
    int status = STATUS_INTERNAL;
    if (reply == NULL) {
        status = conn != NULL && conn->timed_out ? STATUS_DEADLINE_EXCEEDED
                                                 : STATUS_CONNECT;
    } else if (reply->type == REDIS_REPLY_ERROR) {
        log_error(rt, reply->str);
        status = STATUS_UNKNOWN;
    } else if (s->op == OP_ACQUIRE) {
        if (reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "OK") == 0)
            result = RESULT_OK;
        else if (reply->type == REDIS_REPLY_NIL)
            result = RESULT_HELD;
    } else if (reply->type == REDIS_REPLY_INTEGER) {
        result = reply->integer == 1   ? RESULT_OK
                 : reply->integer == 0 ? RESULT_HELD
                                       : RESULT_ERROR;
    }
    if (result != RESULT_ERROR)
        status = 0;
    bench_done(s, result, status, 0, 0);
}

static void redis_start(struct slot *s)
{
    struct redis_thread *rt = s->thread->target;
    struct redis_conn *conn = &rt->conns[(size_t)s->id % rt->nconns];
    const char *name = s->thread->run->names[s->sessions[s->cur]];
    char key[96];
    snprintf(key, sizeof(key), KEY_PREFIX "%s", name);
    long long ttl = (long long)s->thread->run->ttl_ms;
    int rc = REDIS_ERR;
    if (conn->ac != NULL) {
        switch (s->op) {
        case OP_ACQUIRE:
            rc = redisAsyncCommand(conn->ac, on_reply, s, "SET %s %s NX PX %lld",
                                   key, s->owner, ttl);
            break;
        case OP_RENEW:
            rc = redisAsyncCommand(conn->ac, on_reply, s,
                                   "EVALSHA %s 1 %s %s %lld", rt->sha_renew,
                                   key, s->owner, ttl);
            break;
        case OP_RELEASE:
        case OP_COUNT:
            rc = redisAsyncCommand(conn->ac, on_reply, s, "EVALSHA %s 1 %s %s",
                                   rt->sha_release, key, s->owner);
            break;
        }
    }
    if (rc != REDIS_OK)
        rt->failed[rt->nfailed++] = s;
}

/* Every TICK_MS: report the slots whose command could not be sent,
 * reconnect, drop connections that keep a command waiting too long, start
 * idle slots, and stop when the run is over. */
static void on_tick(uv_timer_t *timer)
{
    struct redis_thread *rt = timer->data;
    struct bench_thread *t = rt->t;
    for (size_t i = 0; i < rt->nconns; i++) {
        if (rt->conns[i].ac == NULL) {
            rt->conns[i].timed_out = false;
            conn_open(&rt->conns[i]);
        }
    }
    int64_t now = bench_now_ns();
    for (size_t i = 0; i < t->nslots; i++) {
        struct slot *s = &t->slots[i];
        struct redis_conn *conn = &rt->conns[(size_t)s->id % rt->nconns];
        if (s->busy && conn->ac != NULL &&
            now - s->start_ns > (int64_t)CALL_TIMEOUT_MS * 1000000) {
            log_error(rt, "a command timed out; dropping the connection");
            conn->timed_out = true;
            redisAsyncFree(conn->ac); /* its callbacks get NULL replies */
            conn->ac = NULL;
        }
    }
    /* bench_done() may fail a slot again: report a snapshot. */
    size_t n = rt->nfailed;
    struct slot **failed = malloc((n > 0 ? n : 1) * sizeof(*failed));
    memcpy(failed, rt->failed, n * sizeof(*failed));
    rt->nfailed = 0;
    for (size_t i = 0; i < n; i++)
        bench_done(failed[i], RESULT_ERROR, STATUS_CONNECT, 0, 0);
    free(failed);
    bench_tick(t);
    if (bench_thread_finished(t))
        uv_stop(&rt->loop);
}

static void redis_run(struct bench_thread *t)
{
    struct redis_thread *rt = t->target;
    uv_timer_start(&rt->timer, on_tick, TICK_MS, TICK_MS);
    uv_run(&rt->loop, UV_RUN_DEFAULT);
    uv_timer_stop(&rt->timer);
}

static void redis_thread_close(struct bench_thread *t)
{
    struct redis_thread *rt = t->target;
    /* Nothing is in flight. */
    for (size_t i = 0; i < rt->nconns; i++) {
        if (rt->conns[i].ac != NULL)
            redisAsyncFree(rt->conns[i].ac);
    }
    uv_close((uv_handle_t *)&rt->timer, NULL);
    uv_run(&rt->loop, UV_RUN_DEFAULT); /* the handles' close callbacks */
    uv_loop_close(&rt->loop);
    free(rt->conns);
    free(rt->failed);
    free(rt);
}

const struct bench_target_ops bench_target_redis = {
    "redis", redis_thread_init, redis_start, redis_run, redis_thread_close};
