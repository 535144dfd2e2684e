# tests/fuzz/fuzz.mk - the libFuzzer harnesses (docs/fuzzing.md). Included by
# the top Makefile after the fuzz flavour, whose objects they link.
#
#   make fuzz                       build, then run each harness FUZZ_SECONDS
#   make fuzz FUZZ_SECONDS=600      the long run
#   make fuzz FUZZ_ONLY="proto recipe"   some harnesses only
#   make fuzz-build                 build only: build/fuzz/bin/HARNESS

FUZZ_SECONDS ?= 30
FUZZ_HARNESSES := proto server_hello server_auth recipe reader_csv reader_libsvm reader_uci reader_movielens
FUZZ_ONLY ?= $(FUZZ_HARNESSES)
FUZZ_BINS := $(patsubst %,build/fuzz/bin/%,$(FUZZ_HARNESSES))

# $(1) harness, $(2) its source (tests/fuzz/fuzz_$(2).c), $(3) defines
define fuzz_harness
build/obj/fuzz/tests/fuzz/h_$(1).o: tests/fuzz/fuzz_$(2).c $$(DEPS_glibc_STAMP) | build/.fuzz-tools
	@mkdir -p $$(@D)
	clang $$(CFLAGS_COMMON) $$(FUZZ_CFLAGS) $(3) $$(DEPS_glibc_CPPFLAGS) -c -o $$@ $$<

build/fuzz/bin/$(1): build/obj/fuzz/tests/fuzz/h_$(1).o build/obj/fuzz/tests/fuzz/fuzz_common.o $$(LIB_OBJS_fuzz)
	@mkdir -p $$(@D)
	clang $$(FUZZ_LDFLAGS) -o $$@ $$^ $$(DEPS_glibc_LDFLAGS) $$(DEPS_glibc_LIBS)

-include build/obj/fuzz/tests/fuzz/h_$(1).d
endef

$(eval $(call fuzz_harness,proto,proto,))
$(eval $(call fuzz_harness,server_hello,server,-DFUZZ_AUTH=0))
$(eval $(call fuzz_harness,server_auth,server,-DFUZZ_AUTH=1))
$(eval $(call fuzz_harness,recipe,recipe,))
$(foreach f,csv libsvm uci movielens,$(eval $(call fuzz_harness,reader_$(f),reader,-DFUZZ_FORMAT='"$(f)"')))
-include build/obj/fuzz/tests/fuzz/fuzz_common.d

# clang and libFuzzer, installed when missing (tests/deps.sh fuzz)
build/.fuzz-tools:
	@mkdir -p build
	@tests/deps.sh fuzz
	@touch $@

# every object of the flavour needs clang
$(OBJS_fuzz) build/obj/fuzz/tests/fuzz/fuzz_common.o: | build/.fuzz-tools

fuzz-build: $(FUZZ_BINS)

fuzz: fuzz-build
	@tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_ONLY)

.PHONY: fuzz fuzz-build
