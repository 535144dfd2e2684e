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
 * Under mpirun (OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/PMI_SIZE) or srun
 * (SLURM_PROCID/SLURM_NTASKS) without a role variable, ranks 0..P-1 are the
 * pservers of the list and the rest trainers 0..
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
    char scheme[16];        /* fluid, fleet, mpi, slurm */
} pd_env_role;

/* Fill e from the environment; on a missing or contradictory variable
 * returns PD_EINVAL with a message naming it. */
int pd_env_role_get(pd_env_role *e);

#endif
