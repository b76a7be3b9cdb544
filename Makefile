# The two commands a newcomer runs: `make demo` and `make test`.
# Everything else here serves those two.

BUILD_DIR   ?= build/release
ASAN_DIR    ?= build/asan
JOBS        ?= $(shell nproc)
GENERATOR    = $(shell command -v ninja >/dev/null 2>&1 && echo Ninja || echo "Unix Makefiles")
CTEST_FLAGS ?= --output-on-failure --timeout 600 -j $(JOBS)
# Builds go through ccache when it is installed (tools/install-deps installs it). The base
# directory is this checkout, so a clone in another folder (CI) hits the same cache entries.
# Expanded when a recipe runs (`=`, not `:=`), after the deps prerequisite may have installed
# ccache: on a fresh machine the first `make test` then builds through it too.
CCACHE       = $(shell command -v ccache 2>/dev/null)
CMAKE_LAUNCHER = $(if $(CCACHE),-DCMAKE_CXX_COMPILER_LAUNCHER=$(CCACHE),)
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := true

.PHONY: all deps build build-asan test test-release test-asan demo bench docs clean packages images

all: build

deps:
	@tools/install-deps

build: deps
	@cmake -S . -B $(BUILD_DIR) -G "$(GENERATOR)" -DCMAKE_BUILD_TYPE=Release $(CMAKE_LAUNCHER) >/dev/null
	@cmake --build $(BUILD_DIR) -j $(JOBS)

build-asan: deps
	@cmake -S . -B $(ASAN_DIR) -G "$(GENERATOR)" -DCMAKE_BUILD_TYPE=Debug -DSHOAL_SANITIZE=ON -DSHOAL_BUILD_BENCH=OFF $(CMAKE_LAUNCHER) >/dev/null
	@cmake --build $(ASAN_DIR) -j $(JOBS)

# Every test on the release build, then the unit tests again under ASan+UBSan.
test: test-release test-asan

test-release: build
	@cd $(BUILD_DIR) && ctest $(CTEST_FLAGS)

test-asan: build-asan
	@cd $(ASAN_DIR) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 ctest $(CTEST_FLAGS) -L '^(unit|asan_daemons)$$'

# The demo: a registry, registry-proxy, the scheduler and NODES peerd nodes with containerd, in
# network namespaces with shaped links, all pulling one image at once. Needs root.
NODES ?= 4
demo: build
	@tools/demo --nodes $(NODES) $(DEMO_ARGS)

bench: build
	@bench/cache/run

packages: build ; @rm -f $(BUILD_DIR)/packages/*.deb && cd $(BUILD_DIR) && cpack -G DEB -B packages >/dev/null && ls -1 packages/*.deb

# Shoal's own container images (shoal/peerd, shoal/registry-proxy, shoal/scheduler) from those
# packages on a Debian 12 root filesystem (mmdebstrap, cached in /var/cache/shoal/images) with
# buildah, as OCI archives in build/release/images (docs/install.md). Needs root.
images: packages
	@tools/build-images --debs $(BUILD_DIR)/packages --out $(BUILD_DIR)/images

# Regenerates the configuration references in docs/config/ from the daemons, and the benchmark
# tables in docs/*.md from the JSON under bench/results/ (tools/bench-docs).
docs: build
	@$(BUILD_DIR)/registry-proxy/shoal-registry-proxy --print-config-docs > docs/config/registry-proxy.md
	@$(BUILD_DIR)/peerd/shoal-peerd --print-config-docs > docs/config/peerd.md
	@$(BUILD_DIR)/netsetup/shoal-netsetup --print-policy-docs > docs/config/netsetup-policy.md
	@if [ -x $(BUILD_DIR)/scheduler/shoal-scheduler ]; then $(BUILD_DIR)/scheduler/shoal-scheduler --print-config-docs > docs/config/scheduler.md; fi
	@tools/bench-docs

clean:
	rm -rf build
