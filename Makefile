# dsock build: GNU make, out-of-tree into $(BUILD).
# Why make: see docs/ARCHITECTURE.md ("Build").
#   make                 library, daemon, CLI, tests
#   make SAN=address,undefined   sanitizer build of daemon, CLI and unit tests
#   make san SAN=thread CC=clang BUILD=build-tsan   the same under TSan
#   make check           the whole test suite (tests/run.sh)
BUILD   ?= build
CC      ?= cc
SAN     ?=
OPT     ?= -O2
WARN     = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
           -Wpointer-arith -Wformat=2 -Wno-unused-parameter
CFLAGS  += -std=gnu11 $(OPT) -g $(WARN) -fno-strict-aliasing -D_GNU_SOURCE -Isrc -pthread
LDFLAGS += -pthread
ifneq ($(SAN),)
SANFLAGS = -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
endif

COMMON_SRC = $(wildcard src/common/*.c)
LIB_SRC    = $(wildcard src/lib/*/*.c src/lib/*/*/*.c)
DAEMON_SRC = $(wildcard src/daemon/*.c)
CLI_SRC    = $(wildcard src/cli/*.c)

obj = $(patsubst src/%.c,$(BUILD)/obj/$(1)/%.o,$(2))
LIB_OBJ    = $(call obj,pic,$(COMMON_SRC) $(LIB_SRC))
DAEMON_OBJ = $(call obj,bin,$(COMMON_SRC) $(DAEMON_SRC))
CLI_OBJ    = $(call obj,bin,$(COMMON_SRC) $(CLI_SRC))
# unit tests link the library's objects directly (no preload), built with SAN
UNIT_LIB_OBJ = $(call obj,bin,$(COMMON_SRC) $(LIB_SRC))

# The kernel-recorded proof (daemon/ident.c) needs libbpf's headers and
# clang's BPF target; without them dsockd is built without it (and says so
# when asked for it).
BPF ?= $(shell test -r /usr/include/bpf/libbpf.h && command -v clang >/dev/null 2>&1 && echo 1)
ifeq ($(BPF),1)
IDENT_BPF      = $(BUILD)/obj/bpf/ident.bpf.o
# (the target's asm/ headers, which the BPF target does not look for)
BPF_ASM_INC    = $(patsubst %/asm/types.h,%,$(firstword $(wildcard /usr/include/*-linux-gnu/asm/types.h)))
DAEMON_BPF_OBJ = $(BUILD)/obj/bin/daemon/bpf/ident_blob.o
DAEMON_LIBS    = -lbpf
$(BUILD)/obj/bin/daemon/ident.o: CFLAGS += -DDSOCK_HAVE_BPF
endif

# Links to other hosts' daemons (daemon/hostlink.c, hostmsg.c) need OpenSSL's
# headers; without them dsockd is built without them (and says so when
# asked for them).
TLS ?= $(shell test -r /usr/include/openssl/ssl.h && echo 1)
ifeq ($(TLS),1)
DAEMON_LIBS   += -lssl -lcrypto
$(addprefix $(BUILD)/obj/bin/daemon/,hostlink.o hostmsg.o hostlink_off.o hostkey.o hostauth.o): \
	CFLAGS += -DDSOCK_HAVE_TLS
endif

LIBDSOCK = $(BUILD)/lib/libdsock.so
DSOCKD   = $(BUILD)/bin/dsockd
DSOCK    = $(BUILD)/bin/dsock
UNIT     = $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(wildcard tests/unit/test_*.c))
CONF     = $(BUILD)/tests/conformance $(BUILD)/tests/conf-scen $(BUILD)/tests/libbroken.so
SOAK     = $(BUILD)/tests/soak
MANY     = $(BUILD)/tests/many
# the hand-over test: its helper once dynamic, once static (never preloaded)
HANDOVER = $(BUILD)/tests/handover $(BUILD)/tests/handover-static
GHOST_RACE = $(BUILD)/tests/ghost-race

all: $(LIBDSOCK) $(DSOCKD) $(DSOCK) $(UNIT) $(CONF) $(SOAK) $(MANY) $(HANDOVER) $(GHOST_RACE)

# daemon, CLI and unit tests only (what SAN= instruments)
san: $(DSOCKD) $(DSOCK) $(UNIT)

# The preload library is never built with sanitizers: ASan must be the first
# object loaded, which an LD_PRELOAD library into an arbitrary program is not.
$(BUILD)/obj/pic/%.o: src/%.c $(wildcard src/*/*.h src/lib/*/*.h src/lib/*/*/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -fvisibility=hidden -ftls-model=initial-exec -c $< -o $@

$(BUILD)/obj/bin/%.o: src/%.c $(wildcard src/*/*.h src/lib/*/*.h src/lib/*/*/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SANFLAGS) -c $< -o $@

$(LIBDSOCK): $(LIB_OBJ) src/lib/libdsock.map
	@mkdir -p $(dir $@)
	$(CC) -shared -o $@ $(LIB_OBJ) -Wl,--version-script=src/lib/libdsock.map \
	    -Wl,-z,now -Wl,-z,relro $(LDFLAGS) -ldl

$(DSOCKD): $(DAEMON_OBJ) $(DAEMON_BPF_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(SANFLAGS) $(LDFLAGS) $(DAEMON_LIBS)

$(IDENT_BPF): src/daemon/bpf/ident.bpf.c src/common/ident.h
	@mkdir -p $(dir $@)
	clang -O2 -g -target bpf -Isrc $(addprefix -I,$(BPF_ASM_INC)) -c $< -o $@

$(DAEMON_BPF_OBJ): src/daemon/bpf/ident_blob.S $(IDENT_BPF)
	@mkdir -p $(dir $@)
	$(CC) -c -DIDENT_BPF_OBJ='"$(IDENT_BPF)"' $< -o $@

$(DSOCK): $(CLI_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -o $@ $^ $(SANFLAGS) $(LDFLAGS)

$(BUILD)/tests/test_%: tests/unit/test_%.c $(wildcard tests/unit/*.h) $(UNIT_LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SANFLAGS) -Itests -o $@ $< $(UNIT_LIB_OBJ) $(LDFLAGS) -ldl

CONF_SCEN_SRC = $(wildcard tests/conformance/scen_*.c) tests/conformance/conf_scen.c tests/conformance/rec.c
$(BUILD)/tests/conf-scen: $(CONF_SCEN_SRC) tests/conformance/conf.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Wno-missing-prototypes -o $@ $(CONF_SCEN_SRC) $(LDFLAGS)

$(BUILD)/tests/conformance: tests/conformance/harness.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS)

$(BUILD)/tests/handover: tests/faults/handover.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS)

$(BUILD)/tests/handover-static: tests/faults/handover.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -static -o $@ $< $(LDFLAGS)

$(GHOST_RACE): tests/faults/ghost_race.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS)

$(SOAK): tests/soak/soak.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS)

$(MANY): tests/soak/many.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS)

# A deliberately wrong wrapper, used only to show the harness can fail.
$(BUILD)/tests/libbroken.so: tests/conformance/broken.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -shared -o $@ $< -ldl

# Fuzzers (clang + libFuzzer): make fuzz CC=clang BUILD=build-fuzz
#   SAN=address,undefined,fuzzer-no-link; run with tests/fuzz/run.sh.
FUZZ_DAEMON_OBJ = $(call obj,bin,$(COMMON_SRC) $(filter-out src/daemon/main.c src/daemon/server.c,$(DAEMON_SRC)))
fuzz: $(BUILD)/fuzz/fuzz_ring $(BUILD)/fuzz/fuzz_proto

$(BUILD)/fuzz/fuzz_ring: tests/fuzz/fuzz_ring.c $(UNIT_LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SANFLAGS) -fsanitize=fuzzer -o $@ $< $(UNIT_LIB_OBJ) $(LDFLAGS) -ldl

$(BUILD)/fuzz/fuzz_proto: tests/fuzz/fuzz_proto.c src/daemon/server.c $(FUZZ_DAEMON_OBJ) $(DAEMON_BPF_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SANFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_DAEMON_OBJ) $(DAEMON_BPF_OBJ) $(LDFLAGS) \
	    $(DAEMON_LIBS)

check: all
	tests/run.sh $(BUILD)

clean:
	rm -rf $(BUILD)

.PHONY: all san fuzz check clean
