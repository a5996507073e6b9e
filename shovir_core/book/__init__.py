"""The book: notebook runner (jupytext + papermill), glue helpers, credentialed-data guard."""
from ..params import load_runs
from .glue import GLUE_LOG_ENV, glue, glue_values, runs_table, show
from .guard import CredentialedDataError, assert_aggregate
from .runner import BookError, build_book, execute_book, execute_notebook, make_records

__all__ = [
    "glue", "glue_values", "GLUE_LOG_ENV", "show", "load_runs", "runs_table", "CredentialedDataError", "assert_aggregate",
    "BookError", "build_book", "execute_book",
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
