/*
 * rendezvous.h - forming a job from ranks that know only the master's
 * address (mpirun, srun, Kubeflow's PADDLE_MASTER): docs/engines.md.
 *
 * The master (rank 0, or under PADDLE_MASTER without ranks whoever binds the
 * master's address first) listens; every other rank connects, proves the job
 * secret (HMAC over both nonces, like the pserver handshake) and registers
 * its rank (or none), the role it asks for (or none) and the port range it
 * holds. When all `size` have arrived the master assigns the roles (ranks
 * 0..P-1 pservers, the rest trainers; a rank without a number takes the
 * first free slot of the kind it asks for) and sends each its role and the
 * pserver endpoint table. One line per message:
 *
 *   rank -> master  PDRV1 HELLO JOB NONCE RANK SIZE KIND PORT HOST
 *   master -> rank  PDRV1 CHALLENGE NONCE PROOF        (or PDRV1 ERR text)
 *   rank -> master  PDRV1 AUTH PROOF
 *   master -> rank  PDRV1 ROLE KIND ID RANK ENDPOINTS   (or PDRV1 ERR text)
 */
#ifndef PD_RENDEZVOUS_H
#define PD_RENDEZVOUS_H

#include <stddef.h>
#include <stdint.h>

#define PD_RDV_MAX 4096

typedef struct pd_rdv_opts {
    const char *master_host;   /* where the master listens (a name or address) */
    int master_port;
    const char *master_from;   /* what named it, for messages: "--master", "PADDLE_MASTER", ... */
    int master;                /* 1: this is the master; 0: a rank; -1: whoever binds first */
    int rank;                  /* this rank, or -1 when the engine gives none */
    const char *rank_var;      /* e.g. "OMPI_COMM_WORLD_RANK" */
    int size;
    const char *size_var;
    int kind;                  /* the role asked for (PD_ROLE_*), or -1 */
    int npservers, ntrainers;  /* npservers + ntrainers == size */
    int base_port, nports;     /* a pserver's ports: nports from base_port up (the first free range) */
    const char *host;          /* this rank's address for the others, or NULL: as the master sees it */
    const uint8_t *secret;
    double timeout;            /* seconds for the whole rendezvous */
} pd_rdv_opts;

typedef struct pd_rdv_result {
    int kind, id, rank;
    int port;                  /* the first of this rank's held ports */
    char endpoints[PD_RDV_MAX]; /* host:port,... of the pservers */
    int held[16];              /* sockets holding the port range until the pserver binds */
    int nheld;
} pd_rdv_result;

/* Take part in the rendezvous. Returns 0 with *res filled, or a negative
 * PD_E* with a one-line message naming the rank, variable or address. */
int pd_rdv_run(const pd_rdv_opts *o, pd_rdv_result *res);
/* Close the held port range (just before the pserver binds it). */
void pd_rdv_release(pd_rdv_result *res);
/* The first host of a Slurm hostlist ("node[01-04,07],gpu1" -> "node01"). */
int pd_hostlist_first(const char *list, char *out, size_t len);

#endif
