# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # ModaLens §4.2-4.3: what each input adds, and how much of the agreement is chance (Tables 20-23, 10, 32)
#
# The modality ablation asks the same questions with an input removed: image + report + question
# (full), report + question, image + question, question only. The image's contribution is the
# balanced-accuracy gain from adding it, without the report (image + question − question) and with
# it (full − report + question); their difference is the interaction. The paper finds that for
# MedGemma-27B the image helps without the report
# (+{glue:text}`ml.abl.paper.t20.pooled.image_without:.3f` pooled) and hurts with it
# ({glue:text}`ml.abl.paper.t20.pooled.image_with:.3f`), an interaction of
# {glue:text}`ml.abl.paper.t20.pooled.interaction:.3f`. §4.3 reads the unchanged-answer rate as the
# agreement of the answers on the two images: high agreement can be the agreement a responder
# reaches from its yes/no marginal alone (the response-bias floor p_yes² + p_no²), which Cohen's κ
# corrects for (support devices: agreement {glue:text}`ml.abl.paper.pf.support_devices.agreement_P:.3f`,
# κ {glue:text}`ml.abl.paper.pf.support_devices.kappa_P:.3f`).
#
# **What the demo profile runs.** The 64-px NIH cohort with **template reports** and one record per
# cell of the reference model `ref-anchored@0.5`. It then validates the ablation with reference
# models whose dependence on each input is known by construction: `ref-blind-prior` and
# `ref-report-reader` never read the image, so every image effect must be exactly 0, no swap may
# flip them, and their chance agreement must equal the floor; `ref-image-classifier` never reads the
# report, so report + question must equal question only.

# %% tags=["parameters"]
profile = "demo"
run_ids = None
primary_model = None
n_draws_primary = None
n_draws = None
bootstrap_seed = None
reproduces_paper = None

# %%
import numpy as np
import pandas as pd

from shovir_core import book
from shovir_core.metrics.arms import answers
from shovir_core.tables import modalens_ablation as ab
from shovir_core.book.paper_section import paper_section

runs = book.load_runs("modalens_ablation", profile=profile, run_ids=run_ids)
trials = {key: run.trials for key, run in runs.items()}
cells = {"full": trials["full"], "report+q": trials["report_q"], "image+q": trials["image_q"], "q": trials["q"]}
primary_runs = {k: runs[k] for k in ("full", "report_q", "image_q", "q")}
book.glue_values("ml.abl", {"n_draws_primary": n_draws_primary, "n_draws": n_draws,
                            "n_cases": int(trials["full"]["case_id"].nunique())}, runs=primary_runs)

# %% [markdown]
# ## Table 20: the 2×2 cells, all questions
#
# Balanced accuracy of the answer on the original image against the source study's label, pooled
# over trials and macro-averaged over the {glue:text}`ml.abl.t20.n_findings` questions, with patient-clustered intervals
# ({glue:text}`ml.abl.n_draws` draws; every cell, finding and difference inside each draw).

# %% tags=["nbval-check-output"]
t20 = ab.modality_ablation(cells, n_draws=n_draws, seed=bootstrap_seed).with_runs(primary_runs)
book.show(t20.drop(["key"]), runs=primary_runs)

# %%
v20 = t20.values
assert v20["t20.point_matches_metrics"], "bootstrap point estimates = metrics.modality_interaction"
for avg in ("pooled", "macro"):
    assert np.isclose(v20[f"t20.{avg}.interaction"], v20[f"t20.{avg}.image_with"] - v20[f"t20.{avg}.image_without"])
    for k in ("full", "report_q", "image_q", "q", "image_without", "image_with", "interaction"):
        assert v20[f"t20.{avg}.{k}_lo"] - 1e-12 <= v20[f"t20.{avg}.{k}"] <= v20[f"t20.{avg}.{k}_hi"] + 1e-12, (avg, k)
assert v20["t20.n_trials"] == 14 * int(trials["full"]["case_id"].nunique())
assert v20["t20.n_macro_findings"] + v20["t20.n_ba_undefined"] == v20["t20.n_findings"]
# question only sees no case input: where it answers every finding the same way throughout, its
# balanced accuracy is exactly 0.5 on each finding with both classes, so the macro average is 0.5
q_yes = pd.Series(answers(trials["q"], "lowercase")[0]).groupby(trials["q"]["finding"].to_numpy()).nunique()
if (q_yes == 1).all():
    assert np.isclose(v20["t20.macro.q"], 0.5) and np.isclose(v20["t20.macro.q_lo"], 0.5), \
        "a constant responder has balanced accuracy 0.5 wherever it is defined"
book.glue_values("ml.abl", v20, runs=primary_runs)

