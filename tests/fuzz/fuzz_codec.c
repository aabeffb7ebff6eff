/*
 * Fuzz target: the request decoder (daemon/codec.h), every method.
 *
 * The first byte picks the decoder, the rest is the protobuf body:
 * byte % 10 is an enum request_op (OP_ACQUIRE..OP_SNAPSHOT) for
 * codec_decode(), or 9 for codec_decode_health(), whose service buffer
 * is then 1..256 bytes (the next byte) and whose body follows it.
 *
 * Whatever the bytes, nothing may crash or leak, and every outcome must
 * keep codec.h's promises, checked here with a UTF-8 checker of its own
 * (Unicode's table of well-formed byte sequences) rather than
 * validate.c's, so that a bug there cannot hide itself:
 *  - Acquire, Renew, Release: session 1..ENGINE_SESSION_MAX bytes and
 *    owner 1..ENGINE_OWNER_MAX bytes of valid UTF-8 without a NUL, with
 *    their lengths; decoded again from the reply codec_encode_reply()
 *    makes of them (the reply is wire-identical to a Renew request), the
 *    same bytes and the granted token come back;
 *  - Get: a session of 1..512 bytes of valid UTF-8; List: a prefix empty
 *    or like it, a page token empty or like it, a page size 1..1000
 *    (admin strings are protobuf-c's NUL-terminated copies, so their
 *    lengths are strlen's); Revoke: a session like a lease call's, its
 *    length kept (a change: "a\0b" is not "a"); Snapshot: no session
 *    (empty, not NULL);
 *  - a failure: status REPLY_INVALID, a reason, and no message to free;
 *  - health: success only with a NUL-terminated name that fits.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "engine.h"
#include "fuzz.h"

#define REQUIRE(cond)                                                      \
    do {                                                                   \
        if (!(cond))                                                       \
            abort();                                                       \
    } while (0)

/* Well-formed UTF-8 as Unicode's Table 3-7 lists it: each lead byte
 * allows a narrower range for the byte after it, which rules out
 * overlong forms, surrogates and code points above U+10FFFF. */
static bool utf8_ok(const unsigned char *p, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned char c = p[i];
        size_t more;
        unsigned char lo = 0x80, hi = 0xbf; /* of the second byte */
        if (c <= 0x7f)
            more = 0;
        else if (c >= 0xc2 && c <= 0xdf)
            more = 1;
        else if (c == 0xe0)
            more = 2, lo = 0xa0;
        else if (c >= 0xe1 && c <= 0xec)
            more = 2;
        else if (c == 0xed)
            more = 2, hi = 0x9f;
        else if (c >= 0xee && c <= 0xef)
            more = 2;
        else if (c == 0xf0)
            more = 3, lo = 0x90;
        else if (c >= 0xf1 && c <= 0xf3)
            more = 3;
        else if (c == 0xf4)
            more = 3, hi = 0x8f;
        else
            return false;
        if (len - i - 1 < more)
            return false;
        for (size_t k = 1; k <= more; k++) {
            unsigned char b = p[i + k];
            if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xbf))
                return false;
        }
        i += more + 1;
    }
    return true;
}

/* The rule for session ids and owners on the wire. */
static bool string_ok(const char *s, size_t len, size_t max)
{
    return s != NULL && len >= 1 && len <= max &&
           memchr(s, '\0', len) == NULL &&
           utf8_ok((const unsigned char *)s, len);
}

/* A reply made from req must decode, as a Renew, to the same strings and
 * the granted token. */
