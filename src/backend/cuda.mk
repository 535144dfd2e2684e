# src/backend/cuda.mk - the GPU build: ./paddle-cuda, the same program with
# the CUDA backend (src/backend/cuda.cu) in its backend table. Included by the
# top Makefile. See docs/cuda.md.
#
#   make cuda               ./paddle-cuda
#   make cuda-check         build it, run `./paddle-cuda version`, and train a
#                           tiny recipe with device = "cuda": without a GPU it
#                           must fail cleanly saying there is no CUDA device,
#                           with one it must train
#   build/cuda/unit_tests   the unit tests linked with the CUDA backend; on a
#                           GPU, `build/cuda/unit_tests cuda` runs every op
#                           against the CPU (skipped without one)
#   make bench-gpu          on a machine with an NVIDIA GPU: bench/gpu.sh, the
#                           unit tests, the recipes and `paddle run` on the GPU
#                           against the CPU, then samples/s against PyTorch on
#                           the same GPU
#   make cuda-emu-check     the same CUDA tests with the kernels run on the CPU
#                           by an emulation of CUDA (src/backend/cuda_emu.h),
#                           linked with the ASan/UBSan objects of `make asan`,
#                           then `paddle train` on it against the CPU: no GPU
#                           needed
#
# The GPU binary is NOT static: CUDA's runtime needs glibc (musl cannot link
# libcudart_static.a) and cuBLAS exists only as a shared library. So the
# program's C sources are compiled a third time, with gcc against the glibc
# flavour of the vendored dependencies (build/deps/glibc), into build/obj/cuda/;
# cuda.cu is compiled by nvcc; the link takes the CUDA runtime statically and
# libcublas.so, libstdc++, libc dynamically (rpath $(CUDA_HOME)/lib64).
#
# TEST_EXTRA_DEPS lists what `make test` should also build, and
# TEST_EXTRA_CHECKS what it should also run (the emulation check), so that the
# GPU build cannot rot on machines without a GPU; both are empty where there
# is no CUDA toolkit.

CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
# native code for Hopper (H100/H200), PTX that the driver compiles for any
# other GPU from Turing (sm_75, CUDA 13's oldest) on
CUDA_GENCODE ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_75,code=compute_75
CUDA_CXXFLAGS := -std=c++20 -O2 -D_GNU_SOURCE
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart_static -lstdc++ -ldl -lpthread -lrt
CUDA_HDRS := src/backend/backend.h src/core/pd.h src/core/log.h

ifneq ($(wildcard $(NVCC)),)
TEST_EXTRA_DEPS += paddle-cuda build/cuda/unit_tests
TEST_EXTRA_CHECKS += @$(MAKE) --no-print-directory cuda-emu-check
endif

# the glibc objects and the two links, through the top Makefile's flavour
# template; "deps flavour" cuda = glibc's dependencies plus CUDA's libraries
DEPS_cuda_STAMP    := $(DEPS_glibc_STAMP)
DEPS_cuda_CPPFLAGS := $(DEPS_glibc_CPPFLAGS)
DEPS_cuda_LDFLAGS  := $(DEPS_glibc_LDFLAGS)
DEPS_cuda_LIBS     := $(DEPS_glibc_LIBS) $(CUDA_LIBS)

$(eval $(call flavour,cuda,gcc,-O2 -g,,cuda,paddle-cuda,glibc-cuda))

build/obj/cuda/src/backend/cuda.o: src/backend/cuda.cu $(CUDA_HDRS)
	@mkdir -p $(@D)
	$(NVCC) $(CUDA_CXXFLAGS) $(CUDA_GENCODE) -Werror all-warnings \
	    -Xcompiler -Wall,-Wextra,-Wshadow,-Wno-unused-parameter -c -o $@ $<

paddle-cuda build/cuda/unit_tests: build/obj/cuda/src/backend/cuda.o

cuda: paddle-cuda

bench-gpu: paddle paddle-cuda build/cuda/unit_tests
	@bench/gpu.sh ./paddle-cuda ./paddle build/cuda/unit_tests