# %% [markdown]
# The macro average is over the {glue:text}`ml.abl.t20.n_macro_findings` questions whose labels in
# this cohort include both classes; balanced accuracy is undefined without positives (or without
# negatives), so the per-finding table shows – and the average leaves out: {glue:text}`ml.abl.t20.ba_undefined`
# (the same rule inside every bootstrap draw).
#
# Without the report the image adds {glue:text}`ml.abl.t20.pooled.image_without:.3f` balanced accuracy
# [{glue:text}`ml.abl.t20.pooled.image_without_lo:.3f`, {glue:text}`ml.abl.t20.pooled.image_without_hi:.3f`];
# with it {glue:text}`ml.abl.t20.pooled.image_with:.3f`, an interaction of
# {glue:text}`ml.abl.t20.pooled.interaction:.3f` [{glue:text}`ml.abl.t20.pooled.interaction_lo:.3f`,
# {glue:text}`ml.abl.t20.pooled.interaction_hi:.3f`] (macro: {glue:text}`ml.abl.t20.macro.interaction:.3f`).
# Report + question is the best cell on {glue:text}`ml.abl.t20.report_best_n` of
# {glue:text}`ml.abl.t20.n_findings` questions.
#
# ## Table 15 (modality cells): the finding-specific questions
#
# The same cells on the {glue:text}`ml.abl.t15.n_findings` finding-specific questions (the composite left out).

# %% tags=["nbval-check-output"]
t15 = ab.modality_ablation(cells, n_draws=n_draws, seed=bootstrap_seed, design="f13", key="t15").with_runs(primary_runs)
book.show(t15.drop(["key"]), runs=primary_runs)

# %%
v15 = t15.values
assert v15["t15.point_matches_metrics"] and v15["t15.n_trials"] == 13 * int(trials["full"]["case_id"].nunique())
book.glue_values("ml.abl", v15, runs=primary_runs)

# %% [markdown]
# ## Table 23: one question per case
#
# The case's primary labelled finding, or the composite question with target no; accuracy (as
# the paper reports it for this design) with {glue:text}`ml.abl.n_draws_primary` draws.

# %% tags=["nbval-check-output"]
t23 = ab.one_question_ablation(cells, n_draws=n_draws_primary, seed=bootstrap_seed).with_runs(primary_runs)
book.show(t23.drop(["key"]), runs=primary_runs)

# %%
v23 = t23.values
assert np.isclose(v23["t23.image_adds"], v23["t23.full"] - v23["t23.report_q"])
assert v23["t23.n_trials"] == v23["t23.n_target_yes"] + v23["t23.n_target_no"] == int(trials["full"]["case_id"].nunique())
if primary_model.startswith("ref-anchored@"):
    # planted: a hashed half of the pairs answers from the report, which states every label
    assert v23["t23.report_q"] > v23["t23.q"] + 0.3 and v23["t23.full"] > v23["t23.image_q"] + 0.3, v23
book.glue_values("ml.abl", v23, runs=primary_runs)

# %% [markdown]
# On one question per case the image adds {glue:text}`ml.abl.t23.image_adds:.3f` accuracy to report +
# question [{glue:text}`ml.abl.t23.image_adds_lo:.3f`, {glue:text}`ml.abl.t23.image_adds_hi:.3f`]
# (paper: {glue:text}`ml.abl.paper.t23.image_adds:.3f`).
#
# ## Per finding: flip rate, agreement, κ and the response-bias floor (Tables 10, 21, 22, 32)
#
# Agreement is the share of trials whose answer is the same on both images (1 − flip rate); the
# chance agreement p_e comes from the two images' marginals, the floor p_yes² + p_no² from the
# pooled answers of both images; κ = (agreement − p_e) / (1 − p_e) is undefined (–) where the
# answers never vary. Image-only sensitivity and specificity are the image + question cell on the
# original image (Table 21); the generated-answer flip rates come from the instructed arms
# ("Answer with exactly Yes or No.", Table 22).

# %% tags=["nbval-check-output"]
instructed_runs = {**primary_runs, "P_instr": runs["P_instr"], "A_instr": runs["A_instr"]}
pf = ab.per_finding_table(cells, instructed={"P": trials["P_instr"], "A": trials["A_instr"]}).with_runs(instructed_runs)
book.show(pf.select(ab.AGREEMENT_COLUMNS), runs=instructed_runs)

# %% tags=["nbval-check-output"]
book.show(pf.drop(ab.AGREEMENT_COLUMNS), runs=instructed_runs)

# %%
f = pf.frame
for arm in ("P", "A"):
    assert np.allclose(f[f"agreement_{arm}"], 1 - f[f"fr_{arm}"])
    assert (f[f"floor_{arm}"] >= 0.5 - 1e-12).all() and (f[f"floor_{arm}"] <= 1 + 1e-12).all(), "p² + (1 − p)² ∈ [0.5, 1]"
    undefined = f[f"chance_{arm}"] >= 1 - 1e-12
    assert f.loc[undefined, f"kappa_{arm}"].isna().all() and f.loc[~undefined, f"kappa_{arm}"].notna().all()
vpf = pf.values
assert np.isclose(vpf["pf.P.agreement_pooled"], 1 - vpf["pf.P.fr_pooled"])
book.glue_values("ml.abl", vpf, runs=instructed_runs)

