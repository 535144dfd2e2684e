/*
 * k8s.h - Kubernetes manifests for a job (`paddle k8s`, docs/engines.md).
 *
 * Default: a Secret (the job secret), a ConfigMap (the recipe and the small
 * files it reads), a headless Service and a StatefulSet for the pservers
 * (stable names NAME-pserver-K.NAME-pserver), and the trainers as an Indexed
 * Job; every role runs `paddle start` with the Fleet variables. kubeflow: a
 * Kubeflow PaddleJob instead of the Service, StatefulSet and Job (its
 * controller sets PADDLE_MASTER and the counts; the rendezvous forms the
 * job). pod: one Pod holding every role as a container on localhost (for
 * `podman kube play`), with the ConfigMap and the secret inline.
 *
 * A recipe with settings.checkpoint_dir gets a volume at /checkpoint in
 * every role (the claim named by checkpoint_claim; an emptyDir the pod's
 * containers share with pod), checkpoint_dir /checkpoint/NAME and --resume,
 * so that a role Kubernetes starts again continues from the last complete
 * checkpoint. Without a claim (and not pod) that is an error.
 */
#ifndef PD_K8S_H
#define PD_K8S_H

#include "../core/recipe.h"

#include <stdio.h>

typedef struct pd_k8s_opts {
    const char *image, *name, *namespace_;
    const char *checkpoint_claim; /* a PersistentVolumeClaim every pod mounts at /checkpoint, or NULL */
    const char *const *args;   /* extra arguments of `paddle start` (--key=value) */
    int nargs;
    int kubeflow, pod;
} pd_k8s_opts;

int pd_k8s_print(FILE *f, const pd_recipe *r, const pd_k8s_opts *o);

#endif
