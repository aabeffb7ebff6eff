/* A caller's certificate identity (see identity.h). */
#include "identity.h"

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <stdbool.h>
#include <string.h>

/* The end of an identity too long to keep whole. */
#define CUT " ..."

/* The first value of property name in ctx into out (see identity.h);
 * false if there is none. */
static bool first_value(const grpc_auth_context *ctx, const char *name,
                        char *out, size_t len)
{
    grpc_auth_property_iterator it =
        grpc_auth_context_find_properties_by_name(ctx, name);
    const grpc_auth_property *p = grpc_auth_property_iterator_next(&it);
    if (p == NULL || p->value_length == 0)
        return false;
    size_t n = 0;
    for (; n < p->value_length && n + 1 < len; n++) {
        unsigned char c = (unsigned char)p->value[n];
        out[n] = c < 0x20 || c == 0x7f || c == '"' ? ' ' : (char)c;
    }
    out[n] = '\0';
    if (n < p->value_length && len > sizeof(CUT)) /* too long: cut, marked */
        memcpy(out + len - sizeof(CUT), CUT, sizeof(CUT));
    return true;
}

void identity_of_call(struct grpc_call *call, char *out, size_t len)
{
    out[0] = '\0';
    grpc_auth_context *ctx = grpc_call_auth_context(call);
    if (ctx == NULL)
        return;
    if (grpc_auth_context_peer_is_authenticated(ctx) &&
        !first_value(ctx, GRPC_PEER_URI_PROPERTY_NAME, out, len) &&
        !first_value(ctx, GRPC_PEER_DNS_PROPERTY_NAME, out, len))
        first_value(ctx, GRPC_X509_CN_PROPERTY_NAME, out, len);
    grpc_auth_context_release(ctx);
}
