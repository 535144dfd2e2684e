/* version.h - what `paddle version` reports. */
#ifndef PD_VERSION_H
#define PD_VERSION_H

#define PD_VERSION "0.1.0"

/* The build's git revision and flavour (static-musl, glibc-asan, ...),
 * set by the Makefile. */
const char *pd_build_rev(void);
const char *pd_build_flavour(void);

#endif
