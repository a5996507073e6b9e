"""The ``audit`` protocol writes the audit into a run record; the audit chapters read it."""
from __future__ import annotations

import pytest
import yaml

from shovir_core import papers, paths, protocols
from shovir_core.protocols import audit as audit_protocol


def test_resolve_spec_hashes_data_and_code():
    spec = protocols.resolve("audit", {"paper": "shovir"})
    assert spec == {"paper": "shovir", "data_sha256": papers.data_sha256("shovir"),
                    "engine_sha256": papers.engine_sha256()}
    assert protocols.resolve("audit", {"paper": "modalens"})["data_sha256"] != spec["data_sha256"]
    with pytest.raises(ValueError, match="paper"):
        protocols.resolve("audit", {})
    with pytest.raises(ValueError, match=r"unknown key\(s\)"):
        protocols.resolve("audit", {"paper": "shovir", "dataset": "demo"})


def test_run_writes_one_row_per_check(runs_root):
    run = protocols.run("audit", "shovir", {"paper": "shovir"}, progress=False)
    expected = papers.audit("shovir")
    trials = run.trials
    assert run.status == "complete" and not run.credentialed
    assert list(trials["trial_id"]) == list(expected["id"]) == list(trials["check_id"])
    assert (trials["status"].to_numpy() == expected["status"].to_numpy()).all()
    counts = run.manifest["counts"]
    assert counts["n_checks"] == len(expected)
    assert counts["n_flagged"] == int((expected["status"] == "flagged").sum())
    assert counts["n_values"] == len(papers.load_values("shovir"))
    assert run.manifest["spec"]["data_sha256"] == papers.data_sha256("shovir")
    again = protocols.run("audit", "shovir", {"paper": "shovir"}, progress=False)
    assert again.path == run.path


def test_execute_refuses_a_stale_spec(runs_root):
    spec = {**audit_protocol.resolve_spec({"paper": "modalens"}), "data_sha256": "0" * 64}
    with pytest.raises(RuntimeError, match="changed"):
        audit_protocol.execute("modalens", spec, progress=False)


@pytest.mark.parametrize("paper", sorted(papers.PAPERS))
def test_params_and_notebook(paper):
    notebook = f"audit_{paper}"
    assert (paths.notebooks_root() / f"{notebook}.py").is_file()
    source = (paths.notebooks_root() / f"{notebook}.py").read_text(encoding="utf-8")
    assert "def " not in source and "class " not in source
    assert f'book.load_runs("{notebook}"' in source
    for profile in ("demo", "mimic", "padchest"):
        params = yaml.safe_load((paths.params_root() / notebook / f"{profile}.yaml").read_text(encoding="utf-8"))
        assert params["runs"] == {"audit": {"protocol": "audit", "name": paper, "spec": {"paper": paper}}}


def test_execute_reads_the_papers_files_again(runs_root, monkeypatch):
    """A data file edited after the values were loaded (and lru-cached) is read again by execute,
    so the record holds the audit of the files whose hash its spec pins."""
    from shovir_core.papers import values as values_module

    assert papers.audit("modalens").set_index("id").loc["modalens.t4.acc_orig", "status"] == "passed"
    original = values_module._read

    def edited(name: str) -> str:  # the user edits one published count
        text = original(name)
        return text.replace("value: 29029,", "value: 29200,") if name == "modalens.yaml" else text

    monkeypatch.setattr(values_module, "_read", edited)
    spec = audit_protocol.resolve_spec({"paper": "modalens"})
    run = audit_protocol.execute("edited", spec, progress=False)
    row = run.trials.set_index("check_id").loc["modalens.t4.acc_orig"]
    assert row["status"] == "flagged", "execute audited the edited values, not the cached ones"
    monkeypatch.setattr(values_module, "_read", original)
    papers.load_values.cache_clear()  # leave the unedited values for the other tests
