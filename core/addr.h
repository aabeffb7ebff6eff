/*
 * Addresses that may carry plaintext gRPC: a unix socket, or a loopback
 * TCP address. Shared by the daemon (--listen) and liblease's driver, so
 * both sides apply the same rule (docs/security.md, "Threat model").
 */
#ifndef LEASED_ADDR_H
#define LEASED_ADDR_H

#include <stdbool.h>
#include <stddef.h>

/* Checks addr's form: "unix:/PATH" (or "unix:PATH"), or HOST:PORT with
 * PORT 0..65535 ([::1]:PORT for IPv6). Sets *plaintext_ok when it may
 * carry plaintext: a unix socket, or HOST 127.0.0.0/8, ::1 or localhost.
 * Returns 0, or -1 with a reason (not naming addr) in errmsg. */
int addr_check(const char *addr, bool *plaintext_ok, char *errmsg,
               size_t errmsg_len);

/* addr_check(), and addr must be one that may carry plaintext. */
int addr_check_plaintext(const char *addr, char *errmsg, size_t errmsg_len);

#endif
