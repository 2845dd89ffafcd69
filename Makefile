# Tessera build. Two cores are the norm on our CI machines: build the Go packages
# once, then test with a parallelism sized for them.
GO        ?= go
GOFLAGS   ?=
TEST_P    ?= 2
BIN       := bin
PKGS      := ./...
FUZZTIME  ?= 20s

.PHONY: images image-debs image-test push release release-tool
.PHONY: plots plots-check screens bench-data isolation-data
.PHONY: all build build-go vgpu-core test test-go test-race chart-test chart-test-apiserver bench-topology test-vgpu-core fuzz lint bench bench-go bench-vgpu-core simulate clean e2e demo scale

all: build

build: build-go vgpu-core

# -trimpath: the same compiled packages as make images, which then only links.
build-go:
	$(GO) build -trimpath -o $(BIN)/ ./cmd/...
	ln -sf tessera $(BIN)/kubectl-tessera

## cli-cross: the CLI for each platform a release ships it on (make release adds tessera-simulate and the krew
## packages), into bin/cross/tessera_OS_ARCH[.exe]: a quick check that it still builds for Windows and macOS.
.PHONY: cli-cross
CLI_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64
cli-cross:
	@for p in $(CLI_PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; ext=; [ "$$os" = windows ] && ext=.exe; \
		echo "go build ./cmd/tessera for $$p"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -o $(BIN)/cross/tessera_$${os}_$${arch}$$ext ./cmd/tessera || exit 1; \
	done

vgpu-core:
	@if [ -f vgpu-core/Makefile ]; then $(MAKE) -C vgpu-core; fi

## test: everything CI runs: lint, Go unit/integration tests, the race detector on every
## package, short fuzzing, vgpu-core's C suite, the chart, the images.
# Stages run in this order, each announced with its number and timed, so a long run says where it is.
TEST_STAGES := lint test-go test-race fuzz test-vgpu-core chart-test plots-check image-test
test:
	@n=0; total=$(words $(TEST_STAGES)); start=$$(date +%s); \
	for s in $(TEST_STAGES); do \
		n=$$((n+1)); t=$$(date +%s); echo "== make test: stage $$n of $$total: $$s"; \
		$(MAKE) --no-print-directory $$s || { echo "== make test: stage $$n of $$total ($$s) failed after $$(( $$(date +%s) - t ))s"; exit 1; }; \
		echo "== make test: $$s passed in $$(( $$(date +%s) - t ))s ($$(( $$(date +%s) - start ))s in all)"; \
	done

test-go:
	$(GO) test -p $(TEST_P) -count=1 $(PKGS)

# Every package's tests under the race detector: the node agent serves the kubelet and
# the API server concurrently, and the vgpu plugin's predicates run in parallel.
test-race:
	$(GO) test -race -p $(TEST_P) -count=1 $(PKGS)

test-vgpu-core:
	@if [ -f vgpu-core/Makefile ]; then $(MAKE) -C vgpu-core test; fi

# Each decoder gets a short fuzzing run on every CI build; run longer locally with FUZZTIME=10m.
# The session soak (random clusters through many sessions of every Volcano action, with
# failed binds, stale write-backs, evictions and cordons) runs 150 seeds in test-go and
# SOAK_SEEDS here; raise it locally for longer soaks.
SOAK_SEEDS ?= 300
fuzz:
	@for p in ./api ./deviceplugin/usage ./deviceplugin/cards ./deviceplugin/memguard ./deviceplugin/config ./deviceplugin/dra ./admission; do \
		for f in $$($(GO) test $$p -list '^Fuzz' | grep '^Fuzz'); do \
			echo "fuzz $$p $$f ($(FUZZTIME))"; \
			out=$$(mktemp); \
			$(GO) test $$p -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) > $$out 2>&1; rc=$$?; cat $$out; \
			if [ $$rc -ne 0 ] && grep -q 'context deadline exceeded' $$out && ! grep -q 'Failing input written' $$out; then \
				echo "fuzz $$f: Go's fuzzing engine failed on its own -fuzztime deadline with no failing input (a toolchain race); once more"; \
				$(GO) test $$p -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME); rc=$$?; \
			fi; \
			rm -f $$out; [ $$rc -eq 0 ] || exit 1; \
		done; \
	done
	$(GO) test ./plugins/vgpu -run '^TestSessionSoak$$' -count=1 -args -soak-seeds=$(SOAK_SEEDS)

## chart-test: render the Helm chart with Helm's Go library and check it (its own module,
## so Helm's dependencies stay out of the product's go.mod).
chart-test:
	cd charts/test && $(GO) vet ./... && $(GO) test -p 1 -count=1 ./...
	cd charts/test/monitoring && $(GO) vet ./... && $(GO) test -count=1 ./...

