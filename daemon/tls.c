/* TLS credentials with reload (see tls.h). */
#include "tls.h"

#include <errno.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PEM_MAX (1024 * 1024)

/* One generation of the files. */
struct pems {
    char *cert, *key, *ca;
};

/* One listener's view: gRPC asks its fetcher at every handshake, and each
 * listener must get the current files once. */
struct listener {
    struct tls *tls;
    unsigned served; /* the generation this listener has */
    struct listener *next;
};

struct tls {
    const char *cert_path, *key_path, *ca_path;
    pthread_mutex_t lock;
    struct pems pems;
    unsigned generation; /* starts at 1 */
    struct listener *listeners;
};

static void pems_free(struct pems *p)
{
    if (p->key != NULL)
        explicit_bzero(p->key, strlen(p->key));
    free(p->cert);
    free(p->key);
    free(p->ca);
    memset(p, 0, sizeof(*p));
}

static char *read_pem(const char *path, char *errmsg, size_t len)
{
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        snprintf(errmsg, len, "%s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = malloc(PEM_MAX + 1);
    size_t n = buf != NULL ? fread(buf, 1, PEM_MAX + 1, f) : 0;
    int failed = buf == NULL || ferror(f);
    fclose(f);
    if (failed || n > PEM_MAX) {
        snprintf(errmsg, len, "%s: %s", path,
                 buf == NULL ? "out of memory"
                 : n > PEM_MAX ? "larger than 1 MiB"
                               : "cannot read");
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

/* The first OpenSSL error in words. */
static const char *ssl_reason(void)
{
    unsigned long e = ERR_get_error();
    ERR_clear_error();
    const char *r = e != 0 ? ERR_reason_error_string(e) : NULL;
    return r != NULL ? r : "not PEM";
}

/* Checks that the PEMs are what they claim to be, as OpenSSL reads them. */
static int check(const struct tls *t, const struct pems *p, char *errmsg,
                 size_t len)
{
    int rc = -1;
    BIO *b = BIO_new_mem_buf(p->cert, -1);
    X509 *cert = b != NULL ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    EVP_PKEY *key = NULL;
    if (cert == NULL) {
        snprintf(errmsg, len, "%s: no certificate (%s)", t->cert_path,
                 ssl_reason());
        goto out;
    }
    b = BIO_new_mem_buf(p->key, -1);
    key = b != NULL ? PEM_read_bio_PrivateKey(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    if (key == NULL) {
        snprintf(errmsg, len, "%s: no private key (%s)", t->key_path,
                 ssl_reason());
        goto out;
    }
    if (X509_check_private_key(cert, key) != 1) {
        ERR_clear_error();
        snprintf(errmsg, len, "%s does not match the certificate in %s",
                 t->key_path, t->cert_path);
        goto out;
    }
    if (p->ca != NULL) {
        b = BIO_new_mem_buf(p->ca, -1);
        X509 *ca = b != NULL ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
        BIO_free(b);
        if (ca == NULL) {
            snprintf(errmsg, len, "%s: no certificate (%s)", t->ca_path,
                     ssl_reason());
            goto out;
        }
        X509_free(ca);
    }
    rc = 0;
out:
    X509_free(cert);
    EVP_PKEY_free(key);
    return rc;
}

static int load(const struct tls *t, struct pems *p, char *errmsg, size_t len)
{
    memset(p, 0, sizeof(*p));
    p->cert = read_pem(t->cert_path, errmsg, len);
    if (p->cert != NULL)
        p->key = read_pem(t->key_path, errmsg, len);
    if (p->key != NULL && t->ca_path != NULL)
        p->ca = read_pem(t->ca_path, errmsg, len);
    if (p->key == NULL || (t->ca_path != NULL && p->ca == NULL) ||
        check(t, p, errmsg, len) != 0) {
        pems_free(p);
        return -1;
    }
    return 0;
}

struct tls *tls_load(const char *cert, const char *key, const char *client_ca,
                     char *errmsg, size_t len)
{
    struct tls *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        snprintf(errmsg, len, "out of memory");
        return NULL;
    }
    t->cert_path = cert;
    t->key_path = key;
    t->ca_path = client_ca;
    if (load(t, &t->pems, errmsg, len) != 0) {
        free(t);
        return NULL;
    }
    t->generation = 1;
    pthread_mutex_init(&t->lock, NULL);
    return t;
}

int tls_reload(struct tls *t, char *errmsg, size_t len)
{
    struct pems fresh;
    if (load(t, &fresh, errmsg, len) != 0)
        return -1;
    pthread_mutex_lock(&t->lock);
    struct pems old = t->pems;
    t->pems = fresh;
    t->generation++;
    pthread_mutex_unlock(&t->lock);
    pems_free(&old);
    return 0;
}

/* gRPC's fetcher, on its threads: the current files, once per generation
 * and listener. */
static grpc_ssl_certificate_config_reload_status
fetch(void *arg, grpc_ssl_server_certificate_config **config)
{
    struct listener *l = arg;
    struct tls *t = l->tls;
    grpc_ssl_certificate_config_reload_status status =
        GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;
    pthread_mutex_lock(&t->lock);
    if (l->served != t->generation) {
        grpc_ssl_pem_key_cert_pair pair = {t->pems.key, t->pems.cert};
        /* gRPC 1.51 asserts that a fetched config has client roots even
         * when it asks clients for no certificate; then ours stand in,
         * never used. */
        *config = grpc_ssl_server_certificate_config_create(
            t->pems.ca != NULL ? t->pems.ca : t->pems.cert, &pair, 1);
        if (*config != NULL) {
            l->served = t->generation;
            status = GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_NEW;
        } else {
            status = GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_FAIL;
        }
    }
    pthread_mutex_unlock(&t->lock);
    return status;
}

grpc_server_credentials *tls_server_credentials(struct tls *t)
{
    struct listener *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return NULL;
    l->tls = t;
    pthread_mutex_lock(&t->lock);
    l->next = t->listeners;
    t->listeners = l;
    pthread_mutex_unlock(&t->lock);
    grpc_ssl_server_credentials_options *opts =
        grpc_ssl_server_credentials_create_options_using_config_fetcher(
            t->ca_path != NULL
                ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
            fetch, l);
    return opts != NULL ? grpc_ssl_server_credentials_create_with_options(opts)
                        : NULL;
}

int tls_requires_client_cert(const struct tls *t)
{
    return t->ca_path != NULL;
}

void tls_free(struct tls *t)
{
    if (t == NULL)
        return;
    while (t->listeners != NULL) {
        struct listener *l = t->listeners;
        t->listeners = l->next;
        free(l);
    }
    pems_free(&t->pems);
    pthread_mutex_destroy(&t->lock);
    free(t);
}
