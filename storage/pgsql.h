/*
 * The SQL of the PostgreSQL store (postgres.c runs it): the schema, whose
 * functions state the lease rules in SQL, and the statements every
 * connection prepares. Advisory locks are in class 1818583411 ("leas"):
 * 1 the schema, 2 the token floor, 3 garbage collection.
 */
#ifndef LEASED_PGSQL_H
#define LEASED_PGSQL_H

#include <stddef.h>

#define PGSQL_SCHEMA_VERSION 5

/* The schema, one statement each, created in this order in one
 * transaction. */
extern const char *const pgsql_schema[];
extern const size_t pgsql_schema_count;

/* What turns a schema of an older version (1 to 4) into the current
 * one, in one transaction. */
extern const char *const pgsql_upgrade[];
extern const size_t pgsql_upgrade_count;

/* The statements prepared on every connection. */
enum pgsql_stmt {
    PGSQL_DECIDE,
    PGSQL_ROLLBACK,
    PGSQL_GET,
    PGSQL_LIST,
    PGSQL_STATS,
    PGSQL_COLLECT,
    PGSQL_REVOKE,
    PGSQL_COUNT,
};

extern const char *const pgsql_stmt[PGSQL_COUNT];

#endif
