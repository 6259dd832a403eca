# Two commands do all the set-up: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml constraints-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints-dev.txt -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)  ## train the bundled digits demo and print where its run lives
	$(BIN)/python examples/quickstart.py

test: $(STAMP)  ## run the whole suite
	$(BIN)/python -m pytest

bench: $(STAMP)  ## run every benchmark (prints tables; see docs/performance.md)
	@for script in bench/*.py; do echo "== $$script"; $(BIN)/python $$script || exit 1; done

clean:
	rm -rf $(VENV) runs build *.egg-info

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
