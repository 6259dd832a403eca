# Two commands do all the set-up: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-gpu bench clean

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

bench: $(STAMP)  ## run every benchmark (prints tables; see docs/performance.md)
	@for script in bench/*.py; do echo "== $$script"; $(BIN)/python $$script || exit 1; done

clean:
	rm -rf $(VENV) runs build *.egg-info
