# Two entry points for a fresh machine (Python 3.11 + the package registries):
#   make book   run the demo profile, execute every notebook, build the HTML book
#   make test   unit tests + doctests of shovir_core + checks of the notebooks `book` just executed
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
PROFILE ?= demo
# torch: the CPU wheel by default; on a GPU machine set TORCH_SPEC to the CUDA build you want.
TORCH_SPEC ?= torch==2.13.0

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: book test records notebooks clean-book help pdf

help:
	@echo "make book   - run the $(PROFILE) profile, execute notebooks, build the book"
	@echo "make test   - build the book, then unit tests, doctests, checks of the executed notebooks and the browser test"
	@echo "make pdf    - the whole book as one PDF (book/_build/pdf/book.pdf; Debian's chromium prints it)"

# Byte-code: pip would compile all ~20,000 installed files (one at a time: about 55 s on 2 cores; compileall on
# both cores: 29 s), of which a book build and the tests import about 5,000. So the packages go in uncompiled and
# each module is compiled when a process first imports it, its .pyc written into .venv (and the repository's
# __pycache__, ignored by git) -- also where PYTHONDONTWRITEBYTECODE is set, which would otherwise make every one of
# the build's processes compile everything it imports again (measured: 9 s more per process for the book's
# imports; the first import writing the files costs about 10 s once)
unexport PYTHONDONTWRITEBYTECODE
# The book needs the package and its dependencies; the dev extras (pytest, Playwright, pypdf, ...) are installed by
# the targets that use them (measured: 7 s of `make book`'s install on 2 cores)
# While pip installs the package's dependencies (a single core, mostly waiting on the index), the other core compiles
# torch and the two packages it imports at start-up (sympy, mpmath), and this repository's package: otherwise the book's
# first processes compile them at once, each its own copy (a py-spy sample of a fresh-clone book: 22 CPU-seconds of
# compiling in its first seconds, 10 of them torch's; compiled here in 12 s on the otherwise idle core, hidden in pip's
# 24 s). quiet=2: torch ships a test helper in Python 3.12 syntax that 3.11 cannot compile (and never imports).
PRECOMPILE := import compileall, importlib.util; [compileall.compile_dir(importlib.util.find_spec(m).submodule_search_locations[0], quiet=2) for m in ("torch", "sympy", "mpmath", "shovir_core")]
$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --no-compile "$(TORCH_SPEC)"
	$(BIN)/python -c '$(PRECOMPILE)' & $(BIN)/pip install --quiet --no-compile -e .; status=$$?; wait; exit $$status
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(BIN)/pip install --quiet --no-compile -e ".[dev]"
	touch $(DEV_STAMP)

notebooks: $(STAMP)
	$(BIN)/shovir book --profile $(PROFILE) --no-build

book: $(STAMP)
	$(BIN)/shovir book --profile $(PROFILE)

# the browser test (tests/test_book_browser.py) reads the built HTML, so `test` builds the book; the executed
# notebooks are checked where `book` wrote them (tests/test_executed_notebooks.py), not executed a second time
# one pytest-xdist worker per core this process may use, at most 4 (each worker holds its own torch and models);
# --dist loadfile keeps a file's tests and its module fixtures on one worker. TEST_WORKERS=1 runs in one process.
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print(min(4, len(os.sched_getaffinity(0))))" 2>/dev/null || echo 2)
test: book $(DEV_STAMP)
	$(BIN)/python -m pytest tests shovir_core --doctest-modules -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile

# the whole book as one PDF: the executed notebooks as one HTML page, printed by /usr/bin/chromium
pdf: notebooks $(DEV_STAMP)
	$(BIN)/python -m shovir_core.book.pdf

clean-book:
	rm -rf book/_build book/*.ipynb
