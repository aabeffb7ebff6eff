/*
 * The cases of tests/rules_cases.txt (its opening comment gives the
 * format): one line read into a struct rules_case, run through
 * rules_decide, or written back with an answer. test_rules checks the
 * table's answers; rules_cases_gen writes the cases, and random ones,
 * with rules_decide's, for the test of the SQL statement of the rules.
 */
#ifndef LEASED_TESTS_RULES_CASES_H
#define LEASED_TESTS_RULES_CASES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rules.h"

#define RULES_CASE_OWNER_MAX 16

enum rules_case_row {
    RULES_CASE_NONE,  /* no row */
    RULES_CASE_FLOOR, /* no row, a token floor (row.token) */
    RULES_CASE_ROW,
};

/* What the rules answer: code, and after RULES_OK the row and flags
 * (1 takeover, 2 the row had an owner, 4 a renewal after expiry: enum
 * rules_flag). After a refusal, owner "", token, expiry and flags 0. */
struct rules_answer {
    int code;
    char owner[RULES_CASE_OWNER_MAX];
    uint64_t token;
    int64_t expiry;
    int flags;
};

struct rules_case {
    enum rules_op op;
    enum rules_case_row kind;
    char row_owner[RULES_CASE_OWNER_MAX];
    uint64_t row_token;
    int64_t row_expiry;
    bool row_quarantined;
    char req_owner[RULES_CASE_OWNER_MAX];
    uint64_t req_token;
    int64_t now;
    int64_t ttl; /* > 0 */
    struct rules_answer want;
};

/* Reads one line (NUL-terminated, borrowed) into *c. Returns 1 for a
 * case, 0 for a blank or comment line, -1 for anything else, with
 * err (len bytes) saying why. */
int rules_case_parse(const char *line, struct rules_case *c, char *err,
                     size_t len);

/* What rules_decide answers to c (c->want is not read). */
void rules_case_run(const struct rules_case *c, struct rules_answer *out);

/* Writes c with answer a as one line of the table's format. */
void rules_case_print(FILE *f, const struct rules_case *c,
                      const struct rules_answer *a);

#endif
