/* A program built only from what `meson install` puts in place, with
 * `pkg-config --cflags --libs lease`: acquire, renew, release. */
#include <lease.h>
#include <stdio.h>

int main(void)
{
    struct lease_client *c;
    struct lease l;
    if (lease_memory_open(30LL * 1000000000, NULL, NULL, &c) != LEASE_OK)
        return 1;
    int err = lease_acquire(c, "s1", "web-1", &l);
    if (err == LEASE_OK)
        err = lease_renew(c, &l, &l);
    if (err == LEASE_OK)
        err = lease_release(c, &l);
    printf("token=%llu err=%s\n", (unsigned long long)l.token,
           lease_strerror(err));
    lease_client_destroy(c);
    return err == LEASE_OK && l.token == 1 ? 0 : 1;
}
