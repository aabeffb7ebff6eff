/* The codec: the mirror messages match the public proto, decoding
 * validates, encoding produces what a client of the public proto reads. */
#include <stdlib.h>

#include "check.h"
#include "codec.h"
#include "leased/admin/v1/admin.pb-c.h"
#include "leased/codec/v1/wire.pb-c.h"
#include "leased/v1/leases.pb-c.h"
#include "mecatl/driver/v1/session_lease.pb-c.h"
#include "store.h"
#include "validate.h"

/* Same fields (name, number, label), string <-> bytes, and message fields
 * of matching types. */
static int same_shape(const ProtobufCMessageDescriptor *pub,
                      const ProtobufCMessageDescriptor *mirror)
{
    if (pub->n_fields != mirror->n_fields)
        return 0;
    for (unsigned i = 0; i < pub->n_fields; i++) {
        const ProtobufCFieldDescriptor *a = &pub->fields[i];
        const ProtobufCFieldDescriptor *b = &mirror->fields[i];
        if (strcmp(a->name, b->name) != 0 || a->id != b->id ||
            a->label != b->label)
            return 0;
        if (a->type == PROTOBUF_C_TYPE_STRING) {
            if (b->type != PROTOBUF_C_TYPE_BYTES)
                return 0;
        } else if (a->type != b->type) {
            return 0;
        } else if (a->type == PROTOBUF_C_TYPE_MESSAGE &&
                   a->descriptor != b->descriptor &&
                   !same_shape(a->descriptor, b->descriptor)) {
            return 0;
        }
    }
    return 1;
}

TEST(mirror_matches_public_proto)
{
    CHECK(same_shape(&mecatl__driver__v1__lease__descriptor,
                     &leased__codec__v1__wire_lease__descriptor));
    CHECK(same_shape(&mecatl__driver__v1__acquire_request__descriptor,
                     &leased__codec__v1__wire_acquire_request__descriptor));
    CHECK(same_shape(&mecatl__driver__v1__renew_request__descriptor,
                     &leased__codec__v1__wire_lease_request__descriptor));
    CHECK(same_shape(&mecatl__driver__v1__release_request__descriptor,
                     &leased__codec__v1__wire_lease_request__descriptor));
    CHECK(same_shape(&mecatl__driver__v1__lease_response__descriptor,
                     &leased__codec__v1__wire_lease_response__descriptor));
    CHECK_EQ_I64(mecatl__driver__v1__release_response__descriptor.n_fields,
                 0);
    CHECK(same_shape(&leased__v1__watch_request__descriptor,
                     &leased__codec__v1__wire_watch_request__descriptor));
    CHECK(same_shape(&leased__v1__watch_response__descriptor,
                     &leased__codec__v1__wire_watch_response__descriptor));
    CHECK(same_shape(&leased__v1__event__descriptor,
                     &leased__codec__v1__wire_event__descriptor));
    CHECK(same_shape(&leased__v1__lease__descriptor,
                     &leased__codec__v1__wire_lease__descriptor));
    /* And the check can fail: a different message is not the same. */
    CHECK(!same_shape(&mecatl__driver__v1__acquire_request__descriptor,
                      &leased__codec__v1__wire_lease__descriptor));
}

TEST(method_paths_from_descriptor)
{
    char p[128];
    codec_method_path(OP_ACQUIRE, p, sizeof(p));
    CHECK_STR(p, "/mecatl.driver.v1.SessionLeaseService/Acquire");
    codec_method_path(OP_RENEW, p, sizeof(p));
    CHECK_STR(p, "/mecatl.driver.v1.SessionLeaseService/Renew");
    codec_method_path(OP_RELEASE, p, sizeof(p));
    CHECK_STR(p, "/mecatl.driver.v1.SessionLeaseService/Release");
}

static size_t pack_acquire(const char *session, const char *owner,
                           uint8_t *buf)
{
    Mecatl__Driver__V1__AcquireRequest m =
        MECATL__DRIVER__V1__ACQUIRE_REQUEST__INIT;
    m.session_id = (char *)session;
    m.owner = (char *)owner;
    return mecatl__driver__v1__acquire_request__pack(&m, buf);
}

