"""The ModaLens design tables that come from the code and the cohort, not from a model's answers.

* :func:`view_pairs_table` -- Appendix Table 7's pair composition by view: source and substitute
  view position per pair type (the paper does not match views, ModaLens §3 "Sampling the
  discordant image");
* :func:`questions_table` -- Appendix Table 8: the 14 questions in both templates (§2 and App. L) with
  their targets on the source images (yes / no per question);
* :func:`answer_token_table` -- App. I's answer-token ids: the lowercase ``yes``/``no`` ids and the
  token families (case and leading-space variants) the registry states for each model, which the
  adapters check against the tokenizer at load time (:meth:`shovir_core.models.readouts.TokenFamilies.check`).
"""
from __future__ import annotations

import pandas as pd

from .result import TableResult

__all__ = ["view_pairs_table", "questions_table", "question_rows", "answer_token_table"]


def _one_per_case(trials: pd.DataFrame) -> pd.DataFrame:
    return trials.drop_duplicates("case_id").reset_index(drop=True)


def view_pairs_table(trials: pd.DataFrame) -> TableResult:
    """Table 7's view breakdown: cases per pair type and (source view, substitute view); a blank view
    position (a frontal image kept by its view code) reads ``blank``."""
    cases = _one_per_case(trials)
    view = {side: cases[f"view_{side}"].fillna("").astype(str).str.upper().replace("", "blank") for side in "cd"}
    frame = (pd.DataFrame({"pair_type": cases["pair_type"], "view_source": view["c"], "view_substitute": view["d"]})
             .value_counts().rename("n_cases").reset_index()
             .sort_values(["pair_type", "view_source", "view_substitute"]).reset_index(drop=True))
    values = {f"{r.pair_type}.{r.view_source}.{r.view_substitute}": int(r.n_cases) for r in frame.itertuples()}
    values["n_cases"] = int(len(cases))
    values["n_same_view"] = int((view["c"] == view["d"]).sum())
    values["n_view_changed"] = int((view["c"] != view["d"]).sum())
    return TableResult(frame, values=values, index=("pair_type", "view_source", "view_substitute"),
                       metrics={"n_cases": "count"},
                       labels={"pair_type": "pair", "view_source": "source view", "view_substitute": "substitute view",
                               "n_cases": "cases"},
                       caption="Pair composition by view position (Table 7): the substitute's view is not matched.")


def question_rows() -> list[tuple[str, str, str]]:
    """The text cells of Table 8, one row per question of the all-14 design: ``(question id, default
    template, second template)`` -- public text of the paper (ModaLens §2, App. L, Table 8) that ships
    in the repository, not data. The credentialed guard treats each row, its cells read in order, as the
    project's own text (:func:`shovir_core.book.shingles.project_phrases`): a rendered table joins the
    cells, and the join ("... show pleural effusion? | Is pleural effusion present ...") makes windows
    ("pleural effusion is") that reports also hold."""
    from ..protocols.modalens import COMPOSITE, FINDINGS_13, question_id, question_text

    return [(question_id(f), question_text(f), question_text(f, template="alt")) for f in (*FINDINGS_13, COMPOSITE)]


def questions_table(trials: pd.DataFrame) -> TableResult:
    """Table 8: each question of the all-14 design in the default and the second template, with the
    number of cases whose source-image target is yes and no (primary label policy)."""
    cases = trials.drop_duplicates(["case_id", "question_id"])
    rows, values = [], {}
    for qid, question, question_l in question_rows():
        t = cases[cases["question_id"] == qid]["target_c"].astype(float)
        row = {"question_id": qid, "question": question, "question_l": question_l,
               "target_yes": int((t == 1).sum()), "target_no": int((t == 0).sum())}
        rows.append(row)
        values.update({f"{qid}.target_yes": row["target_yes"], f"{qid}.target_no": row["target_no"]})
    values["n_questions"] = len(rows)
    return TableResult(pd.DataFrame(rows), values=values, index=("question_id",),
                       metrics={"target_yes": "count", "target_no": "count"},
                       labels={"question_id": "question", "question": "default template",
                               "question_l": "second template (App. L)", "target_yes": "target yes (cases)",
                               "target_no": "target no (cases)"},
                       caption="The questions (Table 8) and their targets on the source images.")


def answer_token_table(*, paper: str = "ModaLens") -> TableResult:
    """App. I: per registered model of ``paper`` with stated answer tokens, the lowercase ids and the
    families, as the registry states them (checked against the tokenizer when a model loads)."""
    from ..models.registry import REGISTRY

    rows = []
    for name, spec in REGISTRY.items():
        fam = spec.families
        if spec.paper.lower() != paper.lower() or not fam:
            continue
        rows.append({"model": name, "yes_id": fam.get("yes_id", fam["yes_family"][0]),
                     "no_id": fam.get("no_id", fam["no_family"][0]),
                     "yes_family": ", ".join(str(i) for i in fam["yes_family"]),
                     "no_family": ", ".join(str(i) for i in fam["no_family"])})
    frame = pd.DataFrame(rows, columns=["model", "yes_id", "no_id", "yes_family", "no_family"])
    values = {f"{r.model}.yes_id": int(r.yes_id) for r in frame.itertuples()}
    values.update({f"{r.model}.no_id": int(r.no_id) for r in frame.itertuples()})
    values["n_models"] = int(len(frame))
    return TableResult(frame, values=values, index=("model",),
                       labels={"model": "model", "yes_id": "yes (lowercase)", "no_id": "no (lowercase)",
                               "yes_family": "yes family (yes, Yes, ' yes', ' Yes')",
                               "no_family": "no family (no, No, ' no', ' No')"},
                       caption="Answer-token ids of the readouts (App. I), as the model registry states them.")