# %% [markdown]
# With the report the answers agree across the two images on {glue:text}`ml.abl.pf.P.agreement_pooled:.3f`
# of trials (paper: {glue:text}`ml.abl.paper.pf.P.agreement_pooled:.3f`); per finding the floor runs
# from {glue:text}`ml.abl.pf.P.floor_min:.3f` to {glue:text}`ml.abl.pf.P.floor_max:.3f`, so a high
# agreement is partly the marginal's doing.
#
# ## Validation: models whose inputs are known
#
# The 2×2 cells of each reference model on a {glue:text}`ml.abl.validation.n_patients`-patient
# subset ({glue:text}`ml.abl.validation.n_trials` all-14 trials per cell). By construction
# `ref-blind-prior` reads neither image nor report and `ref-report-reader` reads only the report:
# every image effect and the interaction must be exactly 0, no cell may flip, the two images'
# marginals coincide so the chance agreement equals the floor p_yes² + p_no², and wherever the
# answers vary κ = 1 (where they are constant, agreement = floor = chance = 1 and κ is undefined).
# `ref-image-classifier` reads only the image: report + question must give the answers of question
# only, and the full prompt those of image + question, so both report effects are exactly 0.

# %% tags=["nbval-check-output"]
has_validation = "blind_full" in trials
validation = {}
if has_validation:
    for name, pre in (("ref-blind-prior", "blind_"), ("ref-report-reader", "reader_"),
                      ("ref-image-classifier", "classifier_")):
        vcells = {"full": trials[pre + "full"], "report+q": trials[pre + "report_q"],
                  "image+q": trials[pre + "image_q"], "q": trials[pre + "q"]}
        validation[name] = ab.validation_row(vcells, n_draws=200, seed=bootstrap_seed)
    vtable = pd.DataFrame(validation).T
    book.show(vtable, runs=runs)

# %%
if has_validation:
    for name in ("ref-blind-prior", "ref-report-reader"):
        v = validation[name]
        for k in ("pooled.image_without", "pooled.image_with", "pooled.interaction", "macro.image_without",
                  "macro.image_with", "macro.interaction"):
            assert v[k] == 0.0, (name, k, v[k])
        assert v["max_flip_rate"] == 0.0, f"{name}: no swap flips an image-blind model"
        assert v["same_report"] and v["same_no_report"], f"{name}: the image changes no answer"
        assert v["chance_equals_floor"], f"{name}: equal marginals, so p_e = p_yes² + p_no²"
        assert v["constant_kappa_undefined"] and v["kappa_one_where_varying"], name
    assert validation["ref-blind-prior"]["n_constant"] == validation["ref-blind-prior"]["n_findings"], \
        "the blind prior answers every finding the same way on every trial"
    c = validation["ref-image-classifier"]
    assert c["same_without_image"] and c["same_with_image"], "report + question = question only; full = image + question"
    assert c["pooled.report_without_image"] == 0.0 and c["pooled.report_with_image"] == 0.0
    assert c["pooled.interaction"] == 0.0 and c["macro.interaction"] == 0.0
    assert c["max_flip_rate"] > 0.0, "the classifier reads the image, so some swap flips it"
    book.glue("ml.abl.validation.n_trials", int(validation["ref-blind-prior"]["n_trials"]), runs=runs)
    book.glue("ml.abl.validation.n_patients", int(trials["blind_full"]["patient_id"].nunique()), runs=runs)
    book.glue("ml.abl.validation.classifier.image_without",
              validation["ref-image-classifier"]["pooled.image_without"], runs=runs)
    book.glue("ml.abl.validation.reader.n_constant", validation["ref-report-reader"]["n_constant"], runs=runs)

# %% [markdown]
# The reference models behave as constructed: the image-blind models have image effects, interactions and flip
# rates of exactly 0, with κ = 1 wherever their answers vary and undefined on the
# {glue:text}`ml.abl.validation.reader.n_constant` questions the report reader answers the same way
# throughout; the image classifier's report effects are exactly 0 while the image adds
# {glue:text}`ml.abl.validation.classifier.image_without:.3f` balanced accuracy.
#
# ## The paper's consistency checks beside this run

# %% tags=["nbval-check-output"]
checks = ab.part_e({**v20, **v15, **v23, **vpf}).with_runs(instructed_runs)
book.show(checks.frame.set_index("check"), runs=instructed_runs)

# %%
assert checks.values["part_e.run_holds"], "every identity the paper relies on holds on this run"
book.glue_values("ml.abl", checks.values, runs=instructed_runs)

# %% tags=["nbval-check-output"]
# per-finding rows (pf.) exist only for findings the run's cohort asks about (counted: n_missing)
vs_paper, _ = paper_section("ml.abl", {**v20, **v15, **v23, **vpf}, ab.PAPER_KEYS, reproduces_paper=reproduces_paper,
                            runs=instructed_runs, name="ml-abl-paper-vs-run", optional=("pf.",),
                            must_hold=("t20.macro.interaction",))

# %% [markdown]
# All {glue:text}`ml.abl.part_e.n` identities hold on this run. In the demo profile model, data and
# reports differ from the paper's, so the paper column is context, not a replication.
#
# ## Records read

# %%
book.show(book.runs_table(runs), runs=runs)