TEST(decode_acquire)
{
    uint8_t buf[256];
    size_t n = pack_acquire("s1", "owner-a", buf);
    struct request req;
    memset(&req, 0, sizeof(req));
    void *msg;
    CHECK_EQ_I64(codec_decode(OP_ACQUIRE, buf, n, &req, &msg), 0);
    CHECK(msg != NULL);
    CHECK_EQ_I64(req.session_len, 2);
    CHECK(memcmp(req.session, "s1", 2) == 0);
    CHECK_EQ_I64(req.owner_len, 7);
    codec_free(msg);
}

static int decode_fails(enum request_op op, const uint8_t *buf, size_t n,
                        const char *reason_part)
{
    struct request req;
    memset(&req, 0, sizeof(req));
    void *msg = (void *)1;
    int rc = codec_decode(op, buf, n, &req, &msg);
    if (rc == 0 || msg != NULL || req.status != REPLY_INVALID ||
        strstr(req.reason, reason_part) == NULL) {
        fprintf(stderr, "decode rc=%d reason=\"%s\", want \"%s\"\n", rc,
                req.reason, reason_part);
        codec_free(rc == 0 ? msg : NULL);
        return 0;
    }
    return 1;
}

TEST(decode_refuses_bad_strings)
{
    /* Field 1 (session_id), length-delimited, hand-made. */
    static const uint8_t nul[] = {0x0a, 0x07, 'a', 'l', 'i', 'c', 'e', 0,
                                  'x',  0x12, 0x01, 'B'};
    CHECK(decode_fails(OP_ACQUIRE, nul, sizeof(nul), "NUL"));
    static const uint8_t bad_utf8[] = {0x0a, 0x02, 0xc3, 0x28,
                                       0x12, 0x01, 'B'};
    CHECK(decode_fails(OP_ACQUIRE, bad_utf8, sizeof(bad_utf8), "UTF-8"));
    static const uint8_t surrogate[] = {0x0a, 0x03, 0xed, 0xa0, 0x80,
                                        0x12, 0x01, 'B'};
    CHECK(decode_fails(OP_ACQUIRE, surrogate, sizeof(surrogate), "UTF-8"));
    static const uint8_t overlong[] = {0x0a, 0x02, 0xc0, 0xaf,
                                       0x12, 0x01, 'B'};
    CHECK(decode_fails(OP_ACQUIRE, overlong, sizeof(overlong), "UTF-8"));
    static const uint8_t no_owner[] = {0x0a, 0x01, 's'};
    CHECK(decode_fails(OP_ACQUIRE, no_owner, sizeof(no_owner),
                       "owner: empty"));
    CHECK(decode_fails(OP_ACQUIRE, NULL, 0, "session_id: empty"));
    char big[600];
    memset(big, 'x', sizeof(big) - 1);
    big[512] = '\0';
    uint8_t buf[1024];
    size_t n = pack_acquire(big, "o", buf);
    struct request req;
    void *msg;
    CHECK_EQ_I64(codec_decode(OP_ACQUIRE, buf, n, &req, &msg), 0);
    codec_free(msg);
    big[512] = 'x';
    big[513] = '\0';
    n = pack_acquire(big, "o", buf);
    CHECK(decode_fails(OP_ACQUIRE, buf, n,
                       "session_id: longer than the limit of 512 bytes"));
    big[257] = '\0';
    n = pack_acquire("s", big, buf);
    CHECK(decode_fails(OP_ACQUIRE, buf, n,
                       "owner: longer than the limit of 256 bytes"));
}

TEST(decode_refuses_malformed_protobuf)
{
    static const uint8_t truncated_varint[] = {0x0a, 0x01, 's', 0x18, 0xff};
    CHECK(decode_fails(OP_ACQUIRE, truncated_varint,
                       sizeof(truncated_varint), "malformed"));
    static const uint8_t past_end[] = {0x0a, 0x7f, 's'};
    CHECK(decode_fails(OP_ACQUIRE, past_end, sizeof(past_end), "malformed"));
    static const uint8_t wrong_type[] = {0x08, 0x05, 0x12, 0x01, 'B'};
    CHECK(decode_fails(OP_ACQUIRE, wrong_type, sizeof(wrong_type),
                       "malformed"));
    CHECK(decode_fails(OP_RENEW, NULL, 0, "RenewRequest has no lease"));
    CHECK(decode_fails(OP_RELEASE, NULL, 0, "ReleaseRequest has no lease"));
}

