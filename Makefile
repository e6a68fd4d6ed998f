# WaveSQL: `make demo` runs the demo, `make test` runs the test suite. Each creates the
# virtual environment in .venv on first use (needs Python >= 3.10 and Java 17+).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test test-all clean

demo: $(VENV)/.installed
	$(BIN)/wavesql demo

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q

# Includes the slow tests that CI skips.
test-all: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -m "slow or not slow"

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "WaveSQL needs Python >= 3.10")'
	@command -v java >/dev/null 2>&1 || [ -n "$$JAVA_HOME" ] || echo "warning: no java on PATH; Spark needs Java 17+ (apt-get install openjdk-17-jre-headless)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

clean:
	rm -rf $(VENV) wavesql_demo wavesql_catalog.db* .pytest_cache
