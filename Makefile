# Two commands do all the set-up: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PEERS := .venv-peers
PEERS_STAMP := $(PEERS)/.installed
CORE_VENV := .venv-core
# The core's proof without torch: exactly these files, by path (docs/testing.md).
CORE_TESTS := tests/core tests/adapters/test_storage.py tests/adapters/test_storage_blob.py \
	tests/adapters/test_storage_contract.py tests/adapters/test_storage_fsspec.py tests/adapters/test_commit_ops.py \
	tests/property/test_commit_machine.py tests/property/test_journal_machine.py tests/property/test_background_commits.py
CORE_DEPS := attrs cattrs portalocker fsspec pytest pytest-timeout pytest-randomly pytest-xdist hypothesis
# Test processes (pytest-xdist): one per core by default, an idle one taking queued tests from a busy
# one (--dist worksteal: the suite's minute-long tests do not end up queued behind each other);
# TEST_WORKERS=0 runs in this process.
TEST_WORKERS ?= auto

.PHONY: demo test test-gpu lint core-check mutate bench bench-peers compat-diff nnx-suite clean

$(STAMP): pyproject.toml constraints-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints-dev.txt -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)  ## train the bundled digits demo and print where its run lives
	$(BIN)/python examples/quickstart.py

test: $(STAMP)  ## run the whole suite, in random order (the seed is printed in the header), one process per core
	$(BIN)/python -m pytest -n $(TEST_WORKERS) $(if $(filter 0,$(TEST_WORKERS)),,--dist worksteal)

test-gpu: $(STAMP)  ## the GPU checks only (tests/gpu, marked gpu; they skip without CUDA): docs/gpu.md
	$(BIN)/python -m pytest -m gpu tests/gpu

# The linters come from their own extra (lint), installed on top of the test install: the suite
# does not need them, and a change to pyproject.toml or the pins reinstalls both.
LINT_STAMP := $(VENV)/.lint-installed

$(LINT_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -c constraints-dev.txt -e ".[test,lint]"
	touch $(LINT_STAMP)

lint: $(LINT_STAMP)  ## ruff over the repository, mypy --strict over nnx_core (configured in pyproject.toml)
	$(BIN)/ruff check .
	$(BIN)/mypy --strict nnx_core

$(CORE_VENV)/.installed: constraints-dev.txt
	test -x $(CORE_VENV)/bin/python || $(PYTHON) -m venv $(CORE_VENV)
	$(CORE_VENV)/bin/python -m pip install -q -c constraints-dev.txt $(CORE_DEPS)
	touch $@

core-check: $(CORE_VENV)/.installed  ## the core's suite in a venv with only the core's dependencies (no torch)
	$(CORE_VENV)/bin/python -c "import importlib.util as u, sys; sys.exit('torch is installed' if u.find_spec('torch') else 0)"
	$(CORE_VENV)/bin/python -m pytest -n $(TEST_WORKERS) $(CORE_TESTS)

mutate: $(STAMP)  ## mutation testing of nnx_core and nnx_adapters/storage (slow; not part of make test)
	$(BIN)/python -m pip install -q -c constraints-dev.txt -e ".[test,dev]"
	rm -rf mutants
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/mutmut run $(MUTATE)  # threads: a forked child otherwise hangs in torch
	$(BIN)/mutmut results

bench: $(STAMP)  ## run every benchmark but the peers (prints tables; see docs/performance.md)
	@for script in bench/*.py; do \
		[ "$$script" = bench/peers.py ] && continue; \
		echo "== $$script"; $(BIN)/python $$script || exit 1; \
	done

# The peers live in their own virtualenv (never dependencies of this project): torch first, pinned
# to the same 2.13.0 CPU build, then the peers under the same constraint so none pulls another torch.
$(PEERS_STAMP): pyproject.toml constraints-dev.txt
	test -x $(PEERS)/bin/python || $(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install -q --upgrade pip
	$(PEERS)/bin/python -m pip install -q -c constraints-dev.txt torch
	$(PEERS)/bin/python -m pip install -q -c constraints-dev.txt -e . scikit-learn lightning skorch thekaveh-nnx==0.4.1
	touch $(PEERS_STAMP)

bench-peers: $(PEERS_STAMP)  ## this project vs skorch, Lightning and NNx 0.4.1 (docs/performance.md)
	$(PEERS)/bin/python bench/peers.py

# The differential oracle (bench/compat/, docs/nnx-compat.md): NNx 0.4.1 itself in its own virtualenv
# (never a dependency of this project), torch first under the same constraint so the wheel pulls no other.
NNX_VENV := .venv-nnx
NNX_STAMP := $(NNX_VENV)/.installed

$(NNX_STAMP): constraints-dev.txt
	test -x $(NNX_VENV)/bin/python || $(PYTHON) -m venv $(NNX_VENV)
	$(NNX_VENV)/bin/python -m pip install -q --upgrade pip
	$(NNX_VENV)/bin/python -m pip install -q -c constraints-dev.txt torch
	$(NNX_VENV)/bin/python -m pip install -q -c constraints-dev.txt thekaveh-nnx==0.4.1
	touch $(NNX_STAMP)

compat-diff: $(STAMP) $(NNX_STAMP)  ## the same user-level scenarios under NNx 0.4.1 and nnx_api, compared (not part of make test)
	$(BIN)/python bench/compat/diff.py $(COMPAT_DIFF_ARGS)

# NNx 0.4.1's own test suite (bench/nnx_suite/, docs/nnx-compat.md): its sdist's tests, the in-scope
# files, run against nnx_api with `import nnx` mapped onto it; the sdist is downloaded once into build/.
nnx-suite: $(STAMP)  ## NNx's own tests against nnx_api: counts, and every failure kept with a reason
	$(BIN)/python bench/nnx_suite/run.py $(NNX_SUITE_ARGS)

clean:
	rm -rf $(VENV) $(CORE_VENV) $(PEERS) $(NNX_VENV) mutants runs build *.egg-info

# The crash matrix (bench/chaos/, docs/reliability.md): the outside crash tester ckpt-chaos (pinned
# in constraints-dev.txt; no dependencies of its own) beside the test set-up it drives.
CHAOS_STAMP := $(VENV)/.chaos-installed
.PHONY: chaos chaos-quick

$(CHAOS_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -c constraints-dev.txt ckpt-chaos
	touch $(CHAOS_STAMP)

chaos: $(CHAOS_STAMP)  ## crash every file event of every driver in every mode (hours on 2 cores)
	$(BIN)/python bench/chaos/matrix.py $(CHAOS_ARGS)

chaos-quick: $(CHAOS_STAMP)  ## a sample of the crash matrix (minutes; run by CI)
	$(BIN)/python bench/chaos/matrix.py --quick $(CHAOS_ARGS)

# Search workers on a PostgreSQL study (docs/plans-search.md): the test starts its own server from the
# system's PostgreSQL binaries (skipped, with the reason, where there are none). The database driver
# is installed for this target only: the package itself does not need it.
.PHONY: search-postgres
search-postgres: $(STAMP)  ## two search workers sharing a PostgreSQL study, on a server the test starts
	$(BIN)/python -m pip install -q -c constraints-dev.txt psycopg2-binary
	NNX_DEEP=1 $(BIN)/python -m pytest -p no:randomly -rs tests/integration/test_search_workers.py -k postgresql
