/* Admin answers (see admin.h). */
#include "admin.h"

#include <stdlib.h>
#include <string.h>

#include "policy.h"

struct admin_result *admin_result_new(size_t cap)
{
    struct admin_result *a = calloc(1, sizeof(*a));
    if (a != NULL && cap > 0 &&
        (a->leases = calloc(cap, sizeof(*a->leases))) == NULL) {
        free(a);
        return NULL;
    }
    if (a != NULL)
        a->cap = cap;
    return a;
}

static char *copy(const char *p, size_t n)
{
    char *c = malloc(n + 1);
    if (c != NULL) {
        memcpy(c, p, n);
        c[n] = '\0';
    }
    return c;
}

/* Ends a's page: the next one starts after session; returns 1, or -1
 * when out of memory. */
static int next_page(struct admin_result *a, const char *session, size_t n)
{
    a->next = copy(session, n);
    a->next_len = n;
    return a->next != NULL ? 1 : -1;
}

int admin_result_add(struct admin_result *a, const struct lease_row *row,
                     bool live)
{
    struct admin_lease *l = &a->leases[a->n];
    l->session = copy(row->session, row->session_len);
    l->owner = copy(row->owner, row->owner_len);
    if (l->session == NULL || l->owner == NULL) {
        free(l->session);
        free(l->owner);
        return -1;
    }
    l->session_len = row->session_len;
    l->owner_len = row->owner_len;
    l->token = row->token;
    l->expiry_ns = row->expiry_ns;
    l->live = live;
    a->n++;
    return 0;
}

int admin_page_add(struct request *r, const struct lease_row *row, bool live)
{
    struct admin_result *a = r->admin;
    bool past = ++a->seen > r->page_size; /* the row after a page's worth */
    if (a->n == r->page_size) {
        const struct admin_lease *last = &a->leases[a->n - 1];
        return next_page(a, last->session, last->session_len);
    }
    if ((r->list_rule == NULL ||
         policy_visible(r->list_rule, row->session, row->session_len)) &&
        admin_result_add(a, row, live) != 0)
        return -1;
    /* Rows the caller may not see were left out: the page is short, and
     * the next one starts after the last row looked at. */
    return past ? next_page(a, row->session, row->session_len) : 0;
}

void admin_result_free(struct admin_result *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->n; i++) {
        free(r->leases[i].session);
        free(r->leases[i].owner);
    }
    free(r->leases);
    free(r->next);
    if (r->snapshot != NULL)
        r->snapshot_free(r->snapshot);
    free(r);
}
