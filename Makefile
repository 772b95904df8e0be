# The README's commands. Everything installs what it needs first (scripts/setup.sh is idempotent).
BUILD ?= build
JOBS ?= 2
ONNX_NODE_TESTS = $(shell python3 -c 'import onnx,os;print(os.path.dirname(onnx.__file__))' 2>/dev/null)/backend/test/data/node
FUZZ_SECONDS ?= 600
CMAKE_FLAGS ?=

.PHONY: all setup build demo test test-server unit conformance conformance-engine conformance-update fuzz fuzz-build fuzz-onnx \
	fuzz-engine fuzz-http fuzz-grpc fuzz-config fuzz-calibration fuzz-npz fuzz-image format clean python test-python test-distill test-pip test-deploy \
	test-replicas

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
	$(BUILD)/src/kiln compile $(BUILD)/demo/demo.onnx -o $(BUILD)/demo/demo.kiln --shape-range image:1..16x3x8x8
	$(BUILD)/src/kiln run $(BUILD)/demo/demo.kiln --seed 1 --repeat 5
	$(BUILD)/src/kiln verify $(BUILD)/demo/demo.kiln --dim batch=4
	$(BUILD)/src/kiln bench $(BUILD)/demo/demo.kiln --batch 8 --iterations 50
	$(BUILD)/src/kiln profile $(BUILD)/demo/demo.kiln --top 3 --trace $(BUILD)/demo/trace.json \
	  --html $(BUILD)/demo/profile.html

unit: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

conformance: build
	$(BUILD)/tests/kiln_conformance --data $(ONNX_NODE_TESTS) --expected tests/conformance/expected_failures.txt

# The same tests with every model written to a .kiln engine and read back before it runs.
conformance-engine: build
	$(BUILD)/tests/kiln_conformance --data $(ONNX_NODE_TESTS) --expected tests/conformance/expected_failures.txt --via-engine --optimize

conformance-update: build
	$(BUILD)/tests/kiln_conformance --data $(ONNX_NODE_TESTS) --write-expected tests/conformance/expected_failures.txt

# Real models at small sizes (tests/models): exported once into $(BUILD)/models, then each run
# directly and as a compiled engine, within 1e-4 relative L2 of onnxruntime.
.PHONY: test-models
test-models: build
	python3 -m pytest -q tests/models --build-dir $(BUILD)

test: unit conformance conformance-engine test-models test-server test-python test-distill test-pip test-deploy \
  test-replicas
	python3 -m pytest -q tests/cli --kiln $(BUILD)/src/kiln

# deploy/ (Helm chart, KServe runtime, Prometheus adapter rule) rendered and validated offline
# against the Kubernetes schemas; needs no build and no cluster (docs/DEPLOY.md).
test-deploy: setup
	python3 -m pytest -q tests/deploy --ignore=tests/deploy/test_replicas.py

# Debian's nginx with deploy/nginx/kiln.conf in front of three kiln-serve replicas on loopback,
# 32 clients busy while one replica drains and restarts and, in a second run, one is killed
# (docs/DEPLOY.md). REPLICA_SECONDS per scenario; bench/server/replicas.py runs the 60 s
# measurement of bench/results.
REPLICA_SECONDS ?= 12
test-replicas: build
	KILN_SERVE=$(BUILD)/src/kiln-serve REPLICA_SECONDS=$(REPLICA_SECONDS) \
	  python3 -m pytest -q tests/deploy/test_replicas.py

# The inference server end to end, through the real tritonclient (docs/SERVER.md).
test-server: build
	python3 -m pytest -q tests/server --kiln-serve $(BUILD)/src/kiln-serve

# The Python package's module, built in the main tree; PYTHONPATH=$(BUILD)/python imports it.
python: build
	cmake -S . -B $(BUILD) -DKILN_BUILD_PYTHON=ON > /dev/null
	cmake --build $(BUILD) -j $(JOBS) --target kiln_python

