"""One error base: every exception class of the package derives from ``ShovirError``, which the
command line reports in one line (exit status 2); anything else is a bug (traceback, exit status 1)."""
from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import shovir_core
from shovir_core import errors
from shovir_core.errors import ShovirError, UsageError, is_user_error, run_guarded


def _exception_classes():
    out = {}
    for info in pkgutil.walk_packages(shovir_core.__path__, "shovir_core."):
        mod = importlib.import_module(info.name)
        for name, obj in vars(mod).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name:
                out[f"{info.name}.{name}"] = obj
    return out


def test_every_project_exception_is_a_shovir_error():
    classes = _exception_classes()
    assert len(classes) >= 18, sorted(classes)  # SpecError, RecordError, DatasetError, BookError, ...
    assert [name for name, cls in classes.items() if not issubclass(cls, ShovirError)] == []
    # each keeps its builtin base, so `except ValueError` callers keep working
    from shovir_core.protocols.spec import SpecError
    from shovir_core.records import RecordError

    assert issubclass(SpecError, ValueError) and issubclass(RecordError, RuntimeError)


def _raises(exc):
    def func():
        raise exc
    return func


def test_a_user_error_is_one_line_with_status_2(capsys):
    assert run_guarded(_raises(UsageError("bad   run id\n 'x'")), prog="p") == errors.EXIT_USER_ERROR == 2
    assert capsys.readouterr().err == "p: error: bad run id 'x'\n"
    assert run_guarded(_raises(FileNotFoundError("no file y")), prog="p") == 2  # this machine's files
    assert capsys.readouterr().err == "p: error: no file y\n"


@pytest.mark.parametrize("exc", [KeyError("k"), TypeError("t"), ValueError("v"), ZeroDivisionError()])
def test_anything_else_is_a_bug_with_its_traceback(capsys, exc):
    assert run_guarded(_raises(exc), prog="p") == errors.EXIT_BUG == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "Traceback (most recent call last):"
    assert err[-1].startswith(f"p: internal error ({type(exc).__name__})") and "this is a bug" in err[-1]


def test_debug_lets_everything_propagate():
    with pytest.raises(UsageError):
        run_guarded(_raises(UsageError("x")), debug=True)
    assert run_guarded(lambda: 0, debug=True) == 0


def test_user_error_chain():
    try:
        try:
            raise KeyError("k")
        except KeyError as inner:
            raise ShovirError("wrapped") from inner
    except ShovirError as exc:
        assert not is_user_error(exc)
    try:
        try:
            raise OSError("disk full")
        except OSError as inner:
            raise ShovirError("wrapped") from inner
    except ShovirError as exc:
        assert is_user_error(exc)


def _fail_in_worker(cls):
    raise cls("the notebook failed in a cell")


def test_an_error_raised_in_a_worker_process_keeps_its_kind():
    """``concurrent.futures`` re-raises a worker's exception with the worker's traceback text as its
    ``__cause__``: a user error from a book worker stays a user error (one line), a bug stays a bug."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        for cls, user in ((UsageError, True), (KeyError, False)):
            with pytest.raises(cls) as caught:
                pool.submit(_fail_in_worker, cls).result()
            assert type(caught.value.__cause__).__name__ == "_RemoteTraceback"
            assert is_user_error(caught.value) is user
