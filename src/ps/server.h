/*
 * server.h - the parameter server: holds its share of the parameters and
 * runs the optimizer on it (docs/protocol.md).
 *
 *     pd_server_opts o = {.id = 0, .npservers = 2, .ntrainers = 2, .port = 7164};
 *     memcpy(o.secret, secret, PD_SECRET);
 *     rc = pd_server_run(&recipe, &o);   // returns when every trainer finished
 */
#ifndef PD_SERVER_H
#define PD_SERVER_H

#include "proto.h"
#include "../core/recipe.h"

/* A connection must finish the handshake within this many seconds. */
#define PD_HANDSHAKE_TIMEOUT_S 10.0
/* Connections still in the handshake that a pserver holds at once; more are
 * accepted and closed at once. */
#define PD_MAX_UNAUTH 64
/* A peer silent this long while it is waited on is dead (settings.heartbeat_timeout). */
#define PD_HEARTBEAT_TIMEOUT_S 30.0

typedef struct pd_server_opts {
    int id, npservers, ntrainers;
    const char *bind_addr;  /* NULL: every interface */
    int port;               /* first port; 0: find a free range */
    uint8_t secret[PD_SECRET];
    uint8_t job[PD_JOB_ID];
    const char *init_shard; /* start from a saved shard */
    int resume;             /* start from the newest complete checkpoint, if any */
    int ready_fd;           /* >= 0: write "PORT\n" there once listening */
    volatile int *stop;     /* set by a signal: exit */
    double idle_timeout;    /* exit when no trainer came for this long (0: never) */
    double handshake_timeout; /* 0: PD_HANDSHAKE_TIMEOUT_S */
    int metrics_port;       /* > 0: serve GET /metrics on bind_addr:metrics_port */
} pd_server_opts;

int pd_server_run(const pd_recipe *r, const pd_server_opts *o);

#endif
