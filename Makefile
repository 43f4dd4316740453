# The two commands of the README. Both create .venv and install the project on first use.
PYTHON ?= python3
VENV ?= .venv
# A pip requirement to pin Django, e.g. DJANGO="django>=6,<7" (.ci/run tests 5.2 and 6.x this way);
# empty: the newest Django that $(PYTHON) can run (6.x needs Python 3.12+).
DJANGO ?=
PY := $(VENV)/bin/python

.PHONY: demo test lint

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]" $(if $(DJANGO),"$(DJANGO)")
	touch $@

demo: $(VENV)/.installed
	$(PY) manage.py migrate --noinput --verbosity 0
	$(PY) manage.py demo --serve

test: lint
	$(PY) -m pytest

# ruff (lint and format) and mypy with django-stubs (strict; pyproject.toml [tool.mypy]).
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check django_rag tests example_project bench
	$(VENV)/bin/ruff format --check django_rag tests example_project bench
	$(VENV)/bin/mypy
