# The README's commands. Everything installs what it needs first (scripts/setup.sh is idempotent).
BUILD ?= build
JOBS ?= 2
ONNX_NODE_TESTS = $(shell python3 -c 'import onnx,os;print(os.path.dirname(onnx.__file__))' 2>/dev/null)/backend/test/data/node
FUZZ_SECONDS ?= 600
CMAKE_FLAGS ?=

.PHONY: all setup build demo test unit conformance conformance-update fuzz format clean

all: build

setup:
	@bash scripts/setup.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS)

build: setup $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	python3 tools/make_demo_model.py $(BUILD)/demo
	$(BUILD)/src/kiln inspect $(BUILD)/demo/demo.onnx
	$(BUILD)/src/kiln run $(BUILD)/demo/demo.onnx --seed 1 --repeat 5

unit: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

conformance: build
	$(BUILD)/tests/kiln_conformance --data $(ONNX_NODE_TESTS) --expected tests/conformance/expected_failures.txt

conformance-update: build
	$(BUILD)/tests/kiln_conformance --data $(ONNX_NODE_TESTS) --write-expected tests/conformance/expected_failures.txt

test: unit conformance
	python3 -m pytest -q tests/cli --kiln $(BUILD)/src/kiln

# libFuzzer on the ONNX importer, built with clang and sanitizers in its own tree. Fails on any
# crash, sanitizer report or leak; what it found is left in build-fuzz/ (crash-*, fuzz.log).
FUZZ_FLAGS = -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
fuzz: setup
	@bash scripts/setup.sh --fuzz
	CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DKILN_FUZZ=ON -DKILN_BUILD_TESTS=ON \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$(FUZZ_FLAGS)"
	cmake --build build-fuzz -j $(JOBS) --target fuzz_onnx_import
	mkdir -p build-fuzz/corpus
	for d in $(ONNX_NODE_TESTS)/*/; do cp $$d/model.onnx build-fuzz/corpus/$$(basename $$d).onnx; done
	cp tests/fuzz/regressions/onnx_import/* build-fuzz/corpus/
	build-fuzz/tests/fuzz_onnx_import build-fuzz/corpus -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 \
	  -max_len=65536 -print_final_stats=1 -artifact_prefix=build-fuzz/ > build-fuzz/fuzz.log 2>&1; \
	  status=$$?; grep -E "^#[0-9]+ +DONE|stat::|ERROR|SUMMARY" build-fuzz/fuzz.log; exit $$status

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp')

clean:
	rm -rf $(BUILD) build-fuzz
