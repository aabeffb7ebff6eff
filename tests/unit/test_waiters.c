/*
 * daemon/waiters.c: the lines of Wait calls, one per session, first come
 * first served.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "waiters.h"

#define MANY 2000

static void init(struct request *r, const char *session)
{
    memset(r, 0, sizeof(*r));
    r->op = OP_WAIT;
    r->session = session;
    r->session_len = strlen(session);
}

/* Pops the session's line; checks it gives want[0..n) in order, then
 * nothing. */
static void check_line(struct waiters *w, const char *session,
                       struct request *const *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        CHECK(waiters_pop(w, session, strlen(session)) == want[i]);
    CHECK(waiters_pop(w, session, strlen(session)) == NULL);
    CHECK(!waiters_has(w, session, strlen(session)));
}

TEST(each_session_has_its_own_line_in_arrival_order)
{
    struct waiters *w = waiters_create();
    CHECK(w != NULL);
    struct request a1, b1, a2, c1, b2, a3;
    init(&a1, "a");
    init(&b1, "ab"); /* a prefix of another id is another session */
    init(&a2, "a");
    init(&c1, "c");
    init(&b2, "ab");
    init(&a3, "a");
    struct request *order[] = {&a1, &b1, &a2, &c1, &b2, &a3};
    for (size_t i = 0; i < 6; i++)
        CHECK(waiters_add(w, order[i]) == 0);
    CHECK_EQ_U64(waiters_count(w), 6);
    CHECK(waiters_has(w, "a", 1) && waiters_has(w, "ab", 2));
    CHECK(!waiters_has(w, "b", 1));
    CHECK(waiters_pop(w, "b", 1) == NULL);
    check_line(w, "a", (struct request *[]){&a1, &a2, &a3}, 3);
    CHECK_EQ_U64(waiters_count(w), 3);
    check_line(w, "ab", (struct request *[]){&b1, &b2}, 2);
    check_line(w, "c", (struct request *[]){&c1}, 1);
    CHECK_EQ_U64(waiters_count(w), 0);
    /* A line emptied and joined again starts afresh. */
    CHECK(waiters_add(w, &a2) == 0);
    check_line(w, "a", (struct request *[]){&a2}, 1);
    waiters_destroy(w);
}

/* Many sessions: the table grows, and no request is lost or reordered. */
TEST(many_lines_keep_every_request_in_order)
{
    struct waiters *w = waiters_create();
    static char ids[MANY][16];
    static struct request reqs[MANY][2];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < MANY; i++) {
            snprintf(ids[i], sizeof(ids[i]), "session-%d", i);
            init(&reqs[i][k], ids[i]);
            CHECK(waiters_add(w, &reqs[i][k]) == 0);
        }
    CHECK_EQ_U64(waiters_count(w), 2 * MANY);
    for (int i = MANY - 1; i >= 0; i--)
        check_line(w, ids[i], (struct request *[]){&reqs[i][0], &reqs[i][1]},
                   2);
    CHECK_EQ_U64(waiters_count(w), 0);
    waiters_destroy(w);
}

/* take(): yes for the lines of "a" and "c"; counts its calls in *arg. */
static bool take_ac(void *arg, const struct request *first)
{
    int *asked = arg;
    (*asked)++;
    return strcmp(first->session, "a") == 0 ||
           strcmp(first->session, "c") == 0;
}

TEST(take_firsts_takes_only_the_first_of_the_lines_it_says)
{
    struct waiters *w = waiters_create();
    struct request a1, a2, b1, c1;
    init(&a1, "a");
    init(&a2, "a");
    init(&b1, "b");
    init(&c1, "c");
    struct request *order[] = {&a1, &b1, &a2, &c1};
    for (size_t i = 0; i < 4; i++)
        CHECK(waiters_add(w, order[i]) == 0);
    int asked = 0;
    struct request *got = waiters_take_firsts(w, take_ac, &asked);
    CHECK_EQ_I64(asked, 3); /* each line once */
    int seen_a = 0, seen_c = 0, n = 0;
    for (struct request *r = got; r != NULL; r = r->next, n++) {
        seen_a += r == &a1;
        seen_c += r == &c1;
    }
    CHECK_EQ_I64(n, 2);
    CHECK(seen_a == 1 && seen_c == 1);
    CHECK_EQ_U64(waiters_count(w), 2);
    check_line(w, "a", (struct request *[]){&a2}, 1);
    check_line(w, "b", (struct request *[]){&b1}, 1);
    CHECK(!waiters_has(w, "c", 1));
    waiters_destroy(w);
}

TEST(take_ended_leaves_the_others_in_their_order)
{
    struct waiters *w = waiters_create();
    struct request r[6];
    const char *sessions[] = {"a", "a", "b", "a", "b", "a"};
    for (int i = 0; i < 6; i++) {
        init(&r[i], sessions[i]);
        CHECK(waiters_add(w, &r[i]) == 0);
    }
    atomic_store(&r[1].ended, true);
    atomic_store(&r[2].ended, true);
    atomic_store(&r[4].ended, true); /* b's line is left empty */
    struct request *got = waiters_take_ended(w, false);
    int n = 0;
    for (struct request *e = got; e != NULL; e = e->next, n++)
        CHECK(atomic_load(&e->ended));
    CHECK_EQ_I64(n, 3);
    CHECK_EQ_U64(waiters_count(w), 3);
    CHECK(!waiters_has(w, "b", 1));
    /* All: the rest, and the table is empty. */
    got = waiters_take_ended(w, true);
    n = 0;
    for (struct request *e = got; e != NULL; e = e->next, n++)
        CHECK(e == &r[0] || e == &r[3] || e == &r[5]);
    CHECK_EQ_I64(n, 3);
    CHECK_EQ_U64(waiters_count(w), 0);
    CHECK(!waiters_has(w, "a", 1));
    waiters_destroy(w);
}

TEST(take_ended_keeps_the_order_within_a_line)
{
    struct waiters *w = waiters_create();
    struct request r[5];
    for (int i = 0; i < 5; i++) {
        init(&r[i], "s");
        CHECK(waiters_add(w, &r[i]) == 0);
    }
    atomic_store(&r[0].ended, true);
    atomic_store(&r[3].ended, true);
    struct request *got = waiters_take_ended(w, false);
    CHECK(got == &r[0] && got->next == &r[3] && got->next->next == NULL);
    check_line(w, "s", (struct request *[]){&r[1], &r[2], &r[4]}, 3);
    waiters_destroy(w);
}

CHECK_MAIN(each_session_has_its_own_line_in_arrival_order,
           many_lines_keep_every_request_in_order,
           take_firsts_takes_only_the_first_of_the_lines_it_says,
           take_ended_leaves_the_others_in_their_order,
           take_ended_keeps_the_order_within_a_line)
