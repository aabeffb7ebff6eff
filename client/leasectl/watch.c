/*
 * leasectl watch: each change of a lease, or of the leases under a
 * prefix, a line as it comes (liblease's lease_watch), until interrupted
 * or --limit changes. --timeout bounds the connecting only: once the
 * service answered, the watch has no end, and a service that goes away
 * is watched again when it (or another of --url) is back, from the last
 * revision printed.
 */
#include <stdio.h>

#include "leasectl.h"

struct printing {
    struct ctl *c;
    long left; /* --limit's count down; 0: no limit */
};

static int print_event(void *arg, const struct lease_event *ev)
{
    struct printing *p = arg;
    ctl_print_event(p->c, ev);
    fflush(stdout); /* a line as it comes, into a pipe too */
    return p->left > 0 && --p->left == 0;
}

int ctl_watch(struct ctl *c)
{
    const struct ctl_args *a = &c->args;
    int rc = ctl_reach(c);
    if (rc != EXIT_OK)
        return rc;
    ctl_deadline_stop(); /* the service is there: no end from here */
    struct printing p = {c, a->limit};
    uint64_t revision = a->after.set ? a->after.value : 0;
    bool prefix = a->prefix != NULL;
    int err = lease_watch(c->client, prefix ? a->prefix : a->arg, prefix,
                          &revision, INT64_MAX, print_event, &p);
    return err == LEASE_OK ? EXIT_OK : ctl_fail(err, c->cmd);
}
