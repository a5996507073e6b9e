"""Declares sphinx-multitoc-numbering safe for Sphinx's parallel build, which it is but does not say.

sphinx-external-toc (which Jupyter Book 1.x builds every book with) loads sphinx-multitoc-numbering 0.1.3,
whose ``setup`` returns no metadata, so Sphinx assumes it unsafe and reads every page on one process
(with a warning, which ``-W`` turns into a failed build). All that extension does is log a line at
``builder-inited`` and replace ``TocTreeCollector.assign_section_numbers``, which Sphinx calls in the main
process once the pages are read: it keeps nothing per page, so there is nothing to merge from the
reading processes. A version other than 0.1.3 is left as it declares itself.
"""
from __future__ import annotations

__all__ = ["setup", "MULTITOC", "CHECKED_VERSION"]

MULTITOC = "sphinx_multitoc_numbering"
CHECKED_VERSION = "0.1.3"


def setup(app):
    import importlib

    app.setup_extension(MULTITOC)  # already set up by sphinx-external-toc: then this only returns it
    if getattr(importlib.import_module(MULTITOC), "__version__", None) == CHECKED_VERSION:
        ext = app.extensions[MULTITOC]
        ext.parallel_read_safe = ext.parallel_write_safe = True
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
