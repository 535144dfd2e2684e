# vendor/vendor.mk — paddle's third-party libraries, built statically from
# pinned Debian source packages. Included by the top Makefile:
#
#   include vendor/vendor.mk
#   paddle: $(DEPS_musl_STAMP) ...
#   	musl-gcc -static $(DEPS_musl_CPPFLAGS) -D_GNU_SOURCE ... \
#   	    $(DEPS_musl_LDFLAGS) $(DEPS_musl_LIBS)
#
# For each flavour F (musl: CC=musl-gcc, the static release binary; glibc:
# CC=gcc, for the ASan and CUDA builds) it defines
#   deps-F              build zlib, OpenSSL, libssh2, Lua and OpenBLAS for F
#   DEPS_F_STAMP        file that exists once all of them are built (depend on it)
#   DEPS_F_PREFIX       build/deps/F, holding include/ and lib/
#   DEPS_F_CPPFLAGS     -Ibuild/deps/F/include
#   DEPS_F_LDFLAGS      -Lbuild/deps/F/lib
#   DEPS_F_LIBS         $(DEPS_LIBS), plus -ldl for glibc
# and, shared:
#   DEPS_LIBS           -llua -lopenblas -lssh2 -lssl -lcrypto -lz -lm -lpthread
#   vendor-tools        apt-get install the missing build tools (root, CI)
#   vendor-fetch        download, verify and unpack every pinned source
#   vendor-selftest     link vendor/selftest.c against each flavour and run it
#   deps-clean          remove build/deps (keeps sources and the download cache)
# Code that includes <cblas.h> under musl needs -D_GNU_SOURCE (cpu_set_t).
#
# Each dependency has a stamp named after its version, so a second make
# rebuilds nothing and moving a pin in vendor/versions.txt rebuilds just what
# changed. Build logs: build/deps/F/log/PKG.log (times in log/times.txt).
# Builds run one at a time (a lock in vendor/build.sh), each with -j2.

vendor_saved_goal := $(.DEFAULT_GOAL)

VENDOR_DIR  := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
DEPS_DIR    ?= build/deps
VENDOR_SRC  ?= build/src

DEPS_LIBS := -llua -lopenblas -lssh2 -lssl -lcrypto -lz -lm -lpthread

VENDOR_PKGS := zlib openssl libssh2 lua5.4 openblas

# Version of package $(1) as pinned, without epoch ("1:1.2.13.dfsg-1" ->
# "1.2.13.dfsg-1": what file and directory names carry).
vendor_version = $(shell awk '$$1 == "$(1)" { v = $$2; sub(/^[0-9]+:/, "", v); print v; exit }' \
                 $(VENDOR_DIR)/versions.txt)

$(foreach p,$(VENDOR_PKGS),\
  $(eval VENDOR_V_$(p) := $(call vendor_version,$(p)))\
  $(if $(VENDOR_V_$(p)),,$(error vendor/versions.txt has no pin for $(p)))\
  $(eval VENDOR_SRC_$(p) := $(VENDOR_SRC)/$(p)-$(VENDOR_V_$(p))))

# --- sources: fetched once, shared by the flavours ---------------------------
define vendor_fetch_rule
$(VENDOR_SRC_$(1))/.paddle-unpacked:
	@$(VENDOR_DIR)/fetch.sh $(1)
endef
$(foreach p,$(VENDOR_PKGS),$(eval $(call vendor_fetch_rule,$(p))))

# --- one flavour ---------------------------------------------------------------
# $(1): flavour, $(2): extra libraries for that libc.
define vendor_flavour
DEPS_$(1)_PREFIX   := $(DEPS_DIR)/$(1)
DEPS_$(1)_STAMP    := $(DEPS_DIR)/$(1)/stamp/all
DEPS_$(1)_CPPFLAGS := -I$(DEPS_DIR)/$(1)/include
DEPS_$(1)_LDFLAGS  := -L$(DEPS_DIR)/$(1)/lib
DEPS_$(1)_LIBS     := $(DEPS_LIBS) $(2)

$(DEPS_DIR)/$(1)/stamp/all: $(foreach p,$(VENDOR_PKGS),$(DEPS_DIR)/$(1)/stamp/$(p)-$(VENDOR_V_$(p)))
	@touch $$@

deps-$(1): $(DEPS_DIR)/$(1)/stamp/all

$(DEPS_DIR)/$(1)/selftest: $(VENDOR_DIR)/selftest.c $(DEPS_DIR)/$(1)/stamp/all
	$(if $(filter musl,$(1)),musl-gcc -static,gcc) -D_GNU_SOURCE -O2 -Wall -Wextra \
	    -I$(DEPS_DIR)/$(1)/include -o $$@ $$< -L$(DEPS_DIR)/$(1)/lib $(DEPS_LIBS) $(2)

vendor-selftest-$(1): $(DEPS_DIR)/$(1)/selftest
	@$(VENDOR_DIR)/selftest.sh $(1) $$<

.PHONY: deps-$(1) vendor-selftest-$(1)
endef

$(eval $(call vendor_flavour,musl,))
$(eval $(call vendor_flavour,glibc,-ldl))

# One stamp per (flavour, package, version).
define vendor_pkg_stamp
$(DEPS_DIR)/$(2)/stamp/$(1)-$(VENDOR_V_$(1)): $(VENDOR_SRC_$(1))/.paddle-unpacked $(VENDOR_DIR)/build.sh
	@$(VENDOR_DIR)/build.sh $(2) $(1) $(VENDOR_SRC_$(1)) $(DEPS_DIR)/$(2)
	@mkdir -p $$(@D) && touch $$@
endef
$(foreach f,musl glibc,$(foreach p,$(VENDOR_PKGS),$(eval $(call vendor_pkg_stamp,$(p),$(f)))))

# Lua and OpenBLAS carry our patches (vendor/patches/).
$(foreach f,musl glibc,$(eval \
  $(DEPS_DIR)/$(f)/stamp/lua5.4-$(VENDOR_V_lua5.4): $(VENDOR_DIR)/patches/lua5.4-count-work.patch))
$(foreach f,musl glibc,$(eval \
  $(DEPS_DIR)/$(f)/stamp/openblas-$(VENDOR_V_openblas): $(VENDOR_DIR)/patches/openblas-unknown-intel-models.patch))

# libssh2 is built against our OpenSSL and zlib.
$(foreach f,musl glibc,$(eval \
  $(DEPS_DIR)/$(f)/stamp/libssh2-$(VENDOR_V_libssh2): \
    $(DEPS_DIR)/$(f)/stamp/openssl-$(VENDOR_V_openssl) \
    $(DEPS_DIR)/$(f)/stamp/zlib-$(VENDOR_V_zlib)))

# --- shared targets -------------------------------------------------------------
vendor-tools:
	@$(VENDOR_DIR)/tools.sh all

vendor-fetch: $(foreach p,$(VENDOR_PKGS),$(VENDOR_SRC_$(p))/.paddle-unpacked)

vendor-selftest: vendor-selftest-musl vendor-selftest-glibc

deps-clean:
	rm -rf $(DEPS_DIR)

.PHONY: vendor-tools vendor-fetch vendor-selftest deps-clean

.DEFAULT_GOAL := $(vendor_saved_goal)
