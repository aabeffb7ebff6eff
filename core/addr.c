/* Plaintext address rule (see addr.h). */
#include "addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errmsg.h"

static bool is_loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (strcmp(host, "localhost") == 0)
        return true;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return false;
}

int addr_check(const char *addr, bool *plaintext_ok, char *errmsg,
               size_t len)
{
    *plaintext_ok = false;
    if (strncmp(addr, "unix:", 5) == 0) {
        *plaintext_ok = true;
        return addr[5] != '\0'
                   ? 0
                   : errmsg_fail(-1, errmsg, len, "no socket path");
    }
    const char *colon = strrchr(addr, ':');
    if (colon == NULL || colon == addr || colon[1] == '\0')
        return errmsg_fail(-1, errmsg, len, "want HOST:PORT or unix:/PATH");
    const char *h = addr;
    size_t hlen = (size_t)(colon - addr);
    if (addr[0] == '[') { /* [::1]:7443 */
        if (colon[-1] != ']' || hlen < 3)
            return errmsg_fail(-1, errmsg, len, "bad IPv6 address");
        h++;
        hlen -= 2;
    }
    char host[256];
    if (hlen == 0 || hlen >= sizeof(host))
        return errmsg_fail(-1, errmsg, len, "bad host");
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    char *end;
    errno = 0;
    unsigned long port = strtoul(colon + 1, &end, 10);
    if (*end != '\0' || errno != 0 || port > 65535 || colon[1] < '0' ||
        colon[1] > '9')
        return errmsg_fail(-1, errmsg, len, "bad port");
    *plaintext_ok = is_loopback(host);
    return 0;
}

int addr_check_plaintext(const char *addr, char *errmsg, size_t len)
{
    bool plaintext_ok;
    if (addr_check(addr, &plaintext_ok, errmsg, len) != 0)
        return -1;
    if (!plaintext_ok)
        return errmsg_fail(
            -1, errmsg, len,
            "not a loopback address: plaintext is allowed only on "
            "loopback or a unix socket");
    return 0;
}
