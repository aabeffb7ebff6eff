/*
 * rules_cases_gen TABLE SEED N: writes the cases of TABLE
 * (tests/rules_cases.txt), then N random ones made from SEED, each with
 * rules_decide's answer, in the table's format (rules_cases.h). The
 * PostgreSQL suite runs them through leased_rule, so the answers the SQL
 * must give always come from the C rules.
 *
 * The random cases come from small domains (owners "", A and B, tokens 0
 * to 3, times 0 to 7, TTLs 1 to 3), so that equal owners and tokens, and
 * expiries equal to now or to now + TTL, are frequent: every boundary of
 * the rules is met many times.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules_cases.h"

/* splitmix64: the same cases for the same seed, on any libc. */
static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static void random_case(uint64_t *seed, struct rules_case *c)
{
    static const char *const owners[] = {"", "A", "B"};
    *c = (struct rules_case){0};
    c->op = (enum rules_op)(RULES_ACQUIRE + rnd(seed) % 4);
    uint64_t kind = rnd(seed) % 10;
    c->kind = kind == 0   ? RULES_CASE_NONE
              : kind == 1 ? RULES_CASE_FLOOR
                          : RULES_CASE_ROW;
    c->row_token = rnd(seed) % 4;
    if (c->kind == RULES_CASE_ROW) {
        strcpy(c->row_owner, owners[rnd(seed) % 3]);
        c->row_expiry = (int64_t)(rnd(seed) % 8);
        c->row_quarantined = rnd(seed) % 5 == 0;
    }
    /* Acquire needs an owner (rules_decide asserts it). */
    strcpy(c->req_owner, c->op == RULES_ACQUIRE ? owners[1 + rnd(seed) % 2]
                                                : owners[rnd(seed) % 3]);
    c->req_token = rnd(seed) % 4;
    c->now = (int64_t)(rnd(seed) % 8);
    c->ttl = (int64_t)(1 + rnd(seed) % 3);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s TABLE SEED N\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (f == NULL) {
        perror(argv[1]);
        return 1;
    }
    char line[512], err[128];
    struct rules_case c;
    struct rules_answer a;
    for (int n = 1; fgets(line, sizeof(line), f) != NULL; n++) {
        int rc = rules_case_parse(line, &c, err, sizeof(err));
        if (rc < 0) {
            fprintf(stderr, "%s:%d: %s\n", argv[1], n, err);
            return 1;
        }
        if (rc == 0)
            continue;
        rules_case_run(&c, &a);
        rules_case_print(stdout, &c, &a);
    }
    fclose(f);
    uint64_t seed = strtoull(argv[2], NULL, 0);
    long count = strtol(argv[3], NULL, 10);
    for (long i = 0; i < count; i++) {
        random_case(&seed, &c);
        rules_case_run(&c, &a);
        rules_case_print(stdout, &c, &a);
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
