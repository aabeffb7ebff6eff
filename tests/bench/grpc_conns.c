/* One leasebench thread's gRPC connections (see grpc_conns.h). */
#include "grpc_conns.h"

#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <stdlib.h>

int grpc_conns_open(struct grpc_conns *g, const struct bench_thread *t,
                    const char *hostport)
{
    const struct bench_run *run = t->run;
    size_t n = run->connections / run->threads +
               ((size_t)t->id < run->connections % run->threads);
    g->nchannels = n > 0 ? n : 1;
    g->channels = calloc(g->nchannels, sizeof(*g->channels));
    if (g->channels == NULL)
        return -1;
    g->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    for (size_t i = 0; i < g->nchannels; i++) {
        /* A distinct channel argument per channel keeps gRPC from sharing
         * one connection among them. */
        grpc_arg arg = {.type = GRPC_ARG_INTEGER,
                        .key = "leasebench.connection",
                        .value.integer = (int)(t->id * 1000 + i)};
        grpc_channel_args args = {1, &arg};
        g->channels[i] = grpc_channel_create(hostport, creds, &args);
    }
    grpc_channel_credentials_release(creds);
    return 0;
}

grpc_channel *grpc_conns_channel(const struct grpc_conns *g,
                                 const struct slot *s)
{
    return g->channels[(size_t)s->id % g->nchannels];
}

void grpc_conns_close(struct grpc_conns *g)
{
    for (size_t i = 0; i < g->nchannels; i++)
        grpc_channel_destroy(g->channels[i]);
    grpc_completion_queue_shutdown(g->cq);
    while (grpc_completion_queue_next(g->cq,
                                      gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
               .type != GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(g->cq);
    free(g->channels);
}