## chart-test-apiserver: the same plus a server-side dry-run of the chart and the CLI
## against a real kube-apiserver + etcd (uses the binaries `make e2e` builds).
chart-test-apiserver:
	cd charts/test && TESSERA_KUBE_APISERVER=$(CURDIR)/e2e/.cache/bin/kube-apiserver $(GO) test -p 1 -count=1 ./...

## bench-topology: our card-set search against NVIDIA's go-gpuallocator, side by side (its own module).
bench-topology:
	cd bench/topology && $(GO) test -run '^$$' -bench Allocators . && $(GO) test -run '^$$' -bench RandomNodes -benchtime 20x .

lint:
	$(GO) mod tidy -diff
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

## simulate: Tessera's plugin inside Volcano's real scheduler on the embedded default cluster (no API server).
simulate:
	$(GO) run ./cmd/tessera-simulate $(SIMFLAGS)

bench: bench-go bench-vgpu-core

bench-go:
	$(GO) test -run '^$$' -bench . -benchtime 3x ./plugins/... ./placement/...

bench-vgpu-core:
	@if [ -f vgpu-core/Makefile ]; then $(MAKE) -C vgpu-core bench; fi

## Pictures (docs/images) from the benchmarks' data (docs/data): tools/plots draws the SVGs; plots-check, part of
## make test, fails when a data file is missing or malformed or a committed SVG is not what its data draws.
## The *-data targets rerun a benchmark and rewrite its data file (commit it with the SVGs make plots then draws).
DATA_DIR     := docs/data
IMAGES_OUT   := docs/images
# Where a data file was measured, written at its top.
DATA_HEADER   = echo "date: $$(date -u +%Y-%m-%dT%H:%M:%SZ)"; echo "commit: $(REVISION)"; \
	echo "machine: $$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1), $$(nproc) cores, $$(awk '/^MemTotal/ {printf "%.0f GiB", $$2 / 1048576}' /proc/meminfo)"; \
	echo "load: $$(cut -d' ' -f1-3 /proc/loadavg)"

plots:
	$(GO) run ./tools/plots -data $(DATA_DIR) -out $(IMAGES_OUT)

plots-check:
	$(GO) run ./tools/plots -data $(DATA_DIR) -out $(IMAGES_OUT) -check

## screens: the rendered card map (tessera report on the simulator's placement) and the dashboard's layout with
## sample data, as PNGs through headless Chromium. Not in plots-check: a browser's pixels differ between machines.
screens:
	$(GO) run ./tools/plots/screens -out $(IMAGES_OUT)

## bench-data: one allocate session's CPU time as the cluster and the pending tasks grow, with and without Tessera
## (plugins/vgpu BenchmarkSessionGrowth), in Go's benchmark format (the plugins' log lines left out).
BENCH_DATA_RUNS = '^BenchmarkSessionGrowth$$ 1x'
bench-data:
	@mkdir -p $(DATA_DIR)
	@{ $(DATA_HEADER); } > $(DATA_DIR)/.session-bench.txt
	@for run in $(BENCH_DATA_RUNS); do set -- $$run; \
		echo "command: go test -run ^\$$ -bench $$1 -benchtime $$2 ./plugins/vgpu" | tee -a $(DATA_DIR)/.session-bench.txt; \
		$(GO) test -run '^$$' -bench "$$1" -benchtime "$$2" -timeout 60m ./plugins/vgpu > $(DATA_DIR)/.bench.log 2>&1; rc=$$?; \
		grep -E '^(Benchmark|[a-z][a-z0-9_-]*: |ok |PASS|FAIL)' $(DATA_DIR)/.bench.log | tee -a $(DATA_DIR)/.session-bench.txt; \
		[ $$rc -eq 0 ] || { tail -30 $(DATA_DIR)/.bench.log; rm -f $(DATA_DIR)/.bench.log; exit 1; }; \
	done; rm -f $(DATA_DIR)/.bench.log
	echo "load-end: $$(cut -d' ' -f1-3 /proc/loadavg)" >> $(DATA_DIR)/.session-bench.txt
	mv $(DATA_DIR)/.session-bench.txt $(DATA_DIR)/session-bench.txt

