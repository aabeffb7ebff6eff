/*
 * TLS for leased's TCP listeners (--tls-cert, --tls-key, --tls-client-ca):
 * the PEM files, checked with OpenSSL before gRPC sees them, and gRPC
 * server credentials that pick up a reload at the next handshake, so
 * connections already open are never dropped.
 *
 * With a client CA, every client must present a certificate that CA
 * signed (mutual TLS). gRPC's TLS is 1.2 or newer.
 */
#ifndef LEASED_TLS_H
#define LEASED_TLS_H

#include <grpc/grpc_security.h>
#include <stddef.h>

struct tls;

/* Reads and checks the files (paths borrowed and kept for reloads;
 * client_ca may be NULL): the certificate chain parses, the key parses and
 * matches the first certificate, the CA file holds at least one
 * certificate. Returns NULL with errmsg set otherwise. */
struct tls *tls_load(const char *cert, const char *key, const char *client_ca,
                     char *errmsg, size_t len);

/* Reads the files again; new handshakes use them once they pass the same
 * checks, otherwise the old ones stay and errmsg says why. Any thread.
 * Returns 0 or -1. */
int tls_reload(struct tls *t, char *errmsg, size_t len);

/* New server credentials for one listener (each listener needs its own).
 * The tls object must outlive the server. */
grpc_server_credentials *tls_server_credentials(struct tls *t);

/* Whether clients must present certificates. */
int tls_requires_client_cert(const struct tls *t);

/* After the server is destroyed. Accepts NULL. */
void tls_free(struct tls *t);

#endif
