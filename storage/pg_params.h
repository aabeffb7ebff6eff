/*
 * Query parameters and results in PostgreSQL's binary format, for the
 * PostgreSQL store (pg_internal.h): integers in network order, byte
 * strings as they are, one-dimensional arrays with their header, and
 * integers read back out of a result.
 *
 * Not the queries themselves (pgsql.c), nor sending them (pg_roundtrip.c,
 * pg_pipeline.c). Nothing here allocates but an array's buffer, which
 * its owner frees; nothing here fails but an array's growth, which
 * pg_array.failed records until the next pg_params_array_start().
 */
#ifndef LEASED_PG_PARAMS_H
#define LEASED_PG_PARAMS_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PG_PARAMS_MAX 7

/* A one-dimensional array parameter in PostgreSQL's binary format. */
struct pg_array {
    unsigned char *data;
    size_t len, cap;
    uint32_t count;
    bool failed; /* out of memory */
};

/* The parameters of one query, all in binary. */
struct pg_params {
    int n;
    const char *v[PG_PARAMS_MAX];
    int len[PG_PARAMS_MAX];
    int fmt[PG_PARAMS_MAX];
    unsigned char ints[PG_PARAMS_MAX][8];
};

/* Adds len bytes at p (borrowed until the query is sent) as the next
 * parameter. At most PG_PARAMS_MAX parameters in all. */
void pg_params_bytes(struct pg_params *q, const char *p, size_t len);

/* Adds a NULL as the next parameter. */
void pg_params_null(struct pg_params *q);

/* Adds value as the next parameter, an integer of bytes (4 or 8) bytes;
 * kept in q itself. */
void pg_params_int(struct pg_params *q, int64_t value, int bytes);

/* Adds the elements of a (borrowed until the query is sent) as the next
 * parameter, with their count in its header. */
void pg_params_array(struct pg_params *q, struct pg_array *a);

/* Empties a (keeping its buffer) for elements of type type_oid and
 * writes its header. */
void pg_params_array_start(struct pg_array *a, uint32_t type_oid);

/* Appends an element of n bytes at v (copied) to a. When a cannot grow,
 * sets a->failed: a is then of no use until pg_params_array_start(). */
void pg_params_array_add(struct pg_array *a, const void *v, size_t n);

/* Appends value, an integer of bytes (4 or 8) bytes, to a. */
void pg_params_array_add_int(struct pg_array *a, int64_t value, int bytes);

/* The integer in row, col of r, a binary result: a 4-byte one is signed,
 * an 8-byte one read as it is. */
int64_t pg_params_get_int(const PGresult *r, int row, int col);

#endif