static void check_reply(const struct request *req, const uint8_t *data,
                        size_t size)
{
    struct request r2 = *req;
    r2.grant_token = req->token ^ 0x5a5a5a5a5a5a5a5aULL;
    /* Some non-negative expiry from the input. */
    uint64_t expiry = 0;
    for (size_t i = 0; i < size && i < 8; i++)
        expiry = expiry << 8 | data[i];
    r2.grant_expiry_ns = (int64_t)(expiry & INT64_MAX);
    uint8_t *buf = malloc(CODEC_REPLY_MAX);
    REQUIRE(buf != NULL);
    size_t n = codec_encode_reply(&r2, buf, CODEC_REPLY_MAX);
    REQUIRE(n <= CODEC_REPLY_MAX);
    struct request back = {0};
    void *msg;
    REQUIRE(codec_decode(OP_RENEW, buf, n, &back, &msg) == 0);
    REQUIRE(back.session_len == req->session_len &&
            memcmp(back.session, req->session, req->session_len) == 0);
    REQUIRE(back.owner_len == req->owner_len &&
            memcmp(back.owner, req->owner, req->owner_len) == 0);
    REQUIRE(back.token == r2.grant_token);
    codec_free(msg);
    free(buf);
}

static void fuzz_decode(enum request_op op, const uint8_t *data, size_t size)
{
    struct request req;
    memset(&req, 0xa5, sizeof(req)); /* what the decoder must set, it sets */
    req.reason[0] = '\0';
    void *msg = (void *)&req; /* must come back NULL on failure */
    int rc = codec_decode(op, data, size, &req, &msg);
    if (rc != 0) {
        REQUIRE(rc == -1);
        REQUIRE(msg == NULL);
        REQUIRE(req.status == REPLY_INVALID);
        REQUIRE(req.reason[0] != '\0');
        REQUIRE(memchr(req.reason, '\0', sizeof(req.reason)) != NULL);
        return;
    }
    REQUIRE(msg != NULL);
    REQUIRE(req.op == op);
    switch (op) {
    case OP_ACQUIRE:
    case OP_RENEW:
    case OP_RELEASE:
    case OP_WAIT: /* an AcquireRequest's fields */
        REQUIRE(string_ok(req.session, req.session_len, ENGINE_SESSION_MAX));
        REQUIRE(string_ok(req.owner, req.owner_len, ENGINE_OWNER_MAX));
        if (op != OP_RELEASE)
            check_reply(&req, data, size);
        break;
    case OP_WATCH: /* a session id, or a prefix that may be empty */
        REQUIRE(req.prefix == true || req.prefix == false);
        REQUIRE((req.prefix && req.session_len == 0) ||
                string_ok(req.session, req.session_len, ENGINE_SESSION_MAX));
        REQUIRE(req.session != NULL);
        break;
    case OP_GET:
        REQUIRE(req.session_len == strlen(req.session));
        REQUIRE(string_ok(req.session, req.session_len, ENGINE_SESSION_MAX));
        break;
    case OP_LIST:
        REQUIRE(req.session_len == strlen(req.session));
        REQUIRE(req.session_len == 0 ||
                string_ok(req.session, req.session_len, ENGINE_SESSION_MAX));
        REQUIRE(req.page_token_len == strlen(req.page_token));
        REQUIRE(req.page_token_len == 0 ||
                string_ok(req.page_token, req.page_token_len,
                          ENGINE_SESSION_MAX));
        REQUIRE(req.page_size >= 1 && req.page_size <= 1000);
        break;
    case OP_STATS:
        break;
    case OP_REVOKE: /* a change: the exact bytes, as a lease call's */
        REQUIRE(string_ok(req.session, req.session_len, ENGINE_SESSION_MAX));
        break;
    case OP_SNAPSHOT: /* no session: the audit of a refusal reads it */
        REQUIRE(req.session != NULL && req.session_len == 0);
        break;
    }
    codec_free(msg);
}

static void fuzz_health(const uint8_t *data, size_t size)
{
    if (size == 0)
        return;
    size_t cap = (size_t)data[0] + 1;
    /* Exactly cap bytes, so that writing past them trips ASan. */
    char *service = malloc(cap);
    REQUIRE(service != NULL);
    if (codec_decode_health(data + 1, size - 1, service, cap) == 0)
        REQUIRE(memchr(service, '\0', cap) != NULL);
    free(service);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    unsigned pick = data[0] % (OP_SNAPSHOT + 2);
    if (pick <= OP_SNAPSHOT)
        fuzz_decode((enum request_op)pick, data + 1, size - 1);
    else
        fuzz_health(data + 1, size - 1);
    return 0;
}
