"""Appendix E: the manual-label loader, study-level application, Table 12 and the planted second reader."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import cohen_kappa_score

from shovir_core.data.mimic_manual import MANUAL_LABELS_FILE, load_manual_labels
from shovir_core.data.schema import DatasetError
from shovir_core.labeling.second_reader import simulate_second_reader, study_codes
from shovir_core.labels import CHEXPERT_CLASSES, FINDINGS_13
from shovir_core.metrics.label_agreement import (agreement_stats, expected_reader_confusion, kappa_from_counts,
                                           kappa_from_rates)
from shovir_core.tables import modalens_appe as te
from shovir_core.tables.result import TableResult

FIXTURE = Path(__file__).parent / "fixtures" / "mimic_manual"
QUESTIONS = list(FINDINGS_13) + ["composite"]


# --------------------------------------------------------------------------- loader
def test_loader_reads_the_fixture_with_its_column_layout(monkeypatch):
    m = load_manual_labels(FIXTURE / MANUAL_LABELS_FILE)
    assert list(m.columns) == list(CHEXPERT_CLASSES) and m.index.name == "study_id"
    assert len(m) == 6 and all(s.startswith("9") for s in m.index), "fixture ids are invented (prefix 9)"
    assert m.loc["90000001", "Lung Opacity"] == 1.0, "'Airspace Opacity' is read as Lung Opacity"
    assert m.loc["90000002", "Edema"] == -1.0 and np.isnan(m.loc["90000002", "Atelectasis"])
    assert load_manual_labels(FIXTURE).equals(m), "a folder finds the file by its release name"
    monkeypatch.setenv("SHOVIR_TEST_MANUAL", str(FIXTURE))
    assert load_manual_labels("${SHOVIR_TEST_MANUAL}").equals(m)
    monkeypatch.delenv("SHOVIR_TEST_MANUAL")
    with pytest.raises(DatasetError, match="unset environment variable"):
        load_manual_labels("${SHOVIR_TEST_MANUAL}")


def test_loader_errors_name_the_item(tmp_path):
    text = (FIXTURE / MANUAL_LABELS_FILE).read_text()
    with pytest.raises(DatasetError, match="has neither"):
        load_manual_labels(tmp_path)
    bad = tmp_path / "bad.csv"
    bad.write_text(text.replace("90000004,0.0", "90000004,2.0"))
    with pytest.raises(DatasetError, match=r"study '90000004', class 'Atelectasis'.*'2.0'"):
        load_manual_labels(bad)
    bad.write_text(text + "90000001,,,,,,,,,1.0,,,,,\n")
    with pytest.raises(DatasetError, match="duplicate study_id '90000001'"):
        load_manual_labels(bad)
    bad.write_text(text.replace(",Edema,", ",Oedema,"))
    with pytest.raises(DatasetError, match=r"lacks columns \['Edema'\]"):
        load_manual_labels(bad)


# --------------------------------------------------------------------------- synthetic cohort
def _cohort(n_patients: int, *, seed: int, prevalence: float = 0.25):
    """Trials of P and A arms: 2 studies per patient, one case, 14 questions; automated codes."""
    rng = np.random.default_rng(seed)
    studies, rows_p, rows_a = {}, [], []
    for i in range(n_patients):
        pid = f"9{i:06d}"
        s1, s2 = f"91{i:06d}", f"92{i:06d}"
        for s in (s1, s2):
            codes = {c: (1.0 if rng.random() < prevalence else (np.nan if rng.random() < 0.5 else 0.0))
                     for c in FINDINGS_13}
            codes["No Finding"] = 1.0 if not any(v == 1.0 for v in codes.values()) else np.nan
            studies[s] = codes
        for q in QUESTIONS:
            def target(s):
                c = studies[s]
                return float(any(c[f] == 1.0 for f in FINDINGS_13)) if q == "composite" else float(c[q] == 1.0)
            tc, td = target(s1), target(s2)
            base = {"trial_id": f"c{i}:{q}", "case_id": f"c{i}", "patient_id": pid, "finding": q,
                    "study_id": s1, "sub_study_id": s2, "target_c": tc, "target_d": td,
                    "label_changed": float(tc != td),
                    "labels_c": json.dumps({k: (None if np.isnan(v) else v) for k, v in studies[s1].items()}),
                    "labels_d": json.dumps({k: (None if np.isnan(v) else v) for k, v in studies[s2].items()})}
            # P follows the (source) report label; A reads the image's label with noise
            yes_p = tc
            yes_a_c = tc if rng.random() < 0.7 else 1 - tc
            yes_a_d = td if rng.random() < 0.7 else 1 - td
            rows_p.append({**base, "readout_c": "yes" if yes_p else "no", "readout_d": "yes" if yes_p else "no"})
            rows_a.append({**base, "readout_c": "yes" if yes_a_c else "no", "readout_d": "yes" if yes_a_d else "no"})
    return pd.DataFrame(rows_p), pd.DataFrame(rows_a)


def test_manual_targets_apply_at_study_level_and_the_composite_rule():
    p, _ = _cohort(6, seed=0)
    codes = study_codes(p)
    assert len(codes) == 12
    manual = codes.drop(index=["92000001", "91000003"])  # two pairs lose one study each
    t = te.manual_targets(p, manual, policy="u-negative")
    assert set(t["case_id"]) == {"c0", "c2", "c4", "c5"} and len(t) == 4 * 14
    same = t["manual_c"].to_numpy() == t["target_c"].to_numpy()
    assert same.all(), "manual labels equal to the automated ones give the same targets"
    flipped = manual.copy()
    flipped.loc["91000000", list(FINDINGS_13)] = 0.0
    t2 = te.manual_targets(p, flipped, policy="u-negative")
    row = t2[(t2["case_id"] == "c0") & (t2["finding"] == "composite")]
    assert row["manual_c"].item() == 0.0, "no positive manual finding -> composite no"


def test_table12_matches_hand_computation():
    p, a = _cohort(40, seed=1)
    manual = simulate_second_reader(study_codes(p), error_rate=0.1, seed=3, coverage=0.8)
    res = te.manual_label_table(p, a, manual, policy="u-negative", n_draws=300, seed=0)
    assert isinstance(res, TableResult)
    v = res.values
    t = te.manual_targets(p, manual, policy="u-negative")
    assert v["t12.n_trials"] == len(t) == 14 * v["t12.n_pairs"]
    auto = np.concatenate([t["target_c"], t["target_d"]])
    man = np.concatenate([t["manual_c"], t["manual_d"]])
    assert v["t12.agreement"] == pytest.approx((auto == man).mean())
    assert v["t12.kappa"] == pytest.approx(cohen_kappa_score(auto, man))
    assert v["t12.sensitivity"] == pytest.approx(((auto == 1) & (man == 1)).sum() / (man == 1).sum())
    assert v["t12.precision"] == pytest.approx(((auto == 1) & (man == 1)).sum() / (auto == 1).sum())
    ch = t["manual_c"] != t["manual_d"]
    assert v["t12.n_changed"] == int(ch.sum()) > 0
    ta = a.set_index("trial_id").loc[t["trial_id"]]
    yd_a = (ta["readout_d"] == "yes").to_numpy()
    assert v["t12.A.sub_agree_changed"] == pytest.approx((yd_a[ch] == t["manual_d"][ch]).mean())
    yc_p = (t["readout_c"] == "yes").to_numpy()
    assert v["t12.P.acc_manual"] == pytest.approx((yc_p == t["manual_c"]).mean())
    assert v["t12.A.yes_rate"] == pytest.approx((ta["readout_c"] == "yes").mean())
    for k in ("agreement", "kappa", "P.ba_manual", "A.sub_agree_changed"):
        assert v[f"t12.{k}_lo"] <= v[f"t12.{k}"] <= v[f"t12.{k}_hi"]
    # P copies the source label on both images: it never flips, A does
    assert v["t12.P.flip_rate_changed"] == 0.0 < v["t12.A.flip_rate_changed"]
    assert set(res.display().columns) >= {"2.5%", "97.5%"}


def test_planted_second_reader_is_recovered_and_a_wrong_rate_is_not():
    p, a = _cohort(120, seed=2)
    codes = study_codes(p)
    manual = simulate_second_reader(codes, error_rate=0.1, seed=7, coverage=0.7)
    res = te.manual_label_table(p, a, manual, policy="u-negative", n_draws=500, seed=0)
    v = res.values
    planted = te.planted_agreement(p, manual, policy="u-negative", error_rate=0.1)
    assert v["t12.agreement_lo"] <= planted["agreement"] <= v["t12.agreement_hi"]
    assert v["t12.kappa_lo"] <= planted["kappa"] <= v["t12.kappa_hi"]
    wrong = te.planted_agreement(p, manual, policy="u-negative", error_rate=0.25)
    assert not v["t12.agreement_lo"] <= wrong["agreement"] <= v["t12.agreement_hi"]
    assert not v["t12.kappa_lo"] <= wrong["kappa"] <= v["t12.kappa_hi"]
    none = simulate_second_reader(codes, error_rate=0.0, seed=7, coverage=0.7)
    assert te.manual_label_table(p, a, none, policy="u-negative", n_draws=50, seed=0).values["t12.kappa"] == 1.0


def test_expected_confusion_of_the_composite_matches_simulation():
    rng = np.random.default_rng(0)
    e, k = 0.2, 2
    # a study with k positive findings: the reader's composite is no only if both flip and no negative does
    labels = np.zeros((20000, 13))
    labels[:, :k] = 1
    read = np.where(rng.random(labels.shape) < e, 1 - labels, labels)
    p_no = 1 - read.any(axis=1).mean()
    exp = expected_reader_confusion(np.ones(1), error_rate=e, composite_of=np.array([k]))
    assert exp["fp"] == pytest.approx(p_no, abs=0.005)
    with pytest.raises(ValueError, match="error_rate"):
        expected_reader_confusion(np.ones(1), error_rate=1.5)


def test_paper_kappa_is_implied_by_the_published_rates():
    """Part E check 31: agreement 0.943, sensitivity 0.894, precision 0.773 imply κ 0.795."""
    assert kappa_from_rates(agreement=0.943, sensitivity=0.894, precision=0.773) == pytest.approx(0.795, abs=5e-4)
    s = agreement_stats(40, 10, 5, 45)
    assert s["kappa"] == pytest.approx(kappa_from_counts(40, 10, 5, 45)) and s["agreement"] == 0.85


def test_params_demo_reuse_the_tables_records_and_mimic_resolves_on_the_fixtures(tmp_path, monkeypatch):
    import shutil

    from shovir_core import protocols
    from shovir_core.params import load_params

    demo, tables = load_params("modalens_appe", "demo"), load_params("modalens_tables", "demo")
    for key in ("P", "A"):
        assert demo["runs"][key] == tables["runs"][key], "Appendix E reads the Tables 1-5 records"
    assert demo["parameters"]["manual_labels"] is None and 0 < demo["parameters"]["reader_error_rate"] < 0.5
    mimic = load_params("modalens_appe", "mimic")
    root = tmp_path / "mimic-cxr-jpg"
    shutil.copytree(Path(__file__).parent / "fixtures" / "mimic_jpg", root)
    shutil.copy(FIXTURE / MANUAL_LABELS_FILE, root / MANUAL_LABELS_FILE)
    monkeypatch.setenv("SHOVIR_MIMIC_JPG", str(root))
    for r in mimic["runs"].values():
        resolved = protocols.resolve(r["protocol"], r["spec"])
        assert resolved["dataset"] == r["spec"]["dataset"] and resolved["model"] == "medgemma-27b"
    assert len(load_manual_labels(mimic["parameters"]["manual_labels"])) == 6