test-python: python
	PYTHONPATH=$(BUILD)/python KILN_CLI=$(BUILD)/src/kiln python3 -m pytest -q tests/python

# kiln.distill needs PyTorch, which Debian installs for its own interpreter (python3-torch), not
# for the python3 first on PATH (test-python skips these tests there, saying why). The module is
# built for Python 3.11; Debian's /usr/bin/python3 is 3.11 too, so it loads the same module.
SYSTEM_PYTHON ?= /usr/bin/python3
test-distill: python
	PYTHONPATH=$(BUILD)/python KILN_CLI=$(BUILD)/src/kiln $(SYSTEM_PYTHON) -m pytest -q \
	  -p no:cacheprovider tests/python/test_distill.py

# `pip install ./python` as a user runs it (an isolated build: pip fetches the build requirements of
# python/pyproject.toml), into a scratch directory, then the Python tests against that install. Its
# build tree is a sibling of $(BUILD) with the same compiler (scikit-build-core would take Python's)
# and build type, so ccache serves every Kiln object the main build compiled; only nanobind and the
# module compile again (docs/API.md).
PIP_BUILD ?= build-pip
test-pip: build
	rm -rf $(PIP_BUILD) $(PIP_BUILD)-site
	CXX=$$(sed -n 's/^CMAKE_CXX_COMPILER:FILEPATH=//p' $(BUILD)/CMakeCache.txt) \
	  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps \
	  --target $(PIP_BUILD)-site -C build-dir=$(CURDIR)/$(PIP_BUILD) \
	  -C cmake.build-type=RelWithDebInfo ./python
	PYTHONPATH=$(CURDIR)/$(PIP_BUILD)-site KILN_CLI=$(BUILD)/src/kiln python3 -m pytest -q \
	  -p no:cacheprovider tests/python

# libFuzzer on every parser of outside bytes (one target each below), built with clang and
# sanitizers in their own tree; FUZZ_SECONDS each. Each fails on any crash, sanitizer report or leak; what it
# found is left in build-fuzz/ (crash-*, fuzz*.log).
FUZZ_FLAGS = -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
fuzz: fuzz-onnx fuzz-engine fuzz-http fuzz-grpc fuzz-config fuzz-calibration fuzz-npz fuzz-image

# $(call run_fuzzer,BINARY,CORPUS,LOG,SEEDS[,MAX_LEN]): one libFuzzer target for FUZZ_SECONDS at
# the production limits, its corpus seeded from tests/fuzz/regressions/SEEDS; prints its summary
# and fails on any finding (left in build-fuzz/).
define run_fuzzer
	mkdir -p build-fuzz/$(2)
	cp tests/fuzz/regressions/$(4)/* build-fuzz/$(2)/
	build-fuzz/tests/$(1) build-fuzz/$(2) -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 \
	  -max_len=$(or $(5),65536) -print_final_stats=1 -artifact_prefix=build-fuzz/ \
	  > build-fuzz/$(3) 2>&1; \
	  status=$$?; grep -E "^#[0-9]+ +DONE|stat::|ERROR|SUMMARY" build-fuzz/$(3); exit $$status
endef

fuzz-build: setup
	@bash scripts/setup.sh --fuzz
	CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DKILN_FUZZ=ON -DKILN_BUILD_TESTS=ON \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$(FUZZ_FLAGS)"
	cmake --build build-fuzz -j $(JOBS) --target fuzz_onnx_import fuzz_engine_reader fuzz_http_infer fuzz_grpc_infer \
	  fuzz_model_config fuzz_calibration_cache fuzz_npz fuzz_image_decoder \
	  kiln_cli

fuzz-onnx: fuzz-build
	mkdir -p build-fuzz/corpus
	for d in $(ONNX_NODE_TESTS)/*/; do cp $$d/model.onnx build-fuzz/corpus/$$(basename $$d).onnx; done
	$(call run_fuzzer,fuzz_onnx_import,corpus,fuzz.log,onnx_import)

