# The two commands of the README: `make demo` and `make test`. Each creates .venv when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# constraints.txt pins torch to the CPU build available on this project's machines.
PIP_INSTALL := $(PIP) install --quiet --disable-pip-version-check -c constraints.txt

.PHONY: demo test lint imports typecheck pytest fuzz clean fixtures

$(VENV)/.installed-base: pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --upgrade pip
	$(PIP_INSTALL) torch==2.13.0
	$(PIP_INSTALL) -e .
	touch $@

# tensorflow-cpu: the tf extra's TensorFlow as its CPU-only build, for tests/keras' SavedModel test.
$(VENV)/.installed-all: $(VENV)/.installed-base
	$(PIP_INSTALL) -e '.[dev,onnx,ray,s3,cli,tensorboard,league,atari,mujoco,keras,mlflow,wandb]'
	$(PIP_INSTALL) tensorflow-cpu==2.21.0
	touch $@

demo: $(VENV)/.installed-base
	$(PY) examples/demo.py

lint: $(VENV)/.installed-all
	$(PY) -m ruff check cairn tests bench examples scripts

# The layer contract in pyproject.toml ([tool.importlinter]); docs/architecture.md draws it.
imports: $(VENV)/.installed-all
	$(VENV)/bin/lint-imports

typecheck: $(VENV)/.installed-all
	$(PY) -m mypy

pytest: $(VENV)/.installed-all
	$(PY) -m pytest -q

test: lint imports typecheck pytest

fuzz: $(VENV)/.installed-all
	CAIRN_FUZZ_EXAMPLES=5000 $(PY) -m pytest -q tests/checkpoint -k fuzz

fixtures: $(VENV)/.installed-base
	$(PY) scripts/make_fixture_checkpoints.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
