# paddle - one static executable: launcher, parameter server and trainer.
#
#   make            ./paddle, static (musl), dependencies built from vendor/
#   make test       build, then unit and integration tests (what CI runs)
#   make asan       ./paddle-asan (glibc, ASan + UBSan) and the same tests on it
#   make fuzz       libFuzzer harnesses (clang), each run FUZZ_SECONDS (30)
#   make cuda       ./paddle-cuda (glibc + CUDA backend)
#   make image      a FROM scratch container image of ./paddle (podman or docker, offline)
#   make demo       the README's demo
#   make bench      benchmarks, printed as ratios against baselines
#   make bench-gpu  the CUDA backend checked and timed on an NVIDIA GPU (bench/gpu.sh)
#
# Objects go to build/obj/FLAVOUR/, so the flavours never mix.

.DEFAULT_GOAL := paddle
SHELL := /bin/bash

include vendor/vendor.mk

GIT_REV := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
SRCS := $(sort $(wildcard src/*.c src/*/*.c))
LIB_SRCS := $(filter-out src/main.c,$(SRCS))
LUA_FILES := $(sort $(wildcard lua/*.lua))
UNIT_SRCS := $(sort $(wildcard tests/unit/*.c))
WARN := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
CFLAGS_COMMON := -std=gnu11 -D_GNU_SOURCE -MMD -MP $(WARN)

# --- generated sources ---------------------------------------------------------
build/tools/bin2c: tools/bin2c.c
	@mkdir -p $(@D)
	gcc -O2 -Wall -Wextra -o $@ $<

build/gen/embed.c: build/tools/bin2c $(LUA_FILES)
	@mkdir -p $(@D)
	build/tools/bin2c $(LUA_FILES) > $@.tmp && mv $@.tmp $@

build/gen/test_list.h: $(UNIT_SRCS)
	@mkdir -p $(@D)
	grep -ho '^PD_TEST([a-z0-9_]*)' $(UNIT_SRCS) | sed 's/PD_TEST(\(.*\))/X(\1)/' > $@.tmp && mv $@.tmp $@

build/gen/rev: FORCE
	@mkdir -p $(@D)
	@echo '$(GIT_REV)' | cmp -s - $@ || echo '$(GIT_REV)' > $@
FORCE:

# --- one flavour: $(1) name, $(2) CC, $(3) CFLAGS, $(4) LDFLAGS, $(5) deps flavour,
#     $(6) binary, $(7) build flavour text
define flavour
OBJS_$(1) := $$(patsubst %.c,build/obj/$(1)/%.o,$$(SRCS)) build/obj/$(1)/gen/embed.o
LIB_OBJS_$(1) := $$(filter-out build/obj/$(1)/src/main.o,$$(OBJS_$(1)))
UNIT_OBJS_$(1) := $$(patsubst %.c,build/obj/$(1)/%.o,$$(UNIT_SRCS))

build/obj/$(1)/%.o: %.c $$(DEPS_$(5)_STAMP)
	@mkdir -p $$(@D)
	$(2) $$(CFLAGS_COMMON) $(3) $$(DEPS_$(5)_CPPFLAGS) -Ibuild/gen -c -o $$@ $$<

build/obj/$(1)/gen/embed.o: build/gen/embed.c
	@mkdir -p $$(@D)
	$(2) -O2 -c -o $$@ $$<

build/obj/$(1)/src/core/version.o: build/gen/rev
build/obj/$(1)/src/core/version.o: CFLAGS_COMMON += -DPD_GIT_REV='"$$(GIT_REV)"' -DPD_FLAVOUR='"$(7)"'
build/obj/$(1)/tests/unit/runner.o: build/gen/test_list.h
# the optimizer and activation loops vectorize only where sqrtf need not
# set errno and a select may compute both sides (no FP traps are used)
build/obj/$(1)/src/backend/cpu.o: CFLAGS_COMMON += -fno-math-errno -fno-trapping-math

$(6): $$(OBJS_$(1))
	$(2) $(4) -o $$@ $$^ $$(DEPS_$(5)_LDFLAGS) $$(DEPS_$(5)_LIBS)

build/$(1)/unit_tests: $$(UNIT_OBJS_$(1)) $$(LIB_OBJS_$(1))
	@mkdir -p $$(@D)
	$(2) $(4) -o $$@ $$^ $$(DEPS_$(5)_LDFLAGS) $$(DEPS_$(5)_LIBS)

build/$(1)/%_bench: build/obj/$(1)/bench/%_bench.o $$(LIB_OBJS_$(1))
	@mkdir -p $$(@D)
	$(2) $(4) -o $$@ $$^ $$(DEPS_$(5)_LDFLAGS) $$(DEPS_$(5)_LIBS)

-include $$(OBJS_$(1):.o=.d) $$(UNIT_OBJS_$(1):.o=.d)
endef

, := ,
# -fvect-cost-model=dynamic: GCC 12 at -O2 vectorizes only loops whose count
# is a multiple of the vector width (about 2 of the 80 loops in cpu.c)
$(eval $(call flavour,musl,musl-gcc,-O2 -g -fvect-cost-model=dynamic,-static -s,musl,paddle,static-musl))
$(eval $(call flavour,asan,gcc,-O1 -g -fno-omit-frame-pointer -fsanitize=address$(,)undefined -fno-sanitize-recover=undefined,-fsanitize=address$(,)undefined,glibc,paddle-asan,glibc-asan))
# the fuzz flavour: the library sources for the libFuzzer harnesses (tests/fuzz/fuzz.mk)
FUZZ_CFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined \
               -fno-sanitize-recover=undefined -Wno-unknown-warning-option
FUZZ_LDFLAGS := -fsanitize=fuzzer,address,undefined
$(eval $(call flavour,fuzz,clang,$(FUZZ_CFLAGS),$(FUZZ_LDFLAGS),glibc,build/fuzz/paddle,glibc-fuzz))
include tests/fuzz/fuzz.mk

# install the build tools a fresh Debian machine lacks, before any fetch
$(foreach p,$(VENDOR_PKGS),$(eval $(VENDOR_SRC_$(p))/.paddle-unpacked: | build/.tools))
build/.tools:
	@mkdir -p build
	@vendor/tools.sh all
	@touch $@

strip: paddle
	strip paddle

# --- tests -----------------------------------------------------------------------
test: paddle build/musl/unit_tests
	@tools/check_includes.sh
	@tools/long_functions.sh
	@tests/deps.sh
	@tests/run.sh ./paddle build/musl/unit_tests
	$(TEST_EXTRA_CHECKS)

asan: paddle-asan build/asan/unit_tests
	@tests/deps.sh
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	    tests/run.sh ./paddle-asan build/asan/unit_tests

# the image: ./paddle alone in build/image/, built with Dockerfile (FROM scratch)
IMAGE ?= paddle:latest
image: paddle
	@file paddle | grep -q 'statically linked' || { echo "make image: ./paddle is not static" >&2; exit 1; }
	@mkdir -p build/image && cp paddle build/image/paddle && cp Dockerfile build/image/Dockerfile
	@engine=$$(command -v podman || command -v docker) || { echo "make image: needs podman or docker" >&2; exit 1; }; \
	    $$engine build -q -t $(IMAGE) build/image

demo: paddle
	@recipes/prepare.sh
	./paddle run recipes/fit_a_line.lua --log_period=1000

bench: paddle build/musl/ps_bench build/musl/sgemm_bench build/musl/hashtab_bench build/musl/capacity_bench
	@bench/run.sh ./paddle

clean:
	rm -rf build/obj build/gen build/musl build/asan build/fuzz build/tools paddle paddle-asan paddle-cuda

include src/backend/cuda.mk
# the CUDA binary and its unit tests are built by make test wherever nvcc is,
# and the CUDA backend is checked op by op on its CPU emulation
# (TEST_EXTRA_CHECKS), so that the GPU code cannot rot on machines without a GPU
test: $(TEST_EXTRA_DEPS)

.PHONY: test asan fuzz image demo bench clean strip FORCE
