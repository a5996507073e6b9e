"""The book: notebook runner (jupytext + papermill), glue helpers, credentialed-data guard."""
from .captions import PAPER_ONLY
from .glue import GLUE_LOG_ENV, ProvenanceError, glue, glue_paper, glue_values, load_runs, runs_table, show
from .guard import CredentialedDataError, assert_aggregate
from .params import ParamsError, load_params, toc_notebooks
from .runner import BookError, build_book, execute_book, execute_notebook, make_records

__all__ = [
    "glue", "glue_paper", "glue_values", "ProvenanceError", "PAPER_ONLY", "GLUE_LOG_ENV", "show", "load_runs", "runs_table", "CredentialedDataError", "assert_aggregate",
    "ParamsError", "load_params", "toc_notebooks", "BookError", "build_book", "execute_book",
    "execute_notebook", "make_records",
]


def _tag_figures_under_the_runner() -> None:
    """Inside a kernel started by the book runner: tagged aggregate figures and the display guard."""
    import os

    if os.environ.get("SHOVIR_FIGURE_KEY"):
        from . import figures  # noqa: F401  (installs the tagging formatter on import)
        from .guard import install_display_guard

        install_display_guard()


_tag_figures_under_the_runner()
