/* GET /metrics over libmicrohttpd (see metrics_http.h). */
#include "metrics_http.h"

#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "metrics.h"

#define MAX_CONNECTIONS 32
#define TIMEOUT_S 10

struct metrics_http {
    struct MHD_Daemon *mhd;
};

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code,
                             const char *type, char *body, size_t len,
                             enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result ok = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **state)
{
    static const char text_type[] = "text/plain; charset=utf-8";
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, text_type,
                     "only GET\n", 9, MHD_RESPMEM_PERSISTENT);
    if (strcmp(url, "/metrics") != 0)
        return reply(c, MHD_HTTP_NOT_FOUND, text_type, "see /metrics\n", 13,
                     MHD_RESPMEM_PERSISTENT);
    size_t len;
    char *text = metrics_render(&len);
    if (text == NULL)
        return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, text_type,
                     "out of memory\n", 14, MHD_RESPMEM_PERSISTENT);
    return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8",
                 text, len, MHD_RESPMEM_MUST_FREE);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char raw[512], msg[512];
    vsnprintf(raw, sizeof(raw), fmt, ap);
    log_quotable(msg, sizeof(msg), raw, strlen(raw));
    log_warn("metrics_http", "detail=\"%s\"", msg);
}

/* Resolves HOST:PORT (numeric, or localhost) into *ai. */
static int resolve(const char *addr, struct addrinfo **ai, char *errmsg,
                   size_t len)
{
    char host[256];
    const char *colon = strrchr(addr, ':');
    const char *h = addr;
    size_t hlen = colon != NULL ? (size_t)(colon - addr) : 0;
    if (hlen >= 2 && addr[0] == '[' && colon[-1] == ']') {
        h++;
        hlen -= 2;
    }
    if (colon == NULL || hlen == 0 || hlen >= sizeof(host)) {
        snprintf(errmsg, len, "--metrics-listen %s: want HOST:PORT", addr);
        return -1;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV};
    if (strcmp(host, "localhost") != 0)
        hints.ai_flags |= AI_NUMERICHOST;
    int rc = getaddrinfo(host, colon + 1, &hints, ai);
    if (rc != 0) {
        snprintf(errmsg, len, "--metrics-listen %s: %s", addr,
                 gai_strerror(rc));
        return -1;
    }
    return 0;
}

struct metrics_http *metrics_http_start(const char *addr, char *errmsg,
                                        size_t len)
{
    struct addrinfo *ai;
    if (resolve(addr, &ai, errmsg, len) != 0)
        return NULL;
    struct metrics_http *m = calloc(1, sizeof(*m));
    if (m != NULL) {
        unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
        if (ai->ai_family == AF_INET6)
            flags |= MHD_USE_IPv6;
        m->mhd = MHD_start_daemon(
            flags, 0, NULL, NULL, on_request, NULL,
            MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
            MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNECTIONS,
            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)TIMEOUT_S,
            MHD_OPTION_END);
    }
    freeaddrinfo(ai);
    if (m == NULL || m->mhd == NULL) {
        snprintf(errmsg, len, "cannot listen on %s for metrics", addr);
        free(m);
        return NULL;
    }
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(m->mhd, MHD_DAEMON_INFO_BIND_PORT);
    const char *colon = strrchr(addr, ':');
    log_info("metrics_listening", "addr=%.*s:%u", (int)(colon - addr), addr,
             info != NULL ? (unsigned)info->port : 0u);
    return m;
}

void metrics_http_stop(struct metrics_http *m)
{
    if (m == NULL)
        return;
    MHD_stop_daemon(m->mhd);
    free(m);
}
