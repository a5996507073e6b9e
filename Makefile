# Two entry points for a fresh machine (Python 3.11 + the package registries):
#   make book   run the demo profile, execute every notebook, build the HTML book
#   make test   unit tests + doctests of shovir_core + checks of the notebooks `book` just executed
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
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

# pip byte-compiles what it installs one file at a time (about 55 of the install's 95 s on 2 cores); the
# packages go in uncompiled and compileall compiles them on every core instead, as pip would have (a file
# that does not compile on this Python, e.g. torch's Python 3.12 test helpers, is left as pip leaves it)
$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --no-compile "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet --no-compile -e ".[dev]"
	$(BIN)/python -c "import compileall, os, sysconfig; compileall.compile_dir(sysconfig.get_path('purelib'), quiet=2, workers=len(os.sched_getaffinity(0)))"
	touch $(STAMP)

notebooks: $(STAMP)
	$(BIN)/shovir book --profile $(PROFILE) --no-build

book: $(STAMP)
	$(BIN)/shovir book --profile $(PROFILE)

# the browser test (tests/test_book_browser.py) reads the built HTML, so `test` builds the book; the executed
# notebooks are checked where `book` wrote them (tests/test_executed_notebooks.py), not executed a second time
# one pytest-xdist worker per core this process may use, at most 4 (each worker holds its own torch and models);
# --dist loadfile keeps a file's tests and its module fixtures on one worker. TEST_WORKERS=1 runs in one process.
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print(min(4, len(os.sched_getaffinity(0))))" 2>/dev/null || echo 2)
test: book
	$(BIN)/python -m pytest tests shovir_core --doctest-modules -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile

# the whole book as one PDF: the executed notebooks as one HTML page, printed by /usr/bin/chromium
pdf: notebooks
	$(BIN)/python -m shovir_core.book.pdf

clean-book:
	rm -rf book/_build book/*.ipynb
