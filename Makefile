# klock — run `make` (or `make help`) for the targets.
SHELL      := /bin/bash
GO         ?= go
BIN        := bin/klock
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# stage2.Build ties klock-stage2 to the klock and klockd built with it: a
# klock-stage2 of another build is not used (enforcer/launch).
LDFLAGS    := -X github.com/klocklabs/klock/internal/version.Version=$(VERSION) \
              -X github.com/klocklabs/klock/enforcer/launch/stage2.Build=$(VERSION)
FUZZTIME   ?= 60s
BENCHTIME  ?= 1s
# Privileged tests skip when not root; KLOCK_REQUIRE_PRIVILEGED=1 makes every
# such skip a failure (.ci/run sets it).
export KLOCK_REQUIRE_PRIVILEGED

# make install: PREFIX and DESTDIR as usual; the configuration is under
# SYSCONFDIR (/etc: klockd reads /etc/klock/klockd.yaml whatever PREFIX).
PREFIX     ?= /usr/local
DESTDIR    ?=
SYSCONFDIR ?= /etc
BINDIR     := $(PREFIX)/bin
UNITDIR    := $(PREFIX)/lib/systemd/system
MANDIR     := $(PREFIX)/share/man
# A Debian version from git describe: v1.2.0-3-gabc -> 1.2.0+3+gabc; a
# bare commit -> 0~gitabc.
DEBVERSION := $(shell echo '$(VERSION)' | sed -E 's/^v//; s/-/+/g; /^[0-9]+\./!s/^/0~git/')
DEBARCH    := $(shell dpkg --print-architecture 2>/dev/null || echo amd64)
DEB        := bin/klock_$(DEBVERSION)_$(DEBARCH).deb

.DEFAULT_GOAL := help
.PHONY: help deps build demo fleet-demo test unit vmtest bench fuzz generate lint clean install uninstall deb

help: ## Show this help
	@awk 'BEGIN{FS=":.*## "} /^[a-z][a-zA-Z_-]*:.*## /{printf "  make %-9s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

deps: ## Install what the build and tests need (apt and npm, only when missing)
	@scripts/deps.sh build
	@scripts/deps.sh npm
	@scripts/deps.sh agents
	@scripts/deps.sh realworld
	@scripts/deps.sh containers
	@scripts/deps.sh report
	@scripts/deps.sh ops
	@scripts/deps.sh install
	@scripts/deps.sh fleet
	@scripts/deps.sh reflink

build: ## Build bin/klock (the front) and bin/klock-cli (the full CLI), bin/klockd, bin/klock-stage2 (their small session launcher) and bin/klock-runtime (the OCI runtime)
	@# The front and klock-runtime start on every session's and container
	@# command's path: built static (CGO_ENABLED=0; they import net only for
	@# its unix sockets), no dynamic loader or libc to map at each start.
	@# klock-cli and klockd keep cgo for NSS user lookups (LDAP, SSSD).
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/klock
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/klock-cli ./cmd/klock-cli
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/klockd ./cmd/klockd
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/klock-stage2 ./cmd/klock-stage2
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/klock-runtime ./cmd/klock-runtime

install: build ## Install the binaries, systemd units, /etc/klock/klockd.yaml, completions and man pages (PREFIX=/usr/local, DESTDIR)
	@scripts/install.sh install '$(DESTDIR)' '$(BINDIR)' '$(UNITDIR)' '$(MANDIR)' '$(PREFIX)/share' '$(SYSCONFDIR)'

uninstall: ## Remove what make install installed (not /etc/klock, /var/lib/klock or the klock group)
	@scripts/install.sh uninstall '$(DESTDIR)' '$(BINDIR)' '$(UNITDIR)' '$(MANDIR)' '$(PREFIX)/share' '$(SYSCONFDIR)'

deb: build ## Build bin/klock_<version>_<arch>.deb (dpkg-deb; PREFIX=/usr; enables nothing)
	@scripts/deb.sh '$(DEB)' '$(DEBVERSION)' '$(DEBARCH)'

demo: deps build ## Run the demo (as root): a real agent session under enforcement, then the manifest tooling
	@scripts/demo.sh $(BIN)

fleet-demo: deps build ## Run the fleet demo (as root): 3 etcd members, two klockd hosts sharing leases, a session waiting for another host's
	@scripts/fleet-demo.sh $(BIN)

test: deps build unit vmtest ## Run every test: unit, privileged host tests (as root), VM tests
	@echo "make test: all suites passed"

unit: ## Unit and privileged host tests (go test ./...)
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 20m ./...

vmtest: ## Boot Debian's 6.1, 6.12 and 6.12-cloud under qemu, each with bpf-lsm and with Landlock forced; run every kernel suite in each
	vmtests/matrix.sh

