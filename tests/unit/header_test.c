/* The public header compiles on its own, first and alone. */
#include "lease.h"

int main(void)
{
    struct lease l = {.token = 1};
    return l.token == 1 && LEASE_OK == 0 ? 0 : 1;
}
