/*
 * Addresses that may carry plaintext gRPC: a unix socket, or a loopback
 * TCP address. Shared by the daemon (--listen) and liblease's driver, so
 * both sides apply the same rule (wire-contract.md, "Transport").
 */
#ifndef LEASED_ADDR_H
#define LEASED_ADDR_H

#include <stddef.h>

/* Checks addr: "unix:/PATH" (or "unix:PATH"), or HOST:PORT with HOST
 * 127.0.0.0/8, [::1] or localhost and PORT 0..65535. Returns 0, or -1
 * with a reason (not naming addr) in errmsg. */
int addr_check_plaintext(const char *addr, char *errmsg, size_t errmsg_len);

#endif
