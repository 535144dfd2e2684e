/*
 * env.h - the role of this process from the environment (`paddle start`),
 * as PaddlePaddle's Kubernetes, MPI and Slurm setups set it:
 *
 *   Fluid                      Fleet                          meaning
 *   PADDLE_TRAINING_ROLE       TRAINING_ROLE                  PSERVER or TRAINER
 *   PADDLE_PSERVER_IPS +       PADDLE_PSERVERS_IP_PORT_LIST   the pservers
 *     PADDLE_PSERVER_PORT
 *   PADDLE_TRAINERS            PADDLE_TRAINERS_NUM            number of trainers
 *   PADDLE_CURRENT_IP          POD_IP + PADDLE_PORT           this pserver's address
 *   PADDLE_TRAINER_ID          PADDLE_TRAINER_ID              this trainer's index
 *
 * Also PaddleFlow's PADDLE_TRAINER_ENDPOINTS (the trainers' count) and
 * Volcano's VC_PS_HOSTS/VC_WORKER_HOSTS, VC_PS_NUM/VC_WORKER_NUM and
 * VC_TASK_INDEX (the role from the host name or TRAINING_ROLE).
 *
 * Under mpirun (OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/PMI_SIZE) or srun
 * (SLURM_PROCID/SLURM_NTASKS) without a role variable, ranks 0..P-1 are the
 * pservers of the list and the rest trainers 0.. Without a pserver list
 * the job forms by a rendezvous (rendezvous.h) at --master=HOST:PORT,
 * PADDLE_MASTER (Kubeflow; with PADDLE_NNODES, PADDLE_SERVER_NUM,
 * PADDLE_TRAINER_NUM), the first node of SLURM_STEP_NODELIST, or this host
 * under a one-host mpirun. docs/engines.md has every variable.
 */
#ifndef PD_ENV_H
#define PD_ENV_H

typedef struct pd_env_role {
    int kind;               /* PD_ROLE_PSERVER or PD_ROLE_TRAINER */
    int id;                 /* pserver index in the list, or trainer id */
    int npservers, ntrainers;
    char endpoints[4096];   /* host:port,host:port */
    char bind[256];         /* pservers: the address to listen on */
    int port;               /* pservers: the first port */
    char scheme[16];        /* fluid, fleet, mpi, slurm, volcano, kubeflow */
    /* without a pserver list: the rendezvous */
    int rendezvous;
    int rank, size;         /* rank -1: the engine numbers none */
    char rank_var[32], size_var[32];
    int kind_req;           /* the role asked for (TRAINING_ROLE), or -1 */
    char master[256];
    int master_port;        /* 0: derived from the job secret */
    char master_from[64];   /* what named the master, for messages */
    int master_self;        /* 1 this is the master, 0 not, -1 whoever binds first */
    char host[256];         /* this rank's address when the environment says (POD_IP) */
    char np_var[32], nt_var[32]; /* the variables that gave the counts, or "" */
} pd_env_role;

/* Fill e from the environment; master: --master=HOST[:PORT] or NULL. On a
 * missing or contradictory variable returns PD_EINVAL with a message naming
 * it. */
int pd_env_role_get(pd_env_role *e, const char *master);
/* Rendezvous: the counts, from the environment, else --pservers (p_given)
 * and the rest trainers, else the recipe's; they must add up to the size. */
int pd_env_counts(pd_env_role *e, int recipe_p, int recipe_t, int p_given);

#endif
