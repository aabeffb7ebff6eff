/* key=value logging on stderr (see log.h). */
#include "log.h"

#include <grpc/support/log.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static _Atomic int min_level = LOG_INFO;
static const char *const names[] = {"debug", "info", "warn", "error"};

void log_set_level(enum log_level level)
{
    min_level = level;
}

int log_parse_level(const char *name, enum log_level *level)
{
    for (int i = LOG_DEBUG; i <= LOG_ERROR; i++) {
        if (strcmp(name, names[i]) == 0) {
            *level = (enum log_level)i;
            return 0;
        }
    }
    return -1;
}

void log_format_time(int64_t wall_ns, char *buf)
{
    time_t sec = (time_t)(wall_ns / 1000000000);
    long ms = (long)(wall_ns % 1000000000 / 1000000);
    if (ms < 0) { /* before the epoch: rounded down still */
        sec--;
        ms += 1000;
    }
    struct tm tm;
    gmtime_r(&sec, &tm);
    snprintf(buf, LOG_TIME_LEN, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ",
             tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
             tm.tm_min, tm.tm_sec, ms);
}

void log_write(enum log_level level, const char *msg, const char *kv_fmt, ...)
{
    if ((int)level < min_level)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char now[LOG_TIME_LEN];
    log_format_time((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec, now);
    char line[2048];
    int n = snprintf(line, sizeof(line), "ts=%s level=%s msg=%s", now,
                     names[level], msg);
    if (kv_fmt != NULL && n > 0 && (size_t)n < sizeof(line) - 2) {
        line[n++] = ' ';
        va_list ap;
        va_start(ap, kv_fmt);
        int m = vsnprintf(line + n, sizeof(line) - (size_t)n, kv_fmt, ap);
        va_end(ap);
        n = m < 0 ? n : n + m;
    }
    if (n < 0)
        return;
    if ((size_t)n > sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    fwrite(line, 1, (size_t)n, stderr); /* one write: lines never mix */
}

void log_quotable(char *out, size_t len, const char *in, size_t in_len)
{
    size_t i = 0;
    for (size_t k = 0; k < in_len && i + 1 < len; k++) {
        unsigned char c = (unsigned char)in[k];
        out[i++] = c == '"' ? '\'' : (c < 0x20 || c == 0x7f ? ' ' : (char)c);
    }
    if (len > 0)
        out[i] = '\0';
}

bool log_limit_pass(struct log_limit *l, int64_t now_ns, uint64_t *held)
{
    if (now_ns >= l->next_ns) {
        l->used = 0;
        l->next_ns = now_ns + INT64_C(1000000000);
    }
    if (l->used >= (l->burst > 0 ? l->burst : 1)) {
        l->held++;
        return false;
    }
    l->used++;
    *held = l->held;
    l->held = 0;
    return true;
}

/* One gRPC line in our format; file is gRPC's source path or its base
 * name. */
static void write_grpc(enum log_level level, const char *file, int line,
                       const char *message)
{
    const char *base = strrchr(file, '/');
    char detail[1024];
    log_quotable(detail, sizeof(detail), message, strlen(message));
    log_write(level, "grpc", "file=%s:%d detail=\"%s\"",
              base != NULL ? base + 1 : file, line, detail);
}

/* The hold of this thread, if any (see log_hold_begin). */
static _Thread_local struct log_hold *hold;

static void grpc_log(gpr_log_func_args *args)
{
    struct log_hold *h = hold;
    if (h != NULL && !h->held && args->severity == GPR_LOG_SEVERITY_ERROR) {
        const char *base = strrchr(args->file, '/');
        snprintf(h->file, sizeof(h->file), "%s",
                 base != NULL ? base + 1 : args->file);
        h->line = args->line;
        snprintf(h->message, sizeof(h->message), "%s", args->message);
        h->held = true;
        return;
    }
    enum log_level level = args->severity == GPR_LOG_SEVERITY_ERROR ? LOG_ERROR
                           : args->severity == GPR_LOG_SEVERITY_INFO
                               ? LOG_INFO
                               : LOG_DEBUG;
    write_grpc(level, args->file, args->line, args->message);
}

void log_route_grpc(void)
{
    gpr_set_log_function(grpc_log);
}

void log_hold_begin(struct log_hold *h)
{
    h->held = false;
    h->file[0] = h->message[0] = '\0';
    h->line = 0;
    hold = h;
}

void log_hold_end(void)
{
    hold = NULL;
}

void log_hold_flush(struct log_hold *h)
{
    if (h->held)
        write_grpc(LOG_ERROR, h->file, h->line, h->message);
    h->held = false;
}