## isolation-data: vgpu-core's suite on the stub driver, the lines of its SM section: the SM limiter's cases (target
## against measured, each with its verdict), the GPU test kit's table and the suite's summary. Written whenever the
## suite ran to its end: a failed check is data too (make plots marks it), and this target says so.
isolation-data:
	@mkdir -p $(DATA_DIR)
	@{ $(DATA_HEADER); echo "command: make -C vgpu-core test-normal (stub driver)"; } > $(DATA_DIR)/.vgpu-core-sm.txt
	-$(MAKE) -C vgpu-core test-normal > $(DATA_DIR)/.vgpu-core-test.log 2>&1
	@grep -q '^== ' $(DATA_DIR)/.vgpu-core-test.log || { cat $(DATA_DIR)/.vgpu-core-test.log; \
		echo "isolation-data: vgpu-core's suite did not run to its end"; rm -f $(DATA_DIR)/.vgpu-core-*; exit 1; }
	@{ sed -n '/^-- SM limiter, batch 1/,/^== /p' $(DATA_DIR)/.vgpu-core-test.log; \
	  echo "load-end: $$(cut -d' ' -f1-3 /proc/loadavg)"; } >> $(DATA_DIR)/.vgpu-core-sm.txt
	@mv $(DATA_DIR)/.vgpu-core-sm.txt $(DATA_DIR)/vgpu-core-sm.txt; rm -f $(DATA_DIR)/.vgpu-core-test.log
	@tail -2 $(DATA_DIR)/vgpu-core-sm.txt | head -1
	@! grep -q '^FAIL' $(DATA_DIR)/vgpu-core-sm.txt || grep '^FAIL' $(DATA_DIR)/vgpu-core-sm.txt | \
		sed 's/^/isolation-data: failed in this run: /'

# End to end: a real etcd + kube-apiserver + kube-controller-manager, Volcano's controllers,
# Tessera's vc-scheduler and simulated GPU nodes (a real kubelet on an in-memory container
# runtime, our device plugin on fake NVML; two nodes run real containers on containerd and runc
# for one scenario), all on 127.0.0.1. Needs root (the kubelets' mount namespaces) and, for the
# real containers, libseccomp-dev. Binaries are built once into e2e/.cache/bin (first run ~27 min
# on 2 cores).
# See docs/e2e.md.
E2E_TIMEOUT ?= 45m

## e2e: the end-to-end scenarios (queues, gangs, handoff, filters, faults, CPU-only, helm upgrade from the
## previous chart, real containers on containerd and runc, the scheduler run from its image when make images
## has written IMAGES_DIR).
e2e:
	cd e2e/tools/kubelet && $(GO) vet ./fakecri && $(GO) test -count=1 ./fakecri
	cd e2e/tools/containerd && $(GO) vet ./fakenvidiaruntime && $(GO) test -count=1 ./fakenvidiaruntime
	cd e2e/tools/helm && $(GO) mod tidy -diff
	cd e2e/tools/kubectl && $(GO) mod tidy -diff
	cd e2e/tools/containerd && $(GO) mod tidy -diff
	cd e2e/tools/runc && $(GO) mod tidy -diff
	cd e2e/tools/volcano-e2e && $(GO) mod tidy -diff
	cd e2e && $(GO) vet ./... && $(GO) test -count=1 ./internal/... ./cmd/... && TESSERA_E2E_IMAGES=$(abspath $(IMAGES_DIR)) \
		$(GO) test ./suite -count=1 -v -timeout $(E2E_TIMEOUT) $(E2E_FLAGS)

## scale: 1,000 kwok GPU nodes, one generated workload placed by Volcano without a device
## plugin, Volcano's deviceshare and Tessera in turn, one table (docs/benchmarks.md). Not part
## of make test: each scheduler's cluster takes the e2e lock in turn; on 2 cores ~4 min each at
## 250 nodes, ~11 min at 1,000. SCALE_FLAGS="-nodes 250" for a smaller run. SCALE_DATA=docs/data/scale-250 also
## saves each scheduler's results there (the data make plots draws from).
SCALE_FLAGS ?=
SCALE_DATA  ?=
scale:
	cd e2e && $(GO) build -o .cache/bin/scale ./cmd/scale && .cache/bin/scale -lock /tmp/e2e.lock -revision $(REVISION) \
		$(if $(SCALE_DATA),-data $(abspath $(SCALE_DATA))) $(SCALE_FLAGS)

## volcano-e2e: Volcano v1.14.1's own scheduling e2e suites on kwok nodes, Tessera's conf vs Volcano's CI conf (~1 h; VOLCANO_E2E_FLAGS="-focus Gang").
.PHONY: volcano-e2e
VOLCANO_E2E_FLAGS ?=
volcano-e2e:
	cd e2e && $(GO) build -o .cache/bin/volcano-e2e ./cmd/volcano-e2e && .cache/bin/volcano-e2e -lock /tmp/e2e.lock $(VOLCANO_E2E_FLAGS)

