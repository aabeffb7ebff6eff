/*
 * The names of gRPC's status codes, as gRPC spells them ("NOT_FOUND",
 * "UNAVAILABLE"…): for metrics labels and for messages. Needs no gRPC
 * header; codes are those of grpc/status.h.
 */
#ifndef LEASED_STATUS_H
#define LEASED_STATUS_H

/* How many codes there are: 0 (OK) to 16 (UNAUTHENTICATED). */
#define STATUS_CODES 17

/* The name of code; "UNKNOWN" for one gRPC does not define. Static. */
const char *status_name(int code);

#endif
