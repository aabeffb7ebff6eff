/* Identities of connections, logged once each (see peers.h). */
#include "peers.h"

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

/* The first value of the call's peer identity (SANs come before the
 * common name), or "none". */
static void identity_of(grpc_call *call, char *out, size_t len)
{
    snprintf(out, len, "none");
    grpc_auth_context *ctx = grpc_call_auth_context(call);
    if (ctx == NULL)
        return;
    grpc_auth_property_iterator it = grpc_auth_context_peer_identity(ctx);
    const grpc_auth_property *p = grpc_auth_property_iterator_next(&it);
    if (p != NULL)
        log_quotable(out, len, p->value, p->value_length);
    grpc_auth_context_release(ctx);
}

static size_t slot_of(const char *addr)
{
    uint32_t h = 2166136261u;
    for (const char *c = addr; *c != '\0'; c++)
        h = (h ^ (unsigned char)*c) * 16777619u;
    return h % PEERS_SLOTS;
}

void peers_note(struct peers *p, grpc_call *call)
{
    char *peer = grpc_call_get_peer(call);
    if (peer == NULL)
        return;
    char *slot = p->addr[slot_of(peer)];
    if (strncmp(slot, peer, PEERS_ADDR_MAX) != 0) {
        char identity[256];
        identity_of(call, identity, sizeof(identity));
        log_info("connection", "peer=%s identity=\"%s\"", peer, identity);
        snprintf(slot, PEERS_ADDR_MAX, "%s", peer);
    }
    gpr_free(peer);
}
