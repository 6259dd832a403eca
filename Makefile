# Two commands do all the set-up: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PEERS := .venv-peers
PEERS_STAMP := $(PEERS)/.installed

.PHONY: demo test test-gpu bench bench-peers clean

$(STAMP): pyproject.toml constraints-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints-dev.txt -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)  ## train the bundled digits demo and print where its run lives
	$(BIN)/python examples/quickstart.py

test: $(STAMP)  ## run the whole suite
	$(BIN)/python -m pytest

test-gpu: $(STAMP)  ## the GPU checks only (tests/gpu, marked gpu; they skip without CUDA): docs/gpu.md
	$(BIN)/python -m pytest -m gpu tests/gpu

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

clean:
	rm -rf $(VENV) $(PEERS) runs build *.egg-info
