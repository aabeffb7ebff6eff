/*
 * Query parameters and results in PostgreSQL's binary format (see
 * pg_params.h). The sizes are PostgreSQL's: int4 and int8 in network
 * order, an array's header of five int4s and each element's length
 * before it.
 */
#include "pg_params.h"

#include <stdlib.h>
#include <string.h>

void pg_params_bytes(struct pg_params *q, const char *p, size_t len)
{
    q->v[q->n] = p;
    q->len[q->n] = (int)len;
    q->fmt[q->n++] = 1;
}

void pg_params_null(struct pg_params *q)
{
    q->v[q->n] = NULL;
    q->len[q->n] = 0;
    q->fmt[q->n++] = 1;
}

/* value in network order, in bytes (4 or 8) bytes: PostgreSQL's binary
 * integers. */
static void put_int(unsigned char *b, int64_t value, int bytes)
{
    uint64_t u = (uint64_t)value;
    for (int i = 0; i < bytes; i++)
        b[i] = (unsigned char)(u >> (8 * (bytes - 1 - i)));
}

void pg_params_int(struct pg_params *q, int64_t value, int bytes)
{
    put_int(q->ints[q->n], value, bytes);
    pg_params_bytes(q, (const char *)q->ints[q->n], (size_t)bytes);
}

static void array_put(struct pg_array *a, const void *src, size_t n)
{
    if (a->failed)
        return;
    if (a->len + n > a->cap) {
        size_t cap = a->cap != 0 ? a->cap : 1024;
        while (cap < a->len + n)
            cap *= 2;
        unsigned char *d = realloc(a->data, cap);
        if (d == NULL) {
            a->failed = true;
            return;
        }
        a->data = d;
        a->cap = cap;
    }
    memcpy(a->data + a->len, src, n);
    a->len += n;
}

/* Header: one dimension, no NULLs, the elements' type, the count (set by
 * pg_params_array()), lower bound 1. */
void pg_params_array_start(struct pg_array *a, uint32_t type_oid)
{
    unsigned char h[20];
    put_int(h, 1, 4);
    put_int(h + 4, 0, 4);
    put_int(h + 8, type_oid, 4);
    put_int(h + 12, 0, 4);
    put_int(h + 16, 1, 4);
    a->len = 0;
    a->count = 0;
    a->failed = false;
    array_put(a, h, sizeof(h));
}

void pg_params_array_add(struct pg_array *a, const void *v, size_t n)
{
    unsigned char len[4];
    put_int(len, (int64_t)n, 4);
    array_put(a, len, sizeof(len));
    array_put(a, v, n);
    a->count++;
}

void pg_params_array_add_int(struct pg_array *a, int64_t value, int bytes)
{
    unsigned char b[8];
    put_int(b, value, bytes);
    pg_params_array_add(a, b, (size_t)bytes);
}

void pg_params_array(struct pg_params *q, struct pg_array *a)
{
    put_int(a->data + 12, a->count, 4);
    pg_params_bytes(q, (const char *)a->data, a->len);
}

int64_t pg_params_get_int(const PGresult *r, int row, int col)
{
    const unsigned char *p = (const unsigned char *)PQgetvalue(r, row, col);
    int n = PQgetlength(r, row, col);
    uint64_t u = 0;
    for (int i = 0; i < n; i++)
        u = u << 8 | p[i];
    if (n == 4)
        return (int32_t)u;
    return (int64_t)u;
}