# Seeded with engines compiled from the demo model and a few node tests (control flow included).
ENGINE_SEEDS = test_if test_loop11 test_scan9_sum test_add test_conv_with_strides_padding \
	test_equal_string test_optional_get_element_sequence test_constant test_gather_0
fuzz-engine: fuzz-build
	mkdir -p build-fuzz/engine-corpus
	python3 tools/make_demo_model.py build-fuzz/engine-seeds
	build-fuzz/src/kiln compile build-fuzz/engine-seeds/demo.onnx -o build-fuzz/engine-corpus/demo.kiln \
	  --no-verify >/dev/null
	build-fuzz/src/kiln compile build-fuzz/engine-seeds/convs.onnx -o build-fuzz/engine-corpus/convs.kiln \
	  --no-verify >/dev/null
	for t in $(ENGINE_SEEDS); do [ -f $(ONNX_NODE_TESTS)/$$t/model.onnx ] && \
	  build-fuzz/src/kiln compile $(ONNX_NODE_TESTS)/$$t/model.onnx --no-optimize --no-verify \
	    -o build-fuzz/engine-corpus/$$t.kiln >/dev/null || true; done
	$(call run_fuzzer,fuzz_engine_reader,engine-corpus,fuzz-engine.log,engine_reader)

# The HTTP frontend's request parser (pipelined requests, chunked bodies, trailers, at
# kiln-serve's default limits; inputs up to 256 KiB so a field or trailer can pass the 64 KiB
# header limit) and KServe v2 infer-request decoder (and the response encoder on what it
# decodes), seeded with the requests in tests/fuzz/regressions/http_infer.
fuzz-http: fuzz-build
	$(call run_fuzzer,fuzz_http_infer,http-corpus,fuzz-http.log,http_infer,262144)

# The gRPC frontend's ModelInferRequest decoder (and the response encoder on what it decodes),
# seeded with the serialized requests in tests/fuzz/regressions/grpc_infer.
fuzz-grpc: fuzz-build
	$(call run_fuzzer,fuzz_grpc_infer,grpc-corpus,fuzz-grpc.log,grpc_infer)

# Model configurations as config.pbtxt text or the load API's JSON (a client's bytes when the
# repository API is open) through the load-time checks, an ensemble's plan and step checks
# included; seeded with the configs in tests/fuzz/regressions/model_config.
fuzz-config: fuzz-build
	$(call run_fuzzer,fuzz_model_config,config-corpus,fuzz-config.log,model_config)

# `kiln quantize --calibration-cache`'s file parser (a file from outside) and the ranges read off
# what it accepts, seeded with the cache of the demo model in tests/fuzz/regressions.
fuzz-calibration: fuzz-build
	$(call run_fuzzer,fuzz_calibration_cache,calibration-corpus,fuzz-calibration.log,calibration_cache)

# The .npz reader (calibration sets, task metric answers: files from outside), seeded with
# stored and deflated files of several dtypes in tests/fuzz/regressions/npz.
fuzz-npz: fuzz-build
	$(call run_fuzzer,fuzz_npz,npz-corpus,fuzz-npz.log,npz)

# ImageDecoder's decoding (a served model decodes what clients send: BMP and PNM parsed by Kiln,
# JPEG / PNG / TIFF through the libraries), seeded with the ONNX node tests' images.
fuzz-image: fuzz-build
	$(call run_fuzzer,fuzz_image_decoder,image-corpus,fuzz-image.log,image_decoder)

# The GPU backend on the lent H200 (docs/GPU.md): packs kiln, kiln_gpu_tests and libkiln_gpu_cuda.so
# with the libraries they need into $(GPU_CARRY), for `bash $(GPU_CARRY)/gpu_device_check.sh run`.
GPU_CARRY ?= .gpu_carry
.PHONY: gpu-pack
gpu-pack: build
	bash scripts/gpu_device_check.sh pack $(BUILD) $(GPU_CARRY)

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp')

clean:
	rm -rf $(BUILD) build-fuzz $(PIP_BUILD) $(PIP_BUILD)-site