# --- the check on a machine without a GPU (works with one too) ---------------------
CUDA_CHECK_DIR := build/cuda/check

cuda-check: paddle-cuda
	@rm -rf $(CUDA_CHECK_DIR) && mkdir -p $(CUDA_CHECK_DIR)
	set -o pipefail; ./paddle-cuda version | tee $(CUDA_CHECK_DIR)/version.txt
	@grep -q '^  cuda     runtime [1-9][0-9]*\.[0-9]' $(CUDA_CHECK_DIR)/version.txt || \
	    { echo "cuda-check: paddle-cuda version does not report the CUDA runtime version"; exit 1; }
	@for i in 1 2 3 4 5 6 7 8; do echo "0.$$i,0.$$((i * 2)),$$i"; done > $(CUDA_CHECK_DIR)/train.csv
	@printf '%s\n' 'data { train = "train.csv", format = "csv" }' \
	    'model = function(nn) return nn.square_error_cost(nn.fc(nn.data("x", 2), 1), nn.data("y", 1)) end' \
	    'optimizer = nn.sgd { learning_rate = 0.01 }' \
	    'settings { batch_size = 4, passes = 2, device = "cuda" }' > $(CUDA_CHECK_DIR)/tiny.lua
	@cd $(CUDA_CHECK_DIR) && ../../../paddle-cuda train tiny.lua > train.log 2>&1; rc=$$?; cat train.log; \
	if grep -q '^  cuda     .*no device' version.txt; then \
	    [ $$rc -ne 0 ] && [ $$rc -lt 128 ] && grep -q 'no CUDA device: ' train.log || \
	        { echo "cuda-check: FAILED: without a GPU, device = \"cuda\" must fail cleanly (exit $$rc)"; exit 1; }; \
	    echo "cuda-check: ok: paddle-cuda builds and runs, and device = \"cuda\" fails cleanly here (no GPU)"; \
	else \
	    [ $$rc -eq 0 ] || { echo "cuda-check: FAILED: training on the GPU exited $$rc"; exit 1; }; \
	    echo "cuda-check: ok: trained on the GPU"; \
	fi

# --- the kernels on a CPU emulation of CUDA ------------------------------------------
EMU_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer

build/obj/cuda-emu/cuda.o: src/backend/cuda.cu src/backend/cuda_emu.h $(CUDA_HDRS)
	@mkdir -p $(@D)
	g++ -x c++ -std=c++20 -DPD_CUDA_EMU -D_GNU_SOURCE -O1 -g $(EMU_SAN) $(WARN) -c -o $@ $<

build/cuda-emu/unit_tests: $(UNIT_OBJS_asan) $(LIB_OBJS_asan) build/obj/cuda-emu/cuda.o
	@mkdir -p $(@D)
	g++ $(EMU_SAN) -o $@ $^ $(DEPS_glibc_LDFLAGS) $(DEPS_glibc_LIBS)

build/cuda-emu/paddle: $(OBJS_asan) build/obj/cuda-emu/cuda.o
	@mkdir -p $(@D)
	g++ $(EMU_SAN) -o $@ $^ $(DEPS_glibc_LDFLAGS) $(DEPS_glibc_LIBS)

# the unit tests, then `paddle train` of a small recommender-like recipe with
# device = "cpu" and "cuda" (emulated), then `paddle run` of it with 1 pserver
# and 1 trainer on each: the pass costs must agree to 1e-4
CUDA_EMU_DIR := build/cuda-emu/check

