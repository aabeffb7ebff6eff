/* Identities of connections, logged once each (see peers.h). */
#include "peers.h"

#include <grpc/support/alloc.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "identity.h"
#include "log.h"

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
        char identity[IDENTITY_MAX + 1];
        identity_of_call(call, identity, sizeof(identity));
        log_info("connection", "peer=%s identity=\"%s\"", peer,
                 identity[0] != '\0' ? identity : "none");
        snprintf(slot, PEERS_ADDR_MAX, "%s", peer);
    }
    gpr_free(peer);
}