## demo: local cluster + config/samples/ workload + placement table; KEEP=1 leaves it running.
demo:
	cd e2e && $(GO) build -o .cache/bin/demo ./cmd/demo && .cache/bin/demo $(if $(KEEP),--keep) $(DEMO_FLAGS)

## Images and releases (tools/release, its own module: go-containerregistry stays out of go.mod).
# VERSION defaults to the chart's appVersion, so the chart's default image references are what
# `make images` writes; every file and timestamp comes from the commit, so two builds of one
# commit give the same digests.
# Read once per make run (:=), so a build and its check always agree on them.
VERSION           ?= $(shell sed -n 's/^appVersion: *"*\([^"]*\)"* *$$/\1/p' charts/tessera/Chart.yaml)
REVISION          ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD -- 2>/dev/null || echo -dirty)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
VERSION           := $(VERSION)
REVISION          := $(REVISION)
SOURCE_DATE_EPOCH := $(SOURCE_DATE_EPOCH)
IMAGE_REPOSITORY  ?= ghcr.io/tessera-gpu
IMAGES_DIR        ?= dist/images
IMAGE_FLAGS       ?=
DEB_DIR           := build/.debs
RELEASE_TOOL      := $(BIN)/release
RELEASE_FLAGS      = --root $(CURDIR) --version $(VERSION) --revision $(REVISION) --created $(SOURCE_DATE_EPOCH) \
	--repository $(IMAGE_REPOSITORY) --debs $(abspath $(DEB_DIR)) --lock $(CURDIR)/build/image-packages.lock \
	--libvgpu amd64=$(CURDIR)/vgpu-core/build/libvgpu.so $(IMAGE_FLAGS)

release-tool:
	cd tools/release && $(GO) build -o $(CURDIR)/$(RELEASE_TOOL) .

## image-debs: the Debian packages of build/image-packages.lock, into build/.debs (checked by sha256 when used).
image-debs:
	@mkdir -p $(DEB_DIR)
	@grep -v '^#' build/image-packages.lock | while read n v a s; do \
		[ -n "$$n" ] || continue; \
		f=$(DEB_DIR)/$${n}_$$(echo "$$v" | sed 's/:/%3a/')_$$a.deb; [ -f "$$f" ] && continue; \
		( cd $(DEB_DIR) && { apt-get download -q "$$n:$$a=$$v" 2>/dev/null || \
			{ apt-get update -qq && apt-get download -q "$$n:$$a=$$v"; }; } ) || \
		{ echo "cannot download $$n $$v ($$a): Debian may have replaced it; update build/image-packages.lock"; exit 1; }; \
	done

## images: OCI image archives of vc-scheduler (amd64, arm64) and vgpu-device-plugin (amd64) into dist/images,
## without a Docker engine; dist/images/images.json lists them with their digests.
images: release-tool image-debs vgpu-core
	$(RELEASE_TOOL) images --out $(IMAGES_DIR) $(RELEASE_FLAGS)

## image-test: the images' checks (tools/release): archive format, push to an in-process registry, every
## entrypoint run from its image's root file system (chroot, root needed), the chart's default references,
## and a second build compared byte for byte with the first.
image-test: images
	cd tools/release && $(GO) mod tidy -diff && $(GO) vet ./... && $(GO) test -count=1 -timeout 30m ./... \
		-args -images=$(abspath $(IMAGES_DIR)) -build-flags="$(RELEASE_FLAGS)"

## push: the images to REGISTRY (e.g. make push REGISTRY=registry.example.com/tessera), one multi-arch index each.
push: images
	@test -n "$(REGISTRY)" || { echo "usage: make push REGISTRY=registry.example.com/tessera [INSECURE=1]"; exit 2; }
	$(RELEASE_TOOL) push --out $(IMAGES_DIR) --registry $(REGISTRY) $(if $(INSECURE),--insecure)

## release: a release in dist/ (emptied first): tessera and the kubectl-tessera krew packages for linux/darwin x
## amd64/arm64, vc-scheduler (linux amd64/arm64), vgpu-device-plugin (linux/amd64), the image archives
## (dist/images), the chart packaged at VERSION (tessera-VERSION.tgz), the krew manifest (tessera.yaml), SHA256SUMS.
release:
	rm -rf dist
	$(MAKE) images VERSION=$(VERSION) REVISION=$(REVISION) SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) IMAGES_DIR=dist/images
	$(RELEASE_TOOL) dist --dist dist --images dist/images $(RELEASE_FLAGS)

clean:
	rm -rf $(BIN)
	@if [ -f vgpu-core/Makefile ]; then $(MAKE) -C vgpu-core clean; fi