cuda-emu-check: build/cuda-emu/unit_tests build/cuda-emu/paddle
	@# ASan warns once per process that it does not fully support swapcontext
	@# (the fibers are annotated for it); the warning is noise here
	set -o pipefail; ASAN_OPTIONS=detect_leaks=0 build/cuda-emu/unit_tests cuda 2>&1 | \
	    grep -v "^==[0-9]*==WARNING: ASan doesn't fully support makecontext"
	@rm -rf $(CUDA_EMU_DIR) && mkdir -p $(CUDA_EMU_DIR)
	@awk 'BEGIN { srand(3); for (i = 0; i < 200; i++) { u = int(rand() * 40); m = int(rand() * 25); \
	    printf "%d,%d,%.3f,%.3f,%.3f\n", u, m, rand(), rand(), ((u * 7 + m * 3) % 11) / 5 - 1 } }' \
	    > $(CUDA_EMU_DIR)/train.csv
	@printf '%s\n' 'data { train = "train.csv", test = "train.csv", format = "csv" }' \
	    'model = function(nn)' \
	    '  local user, movie = nn.id("user", 40), nn.id("movie", 25)' \
	    '  local x, score = nn.data("x", 2), nn.data("score", 1)' \
	    '  local u = nn.fc(nn.concat { nn.embedding(user, 8), x }, 12, "tanh")' \
	    '  local m = nn.fc(nn.embedding(movie, 8), 12, "relu")' \
	    '  return nn.square_error_cost(nn.cos_sim(u, m, 3), score)' \
	    'end' \
	    'optimizer = nn.adam { learning_rate = 0.02 }' \
	    'settings { batch_size = 20, passes = 3, log_period = 1000 }' > $(CUDA_EMU_DIR)/r.lua
	@cd $(CUDA_EMU_DIR) && for d in cpu cuda; do \
	    ASAN_OPTIONS=detect_leaks=0 ../paddle train r.lua --device=$$d > $$d.log 2>&1 || { cat $$d.log; exit 1; }; \
	    sed -n 's/.*\(pass [0-9]*\) done.*train cost \([^,]*\), test cost \([^,]*\).*/\1 \2 \3/p' $$d.log > $$d.txt; \
	done; cat cuda.txt; \
	paste cpu.txt cuda.txt | awk 'function bad(a, b) { d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a; \
	    return d > 1e-4 * (m > 1e-3 ? m : 1e-3) } \
	    { n++; if ($$2 != $$6 || bad($$3, $$7) || bad($$4, $$8)) { print "cuda-emu-check: FAILED: " $$0; failed = 1 } } \
	    END { if (failed) exit 1; if (n != 3) { print "cuda-emu-check: FAILED: " n " passes"; exit 1 } \
	          print "cuda-emu-check: ok: paddle train on emulated cuda matches cpu" }'
	@# the same through 1 pserver (CPU) and 1 trainer, sync: rows pulled
	@# into and pushed from the device table a reply at a time
	@cd $(CUDA_EMU_DIR) && { echo 'job { pservers = 1, trainers = 1 }'; \
	    sed 's/^settings { /settings { mode = "sync", /' r.lua; } > run.lua && for g in 0 1; do \
	    ASAN_OPTIONS=detect_leaks=0 timeout 300 ../paddle run run.lua --use_gpu=$$g > run$$g.log 2>&1 || \
	        { cat run$$g.log; echo "cuda-emu-check: FAILED: paddle run --use_gpu=$$g"; exit 1; }; \
	    sed -n '/^\[trainer 0\]/ s/.*\(pass [0-9]*\) done.*train cost \([^,]*\), test cost \([^,]*\).*/\1 \2 \3/p' run$$g.log > run$$g.txt; \
	done; cat run1.txt; \
	grep -q 'sync mode, on cpu$$' run0.log && grep -q 'sync mode, on cuda$$' run1.log || \
	    { echo "cuda-emu-check: FAILED: the trainer did not say it ran on cpu, then on cuda"; exit 1; }; \
	paste run0.txt run1.txt | awk 'function bad(a, b) { d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a; \
	    return d > 1e-4 * (m > 1e-3 ? m : 1e-3) } \
	    { n++; if ($$2 != $$6 || bad($$3, $$7) || bad($$4, $$8)) { print "cuda-emu-check: FAILED: " $$0; failed = 1 } } \
	    END { if (failed) exit 1; if (n != 3) { print "cuda-emu-check: FAILED: paddle run: " n " passes"; exit 1 } \
	          print "cuda-emu-check: ok: paddle run with the trainer on emulated cuda matches cpu" }'

cuda-clean:
	rm -rf build/cuda build/cuda-emu
clean: cuda-clean

.PHONY: cuda cuda-check cuda-emu-check cuda-clean bench-gpu