bench: deps ## Benchmarks: figures and ratios against no enforcement, from one run (as root)
	@scripts/deps.sh bench
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) ./policy/ ./policy/money/ ./enforcer/decide/
	@echo "leases: acquire+release of a 10-intent manifest with 10,000 held (goal <= 2 us), conflict check of 1,000 intents against 10,000 held (goal <= 50 us), the host store's acquire+release"
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) ./enforcer/lease/
	@echo "fleet leases: grant+release by 2 hosts x 8 clients on a 3-member loopback etcd, pairs/s, p50, p99, and x-bare against bare fenced etcd transactions of the same shape in the same run (goal >= 0.7x)"
	$(GO) test -run '^$$' -bench FleetGrantRelease -benchtime 1600x ./enforcer/lease/etcdstore/
	$(GO) test -run '^$$' -bench . -benchtime 3x ./enforcer/observe/ ./enforcer/netguard/
	@echo "netwall: Setup of a session's veth+nftables wall (goal <= 15 ms; Close apart, after the agent ends), TCP throughput through it vs the same path without (goal >= 0.9x)"
	$(GO) test -run '^$$' -bench . -benchtime 4x ./enforcer/netwall/
	@echo "looprelay: 64 MiB to a host loopback service, direct vs copied by the relay (same process), and direct vs handed a host socket through seccomp addfd (child processes): the relay's own cost (goal >= 0.9x)"
	$(GO) test -run '^$$' -bench . -benchtime 10x ./enforcer/looprelay/
	@echo "test/perf (among its benchmarks): netwall in sessions, BenchmarkNetSessionStart: start with NET intents (own netns, veth, nft table, loopback relay) vs without, one run (goal <= +15 ms); BenchmarkNetThroughput: TCP throughput to a declared peer under the walls vs direct: a host address (veth+nft) and a host loopback service, handed a host socket (addfd) and copied by the relay (a session with an egress budget), both beside direct and beside the floor (direct while a session lives) in one run (goal >= 0.9x)"
	@echo "snapshot (among its benchmarks): BenchmarkSparse: backup and restore of a 4 GiB file holding 1 MB of data, seconds and backup bytes (goals <= 0.5 s each, <= 2 MB), against cp --sparse=always of it in the same run"
	$(GO) test -run '^$$' -bench . -benchtime 2x -timeout 30m ./test/perf/ ./snapshot/
	@echo "canaries: a session's start with and without the write, exec and connect every wall must refuse before the agent runs, alternated in one run (µs/canaries)"
	$(GO) test -run '^$$' -bench Canaries -benchtime 40x ./enforcer/launch/
	@echo "dns: an A query through the session's DNS proxy vs asked straight of the same resolver, alternated in one run (the proxy adds a second loopback exchange, its own question and a rebuilt answer)"
	$(GO) test -run '^$$' -bench QueryThroughProxy -benchtime 2000x ./enforcer/dnsproxy/
	@echo "guard: decisions/s/core on the check path alone (goal >= 20000)"
	$(GO) test -run '^$$' -bench . -cpu 1 -benchtime $(BENCHTIME) ./guard/check/
	@echo "guard: tools/call median through klock's MCP proxy vs direct (goal: overhead <= 500 us)"
	$(GO) test -run '^$$' -bench . -benchtime 2000x ./guard/mcpproxy/
	$(GO) test -run '^$$' -bench DurableAuthorizations -benchtime 1x ./guard/budget/
	@echo "budgets across hosts: authorizations/s through the fleet budget (3-member etcd, blocks) vs one host's budget.Store, one run (goal >= 0.5x)"
	$(GO) test -run '^$$' -bench FleetAuthorizations -benchtime 1x ./guard/fleetbudget/
	@echo "leases: grant+release pairs/s through the KLIS-7 API on its unix socket, 8 clients (goal >= 10000)"
	$(GO) test -run '^$$' -bench APIGrantRelease -benchtime $(BENCHTIME) ./enforcer/leaseapi/
	@echo "events: a strict session's time with a stalled klock events --all reader vs none, alternated in one run (goal: within noise, ratio ~1.0; the reader's losses counted)"
	$(GO) test -run '^$$' -bench SessionWithStalledReader -benchtime 10x ./enforcer/daemon/
	@echo "containers: run of a busybox container running true, bare runc and crun vs each through klock-runtime with klockd serving (manifest, hooks, session, backup, log); added-ms is the difference (goal <= 10 ms)"
	$(GO) test -run '^$$' -bench RuncRunTrue -benchtime 30x ./test/container/
	@echo "containers: a command klock-runtime hands to the runtime (list, as state/start/kill/delete), bare vs through klock-runtime; added-ms is its start and exec"
	$(GO) test -run '^$$' -bench RuntimePassthrough -benchtime 100x ./test/container/
	@echo "bpf-lsm in the VM: open/close and file workload ratios against no enforcement (goals 1.2x, 1.05x)"
	vmtests/vmtest.sh --bench

fuzz: ## Run every fuzz target for FUZZTIME each (default 60s)
	@set -e; for t in FuzzParse FuzzParseIntent; do \
	  echo "fuzz: $$t ($(FUZZTIME))"; \
	  $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) ./policy/; done
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./policy/money/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./enforcer/lsm/
	@set -e; for t in FuzzFrame FuzzFilterList; do \
	  echo "fuzz: $$t ($(FUZZTIME))"; \
	  $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) ./guard/mcpproxy/; done
	$(GO) test -run '^$$' -fuzz '^FuzzToolArgs$$' -fuzztime $(FUZZTIME) ./guard/check/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./guard/receipt/
	$(GO) test -run '^$$' -fuzz '^FuzzReadLink$$' -fuzztime $(FUZZTIME) ./internal/hashchain/
	@set -e; for t in FuzzParseRequest FuzzSSEUsage; do \
	  echo "fuzz: $$t ($(FUZZTIME))"; \
	  $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) ./guard/meter/; done
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRequest$$' -fuzztime $(FUZZTIME) ./guard/toolproxy/
	@set -e; for t in FuzzJournalScan FuzzJournalPayload; do \
	  echo "fuzz: $$t ($(FUZZTIME))"; \
	  $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) ./guard/budget/; done
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./enforcer/leaseapi/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./internal/flagfile/
	@set -e; for t in FuzzParseConfig FuzzManifestAnnotation; do \
	  echo "fuzz: $$t ($(FUZZTIME))"; \
	  $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) ./enforcer/oci/; done

generate: ## Regenerate BPF objects and bindings (needs clang; commit the result)
	@scripts/gen-vmlinux.sh
	$(GO) generate ./...

lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	$(GO) vet ./...

clean: ## Remove build output
	rm -rf bin
