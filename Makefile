# spade_gym developer entry points. `make demo` and `make test` each set up .venv on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
TORCH_VERSION ?= 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: install demo test bench lint install-train clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)  ## create .venv and install spade_gym with its dev tools

demo: $(STAMP)  ## the main job (for now: check, load and play the example programs in the sandbox)
	$(BIN)/spade demo

test: $(STAMP)  ## the whole test suite, slow tests included
	$(BIN)/python -m pytest -q

bench: $(STAMP)  ## speed figures (pytest-benchmark), printed as ratios and absolute numbers
	$(BIN)/python -m pytest benchmarks -q -s -p no:cacheprovider

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy src

# The `train` extra needs torch. On a machine without an NVIDIA GPU, torch comes from the CPU
# wheel index first, so that pip never pulls a multi-GB CUDA build for it.
install-train: $(STAMP)
	@if command -v nvidia-smi >/dev/null 2>&1; then \
		$(BIN)/python -m pip install -e ".[train]"; \
	else \
		$(BIN)/python -m pip install "torch==$(TORCH_VERSION)" --index-url $(TORCH_CPU_INDEX) && \
		$(BIN)/python -m pip install -e ".[train]"; \
	fi

clean:
	rm -rf $(VENV) .pytest_cache .benchmarks build dist src/*.egg-info
