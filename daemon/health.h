/*
 * grpc.health.v1 Check and Watch, served by the front end's
 * completion-queue thread (see frontend.c), for the whole server ("") and
 * the lease service: SERVING, or NOT_SERVING while storage fails or once
 * the drain began; any other service is NOT_FOUND (Check) or
 * SERVICE_UNKNOWN (Watch). No bearer token is needed (probes send none).
 * A Watch stream gets each new status, and when draining, NOT_SERVING and
 * then its end (status OK). The states of a call are in health.c.
 *
 * Everything here runs on the completion-queue thread, except
 * health_init(), which runs before the server starts.
 */
#ifndef LEASED_HEALTH_H
#define LEASED_HEALTH_H

#include <grpc/grpc.h>
#include <stdbool.h>
#include <stddef.h>

#include "frontend.h"

struct health_call;

/* Caller-owned; the front end reads none of it but through the
 * functions below. */
struct health {
    grpc_server *server;       /* borrowed */
    grpc_completion_queue *cq; /* borrowed */
    void *methods[2];          /* Check, Watch */
    int status;                /* the ServingStatus reported now */
    bool draining;
    struct health_call *watchers; /* open Watch streams */
    size_t live;  /* calls allocated */
    size_t armed; /* of which requested from the server, no call yet */
};

/* Registers Check and Watch with server, which must not be started yet.
 * server and cq are borrowed and must outlive every call. */
void health_init(struct health *h, grpc_server *server,
                 grpc_completion_queue *cq);

/* Requests n Check and n Watch calls from the server; each one that
 * arrives requests its successor. Requests made once the server shut
 * down complete at once, unsuccessfully, and end there. */
void health_arm(struct health *h, int n);

/* The completion of a batch whose tag is one of health's (TAG_HEALTH_*);
 * success as gRPC reports it. */
void health_on_event(struct health *h, struct frontend_tag *tag,
                     bool success);

/* What to report: NOT_SERVING unless serving and not draining. Brings
 * every Watch stream up to date; once draining, each ends after it has
 * NOT_SERVING. Called before each event is handled. */
void health_set(struct health *h, bool serving, bool draining);

/* Whether a call is in progress (it arrived and is not over yet). */
bool health_busy(const struct health *h);

/* Whether no call is left, requested ones included. */
bool health_empty(const struct health *h);

#endif
