/* registry.c - find a backend by name. */
#include "backend.h"
#include "../core/pd.h"

#include <string.h>

/* Defined by src/backend/cuda.cu in the GPU build only. */
const pd_backend *pd_cuda_backend(void) __attribute__((weak));

const pd_backend *pd_backend_get(const char *name)
{
    if (name == NULL || strcmp(name, "cpu") == 0) return &pd_backend_cpu;
    if (strcmp(name, "cuda") == 0) {
        if (!pd_cuda_backend) {
            pd_err_set(PD_EINVAL, "device 'cuda' asked for, but this paddle has no CUDA backend: "
                                  "build paddle-cuda with 'make cuda', or set device = \"cpu\"");
            return NULL;
        }
        return pd_cuda_backend(); /* sets the message itself when there is no GPU */
    }
    pd_err_set(PD_EINVAL, "unknown device '%s' (valid: cpu, cuda)", name);
    return NULL;
}

int pd_backend_missing(const char *name)
{
    return name && strcmp(name, "cuda") == 0 && pd_cuda_backend ? PD_ENODEV : PD_EINVAL;
}