TEST(decode_renew_keeps_token)
{
    Mecatl__Driver__V1__Lease l = MECATL__DRIVER__V1__LEASE__INIT;
    l.session_id = "s";
    l.owner = "o";
    l.token = UINT64_MAX;
    Mecatl__Driver__V1__RenewRequest m =
        MECATL__DRIVER__V1__RENEW_REQUEST__INIT;
    m.lease = &l;
    uint8_t buf[128];
    size_t n = mecatl__driver__v1__renew_request__pack(&m, buf);
    struct request req;
    void *msg;
    CHECK_EQ_I64(codec_decode(OP_RENEW, buf, n, &req, &msg), 0);
    CHECK_EQ_U64(req.token, UINT64_MAX);
    CHECK(req.op == OP_RENEW);
    codec_free(msg);
}

TEST(encode_reply_reads_as_lease_response)
{
    struct request req;
    memset(&req, 0, sizeof(req));
    req.op = OP_ACQUIRE;
    req.session = "s1";
    req.session_len = 2;
    req.owner = "owner-a";
    req.owner_len = 7;
    req.grant_token = 42;
    req.grant_expiry_ns = INT64_C(1796050010123456789);
    uint8_t buf[CODEC_REPLY_MAX];
    size_t n = codec_encode_reply(&req, buf, sizeof(buf));
    Mecatl__Driver__V1__LeaseResponse *r =
        mecatl__driver__v1__lease_response__unpack(NULL, n, buf);
    CHECK(r != NULL && r->lease != NULL && r->lease->expiry != NULL);
    if (r != NULL && r->lease != NULL && r->lease->expiry != NULL) {
        CHECK_STR(r->lease->session_id, "s1");
        CHECK_STR(r->lease->owner, "owner-a");
        CHECK_EQ_U64(r->lease->token, 42);
        CHECK_EQ_I64(r->lease->expiry->seconds, 1796050010);
        CHECK_EQ_I64(r->lease->expiry->nanos, 123456789);
    }
    mecatl__driver__v1__lease_response__free_unpacked(r, NULL);
    req.op = OP_RELEASE;
    CHECK_EQ_I64(codec_encode_reply(&req, buf, sizeof(buf)), 0);
}

TEST(validate_utf8)
{
    const unsigned char ok[] = "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80";
    CHECK(validate_string(ok, sizeof(ok) - 1, 512) == NULL);
    const unsigned char *bad[] = {
        (const unsigned char *)"\x80", (const unsigned char *)"\xc3",
        (const unsigned char *)"\xe2\x82", (const unsigned char *)"\xf5\x80\x80\x80",
        (const unsigned char *)"\xf4\x90\x80\x80", /* above U+10FFFF */
        (const unsigned char *)"\xe0\x80\xaf",     /* overlong */
        (const unsigned char *)"\xff"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK(validate_string(bad[i], strlen((const char *)bad[i]), 512) !=
              NULL);
}

static size_t pack_list(const char *prefix, int32_t page_size,
                        const char *token, uint8_t *buf)
{
    Leased__Admin__V1__ListRequest m = LEASED__ADMIN__V1__LIST_REQUEST__INIT;
    m.prefix = (char *)prefix;
    m.page_size = page_size;
    m.page_token = (char *)token;
    return leased__admin__v1__list_request__pack(&m, buf);
}

TEST(decode_admin_list)
{
    char p[128];
    codec_method_path(OP_LIST, p, sizeof(p));
    CHECK_STR(p, "/leased.admin.v1.Admin/List");
    uint8_t buf[256];
    const struct {
        int32_t asked;
        size_t got;
    } sizes[] = {{0, 100}, {1, 1}, {1000, 1000}, {5000, 1000}};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t n = pack_list("app/", sizes[i].asked, "app/7", buf);
        struct request req;
        memset(&req, 0, sizeof(req));
        void *msg;
        CHECK_EQ_I64(codec_decode(OP_LIST, buf, n, &req, &msg), 0);
        CHECK_EQ_I64(req.page_size, sizes[i].got);
        CHECK_EQ_I64(req.session_len, 4);
        CHECK_EQ_I64(req.page_token_len, 5);
        codec_free(msg);
    }
    size_t n = pack_list("", 0, "", buf); /* everything: fine */
    struct request req;
    memset(&req, 0, sizeof(req));
    void *msg;
    CHECK_EQ_I64(codec_decode(OP_LIST, buf, n, &req, &msg), 0);
    CHECK_EQ_I64(req.session_len, 0);
    codec_free(msg);
    n = pack_list("", -1, "", buf);
    CHECK(decode_fails(OP_LIST, buf, n, "page_size"));
    n = pack_list("\xff", 0, "", buf);
    CHECK(decode_fails(OP_LIST, buf, n, "prefix"));
    n = pack_list("a", 0, "\xc3", buf);
    CHECK(decode_fails(OP_LIST, buf, n, "page_token"));
    CHECK(decode_fails(OP_GET, (const uint8_t *)"\xff\xff", 2,
                       "malformed GetRequest"));
}

