# The two commands of the README:
#   make run    install dependencies, build, fetch the default model and run the main job
#   make test   install dependencies, check formatting, build and run every test (plain, ASan, TSan,
#               fuzz, the NEON kernels under qemu)
# Everything else here is a step of those two.

JOBS ?= 2
BUILD ?= build
CMAKE_FLAGS ?=
# The test builds treat warnings as errors (we control this compiler); a plain
# `cmake` build does not (see KVSERVE_WERROR in CMakeLists.txt).
TEST_FLAGS = -DKVSERVE_WERROR=ON
MODEL ?= models/stories260K.gguf
# Extra kvserve flags for `make run` (e.g. ARGS="--chat-template chatml").
ARGS ?=
PROMPT ?= Once upon a time

.PHONY: run test deps models vocab configure build build-run test-format build-asan build-tsan build-fuzz test-plain test-asan test-tsan test-fuzz test-aarch64 bench clean

deps:
	./scripts/install-deps.sh

models:
	./models/fetch.sh

# Tokenizer test vocabularies (tests only; `make run` does not need them).
vocab:
	./models/fetch-vocab.sh

# The plain build is a standard Release build (what users and packagers get).
configure: deps models
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(TEST_FLAGS) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j$(JOBS)

# Only what the main job runs: the server and the CLI it prints commands for.
build-run: configure
	cmake --build $(BUILD) -j$(JOBS) --target kvserve kvserve-cli

run: build-run
	./scripts/run-main.sh $(BUILD) $(MODEL) $(ARGS)

test-plain: build vocab
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) -LE "fuzz|tsan-only"

# AddressSanitizer + UBSan over every GoogleTest binary (label asan).
build-asan: deps models
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DKVSERVE_SANITIZE=address $(TEST_FLAGS) $(CMAKE_FLAGS)
	cmake --build build-asan -j$(JOBS) --target kvserve_asan_tests

test-asan: build-asan vocab
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j$(JOBS) -L asan

# ThreadSanitizer over the tests whose threads are kvserve's own (labels tsan, tsan-only; README).
build-tsan: deps models
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVSERVE_SANITIZE=thread $(TEST_FLAGS) $(CMAKE_FLAGS)
	cmake --build build-tsan -j$(JOBS) --target kvserve_tsan_tests

test-tsan: build-tsan
	cd build-tsan && ctest --output-on-failure -j$(JOBS) -L tsan

# libFuzzer targets (clang), each run briefly.
build-fuzz: deps models
	CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVSERVE_FUZZ=ON $(TEST_FLAGS) $(CMAKE_FLAGS)
	cmake --build build-fuzz -j$(JOBS) --target kvserve_fuzzers

test-fuzz: build-fuzz
	cd build-fuzz && ctest --output-on-failure -L fuzz

# The NEON kernel levels, cross-compiled for AArch64 and run under qemu-user (one CPU model
# per level; scripts/test-aarch64.sh installs the cross compiler and arm64 libraries).
test-aarch64:
	JOBS=$(JOBS) ./scripts/test-aarch64.sh build-aarch64

# Every C++ file matches .clang-format.
test-format: deps
	./scripts/check-format.sh

test: test-format test-plain test-asan test-tsan test-fuzz test-aarch64
	@echo "make test: all suites passed"

bench: build
	./$(BUILD)/bench/kvserve-bench backend --model $(MODEL)

clean:
	rm -rf build build-asan build-tsan build-fuzz build-aarch64
