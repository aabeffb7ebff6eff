/*
 * The connections the completion-queue thread has seen lately, so that
 * the verified identity of each (identity.h) is logged once, when its
 * first call arrives:
 *
 *   connection peer=ipv4:10.0.0.7:51234 identity=app-1.example.com
 *
 * gRPC's C core reports no connection events, so a connection is known by
 * its peer address, in a cache of PEERS_SLOTS addresses: a connection
 * whose slot another took is logged again. One thread only.
 */
#ifndef LEASED_PEERS_H
#define LEASED_PEERS_H

#include <grpc/grpc.h>

#define PEERS_SLOTS 1024
#define PEERS_ADDR_MAX 64

struct peers {
    char addr[PEERS_SLOTS][PEERS_ADDR_MAX];
};

/* Logs the identity of call's connection if not seen lately. */
void peers_note(struct peers *p, grpc_call *call);

#endif