static size_t pack_watch(const char *session, const char *prefix,
                         uint64_t after, uint8_t *buf)
{
    Leased__V1__WatchRequest m = LEASED__V1__WATCH_REQUEST__INIT;
    m.session_id = (char *)session;
    m.prefix = (char *)prefix;
    m.after_revision = after;
    return leased__v1__watch_request__pack(&m, buf);
}

TEST(decode_watch)
{
    uint8_t buf[256];
    struct request req;
    void *msg;
    memset(&req, 0, sizeof(req));
    CHECK_EQ_I64(
        codec_decode(OP_WATCH, buf, pack_watch("s1", "", 7, buf), &req, &msg),
        0);
    CHECK(!req.prefix && req.session_len == 2 && req.after_revision == 7);
    codec_free(msg);
    memset(&req, 0, sizeof(req));
    CHECK_EQ_I64(
        codec_decode(OP_WATCH, buf, pack_watch("", "p/", 0, buf), &req, &msg),
        0);
    CHECK(req.prefix && req.session_len == 2 && req.after_revision == 0);
    CHECK(memcmp(req.session, "p/", 2) == 0);
    codec_free(msg);
    memset(&req, 0, sizeof(req));
    CHECK_EQ_I64(
        codec_decode(OP_WATCH, buf, pack_watch("", "", 0, buf), &req, &msg), 0);
    CHECK(req.prefix && req.session_len == 0);
    codec_free(msg);
    CHECK(
        decode_fails(OP_WATCH, buf, pack_watch("s", "p", 0, buf), "not both"));
}

TEST(encode_watch_reads_as_watch_response)
{
    struct store_event a = {
        5, STORE_GRANTED, {"s1", 2, "alice", 5, 9, 1500000000123456789}};
    struct store_event b = {6, STORE_RELEASED, {"s1", 2, "alice", 5, 9, 0}};
    const struct store_event *evs[] = {&a, &b};
    size_t n;
    uint8_t *buf = codec_encode_watch(evs, 2, 8, 0, &n);
    CHECK(buf != NULL);
    Leased__V1__WatchResponse *m =
        leased__v1__watch_response__unpack(NULL, n, buf);
    CHECK(m != NULL);
    CHECK_EQ_I64(m->n_events, 2);
    CHECK_EQ_I64(m->revision, 8);
    CHECK_EQ_I64(m->events[0]->revision, 5);
    CHECK_EQ_I64(m->events[0]->kind, LEASED__V1__EVENT__KIND__GRANTED);
    CHECK_STR(m->events[0]->lease->owner, "alice");
    CHECK_EQ_I64(m->events[0]->lease->token, 9);
    CHECK_EQ_I64(m->events[0]->lease->expiry->seconds, 1500000000);
    CHECK_EQ_I64(m->events[0]->lease->expiry->nanos, 123456789);
    CHECK_EQ_I64(m->events[1]->kind, LEASED__V1__EVENT__KIND__RELEASED);
    leased__v1__watch_response__free_unpacked(m, NULL);
    free(buf);
    buf = codec_encode_watch(NULL, 0, 3, 2, &n); /* compacted */
    m = leased__v1__watch_response__unpack(NULL, n, buf);
    CHECK(m != NULL && m->n_events == 0 && m->compact_revision == 2);
    leased__v1__watch_response__free_unpacked(m, NULL);
    free(buf);
}

CHECK_MAIN(mirror_matches_public_proto, method_paths_from_descriptor,
           decode_watch, encode_watch_reads_as_watch_response, decode_acquire,
           decode_refuses_bad_strings, decode_refuses_malformed_protobuf,
           decode_renew_keeps_token, encode_reply_reads_as_lease_response,
           validate_utf8, decode_admin_list)
