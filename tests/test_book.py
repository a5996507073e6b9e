import numpy as np
import pandas as pd
import pytest

from shovir_core import book, cli
from shovir_core.book import CredentialedDataError, assert_aggregate
from shovir_core.params import ParamsError, load_params, toc_notebooks


class _Run:
    def __init__(self, credentialed):
        self.credentialed = credentialed
        self.run_id = "p/n/abc"


def test_guard_allows_public_and_refuses_credentialed_text_and_pixels():
    text = "There is a small left pleural effusion."
    public, private = _Run(False), _Run(True)
    assert_aggregate(text, [public])
    assert_aggregate(pd.DataFrame({"report": [text]}), {"a": public})
    with pytest.raises(CredentialedDataError, match="free text"):
        assert_aggregate(text, [private])
    with pytest.raises(CredentialedDataError, match="column 'report'"):
        assert_aggregate(pd.DataFrame({"report": [text], "n": [1]}), {"a": public, "b": private})
    with pytest.raises(CredentialedDataError, match="pixel"):
        assert_aggregate(np.zeros((64, 64), np.uint8), private)
    # aggregates pass
    assert_aggregate(0.42, private)
    assert_aggregate(pd.DataFrame({"class": ["Edema"], "f1": [0.5]}), private)


def test_toc_names_the_data_notebook():
    assert toc_notebooks()[0] == "data"


def test_params_errors():
    with pytest.raises(ParamsError, match="no params file"):
        load_params("data", "no-such-profile")
    spec = load_params("data", "demo")
    assert spec["runs"]["boxes"]["protocol"] == "cohort"


def test_glue_needs_namespaced_key():
    with pytest.raises(ValueError, match="namespaced"):
        book.glue("flat", 1, runs=[])


def test_cli_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("run", "book", "records"):
        assert cmd in out


def test_cli_records_list_and_show(runs_root, capsys):
    assert cli.main(["records", "list"]) == 0
    assert "no run records" in capsys.readouterr().out
    assert cli.main(["run", "data", "-q"]) == 0
    out = capsys.readouterr().out
    assert "cohort/demo-bbox/" in out
    rid = out.split("runs/")[1].split()[0]
    assert cli.main(["records", "show", rid]) == 0
    assert '"status": "complete"' in capsys.readouterr().out
    assert cli.main(["records", "show", "bad"]) == 2


def test_cells_for_other_profiles_are_dropped_and_unglued_references_found():
    import nbformat

    from shovir_core.book.runner import _select_profile_cells, unglued_references

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("All: {glue:text}`ml.a:.2%` and {glue:}`ml.b`."),
        nbformat.v4.new_markdown_cell("Demo: {glue:text}`ml.demo_only:.1f`", metadata={"tags": ["profile:demo"]}),
        nbformat.v4.new_markdown_cell("Paper: {glue:text}`ml.paper_only`", metadata={"tags": ["profile:mimic"]}),
        nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["profile:mimic", "profile:padchest"]}),
        nbformat.v4.new_markdown_cell("Elsewhere: {glue:text}`data.ipynb::data.n:d`"),
    ])
    demo = nbformat.from_dict(nb)
    _select_profile_cells(demo, "demo")
    assert [c.source[:4] for c in demo.cells] == ["All:", "Demo", "Else"]
    padchest = nbformat.from_dict(nb)
    _select_profile_cells(padchest, "padchest")
    assert [c.cell_type for c in padchest.cells] == ["markdown", "code", "markdown"]
    assert unglued_references(demo.cells, {"ml.a", "ml.b", "ml.demo_only"}) == {}
    assert unglued_references(demo.cells, {"ml.a"}) == {0: ["ml.b"], 1: ["ml.demo_only"]}
