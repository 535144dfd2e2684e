/* version.c - build identity, filled in by the Makefile. */
#include "version.h"

#ifndef PD_GIT_REV
#define PD_GIT_REV "unknown"
#endif
#ifndef PD_FLAVOUR
#define PD_FLAVOUR "unknown"
#endif

const char *pd_build_rev(void) { return PD_GIT_REV; }
const char *pd_build_flavour(void) { return PD_FLAVOUR; }
