"""The project's errors: one base class, and how a command reports an error.

Every exception the project raises for something the user can fix (a spec, a params file, a
record, a dataset, missing weights, a credentialed-data guard) derives from :class:`ShovirError`.
Each also keeps the builtin base it had (``SpecError`` is still a ``ValueError``, ``RecordError``
a ``RuntimeError``), so ``except ValueError`` callers keep working.

:func:`run_guarded` (used by ``shovir`` and the training commands) prints a ``ShovirError`` as one
line ``<prog>: error: <message>`` with exit status 2; an :class:`OSError` (a file, a disk, a
permission of this machine) likewise. Anything else is a bug of the project: its traceback is
printed, followed by one line that says so (exit status 1). A ``ShovirError`` raised *from* such an
exception (a record that failed because of a bug) is reported as a bug too.
"""
from __future__ import annotations

import sys
import traceback

__all__ = ["ShovirError", "UsageError", "EXIT_USER_ERROR", "EXIT_BUG", "error_line", "is_user_error",
           "run_guarded"]

EXIT_USER_ERROR = 2
"""Exit status of a command stopped by a user error (argparse's own usage errors use it too)."""
EXIT_BUG = 1
"""Exit status of a command stopped by a bug (an exception that is not a :class:`ShovirError`)."""


class ShovirError(Exception):
    """Base of every error the user can fix; ``shovir`` reports it in one line (exit status 2)."""


class UsageError(ShovirError, ValueError):
    """A command-line value that is not valid (a run id, a ``--sbatch`` item, ...)."""


def error_line(exc: BaseException) -> str:
    """One line for an error: its message (a KeyError's without the quotes), whitespace collapsed.

    >>> error_line(KeyError("no such key"))
    'no such key'
    >>> error_line(UsageError("bad\\n   value"))
    'bad value'
    """
    msg = exc.args[0] if isinstance(exc, KeyError) and len(exc.args) == 1 else str(exc)
    return " ".join(str(msg).split()) or type(exc).__name__


def is_user_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the user's to fix: a :class:`ShovirError` or an :class:`OSError`, and not
    raised from (``raise ... from``) an exception that is neither (that one is a bug).

    >>> is_user_error(UsageError("x")), is_user_error(KeyError("x")), is_user_error(FileNotFoundError("x"))
    (True, False, True)
    """
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if _is_remote_traceback(exc):  # a worker process's traceback, attached by concurrent.futures: no cause
            return True
        if not isinstance(exc, (ShovirError, OSError)):
            return False
        exc = exc.__cause__
    return True


def _is_remote_traceback(exc: BaseException) -> bool:
    """Whether ``exc`` is the text of a worker's traceback that ``concurrent.futures`` sets as the
    ``__cause__`` of an exception it re-raises from a process pool (not an exception of its own)."""
    return type(exc).__name__ == "_RemoteTraceback" and type(exc).__module__ == "concurrent.futures.process"


def run_guarded(func, *args, prog: str = "shovir", debug: bool = False) -> int:
    """Call ``func(*args)`` and return its exit status, reporting what it raises.

    A user error (:func:`is_user_error`) prints ``<prog>: error: <one line>`` and returns
    :data:`EXIT_USER_ERROR`; any other exception prints its traceback and a line saying it is a bug
    of the project, and returns :data:`EXIT_BUG`. With ``debug`` every exception propagates.
    Ctrl-C says how to resume (exit status 130).
    """
    if debug:
        return int(func(*args) or 0)
    try:
        return int(func(*args) or 0)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; trials already written are kept: run the same command again to resume",
              file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - sorted into user errors and bugs just below
        if is_user_error(exc):
            print(f"{prog}: error: {error_line(exc)}", file=sys.stderr)
            return EXIT_USER_ERROR
        traceback.print_exc(file=sys.stderr)
        print(f"{prog}: internal error ({type(exc).__name__}): {error_line(exc)}; this is a bug of the project, "
              "please report it with the traceback above", file=sys.stderr)
        return EXIT_BUG
