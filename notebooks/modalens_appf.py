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
# # ModaLens Appendix F: other models (Tables 13, 14 and Table 4's second-model row)
#
# Does the report-anchoring effect belong to MedGemma, or to image-text models in general? The
# paper reruns the audit on MedGemma-4B, Qwen3.5-9B, Qwen3.5-27B and LLaVA-NeXT-Mistral-7B: the report
# effect replicates in every lineage (LLaVA-NeXT {glue:text}`mlf.paper.llava_P:.2f`% with the report
# against {glue:text}`mlf.paper.llava_A:.2f`% without),
# while no model reads the substituted image above chance on the one-question set.
#
# **What the demo profile runs.** The reference model `ref-anchored@0.5` (planted: a hashed half of the
# (report, question) pairs answer from the report, the rest from the image) stands in for a real model; the tiny random Gemma-3, LLaVA-NeXT
# (`LlavaNextForConditionalGeneration`, anyres tiling) and Qwen3.5 (`Qwen3_5ForConditionalGeneration`,
# linear and full attention, thinking disabled in the template) models run the same arms on a few
# patients, showing that each architecture's adapter, chat template and token families work end
# to end; their numbers carry no meaning. The `mimic` profile runs the paper's models.

# %% tags=["parameters"]
profile = "demo"
run_ids = None
lineage = None
six_models = None
uninstructed = None
second_model = None
reference_model = None
reference_validation = None  # the models are reference models and their planted behaviour is checked (demo)
n_draws = None
bootstrap_seed = None
reproduces_paper = None

# %%
import numpy as np

from shovir_core import book
from shovir_core.book.paper_section import paper_section
from shovir_core.protocols import modalens as ml
from shovir_core.tables import modalens as mt
from shovir_core.tables import modalens_appf as tf
from shovir_core.tables.appendix_checks import appendix_checks

runs = book.load_runs("modalens_appf", profile=profile, run_ids=run_ids)
trials = {key: run.trials for key, run in runs.items()}
for model, (kp, ka) in {**lineage, **six_models}.items():
    assert runs[kp].manifest["spec"]["model"] == model == runs[ka].manifest["spec"]["model"], model
book.glue_values("mlf", {"n_draws": n_draws, "bootstrap_seed": bootstrap_seed, "n_models": len(lineage),
                         "reference_model": reference_model, "second_model": second_model}, runs=runs)
book.glue_paper("mlf.paper.llava_P", "f.llava.P")
book.glue_paper("mlf.paper.llava_A", "f.llava.A")

# %% [markdown]
# ## Table 14: the third lineage and a scale check
#
# One-question design, "Answer with exactly Yes or No.", report present (P) and absent (A), the
# token-family and generated readouts side by side; patient-clustered intervals
# ({glue:text}`mlf.n_draws:,d` draws, seed {glue:text}`mlf.bootstrap_seed`). Format compliance is the
# share of generations opening with Yes or No; the generated answer is compared with the token family.

# %% tags=["nbval-check-output"]
t14 = tf.lineage_table({m: {"P": trials[p], "A": trials[a]} for m, (p, a) in lineage.items()},
                       n_draws=n_draws, seed=bootstrap_seed).with_runs(runs)
book.show(t14, runs=runs)

# %%
v14 = t14.values
ref = f"t14.{reference_model}"
assert v14["t14.n_cells"] == 4 * len(lineage)
for m in lineage:
    for r in ("family", "generated"):
        assert np.isclose(v14[f"t14.{m}.{r}.diff_pp"],
                          100 * (v14[f"t14.{m}.{r}.A.flip_rate"] - v14[f"t14.{m}.{r}.P.flip_rate"]), equal_nan=True)
if reference_validation:  # planted in the reference models; a real model's (or a stand-in's) answers are results
    assert v14[f"{ref}.family.P.flip_rate"] < v14[f"{ref}.family.A.flip_rate"], \
        "the report lowers image sensitivity (planted in ref-anchored@0.5; the paper, every model)"
    assert v14[f"{ref}.family.diff_lo_pp"] > 0
    assert v14[f"{ref}.compliance.P"] == v14[f"{ref}.compliance.A"] == 1.0, "the reference model always answers Yes/No"
book.glue_values("mlf", v14, runs=runs)
book.glue_paper("mlf.paper.b4_more_pp", "t4.b4.more")
book.glue_paper("mlf.paper.cases", "design.cases")
book.glue_values("mlf.ref", {k[len(ref) + 1:]: v for k, v in v14.items() if k.startswith(ref + ".")}, runs=runs)

# %% [markdown]
# With the report the reference model's answer moves on
# {glue:text}`mlf.ref.family.P.flip_rate:.2%` of substitutions, without it on
# {glue:text}`mlf.ref.family.A.flip_rate:.2%`, a paired
# {glue:text}`mlf.ref.family.diff_pp:.2f` points
# [{glue:text}`mlf.ref.family.diff_lo_pp:.2f`, {glue:text}`mlf.ref.family.diff_hi_pp:.2f`];
# the lowest format compliance over the {glue:text}`mlf.t14.n_cells` cells is
# {glue:text}`mlf.t14.min_compliance:.1%`; {glue:text}`mlf.t14.n_never_compliant` model(s) open no
# generation with Yes or No in either arm ({glue:text}`mlf.t14.never_compliant`), so their generated
# readout has no scoreable trial. The tiny models run on as few as {glue:text}`mlf.t14.min_patients`
# patients: their flip rates and intervals (including any that exclude 0) test the code path, not
# an effect, and are not read as significant.
#
# ## Table 13: the prespecified questions
#
# The one-question design asks a finding question of positive cases and the composite of negative
# ones, so a rule that always says yes to findings scores perfectly. The prespecified-question design asks
# every case the prespecified findings (the rule and its window are defined once, with Table 1 of
# the main tables: source yes-rate in [{glue:text}`mlf.six_lo:.0%`, {glue:text}`mlf.six_hi:.0%`] on
# this cohort) with generated answers; here it selects {glue:text}`mlf.t13.n_questions`
# finding(s): {glue:text}`mlf.t13.questions`.

# %% tags=["nbval-check-output"]
first_p = six_models[next(iter(six_models))][0]
spec6 = runs[first_p].manifest["spec"]
six_range = ml.six_range(spec6["dataset"])   # the one definition (Table 1 uses the same)
six = spec6.get("six_findings") or mt.six_findings(trials[first_p], lo=six_range[0], hi=six_range[1])
t13 = tf.six_questions_table({m: {"P": trials[p], "A": trials[a]} for m, (p, a) in six_models.items()},
                             six=six, n_draws=n_draws, seed=bootstrap_seed).with_runs(runs)
book.show(t13, runs=runs)

# %%
v13 = t13.values
for m in six_models:
    assert v13[f"t13.{m}.n_trials"] == len(six) * trials[six_models[m][0]]["case_id"].nunique()
r6 = f"t13.{reference_model}"
if reference_validation:  # the reference model is one of the six-question models on the demo (not on mimic)
    assert v13[f"{r6}.ba_orig_lo"] <= v13[f"{r6}.ba_orig"] <= v13[f"{r6}.ba_orig_hi"]
    assert v13[f"t13.{reference_model}.diff_pp"] > 0, "the report effect survives the change of design (planted)"
book.glue_values("mlf", v13, runs=runs)
book.glue_values("mlf", {"six_lo": six_range[0], "six_hi": six_range[1]}, runs=runs)

# %% [markdown]
# ## Table 4's second-model row
#
# The all-14 flip rate of a second model with the report, beside the primary model's on the same
# trials (the paper: MedGemma-4B flips
# {glue:text}`mlf.paper.b4_more_pp:.1f` points more than MedGemma-27B). On the demo the second
# model is `ref-anchored@0.25`, which weighs the report less than `ref-anchored@0.5` and so must
# flip more: {glue:text}`mlf.t4.second.more_pp:.2f` points
# [{glue:text}`mlf.t4.second.more_lo_pp:.2f`, {glue:text}`mlf.t4.second.more_hi_pp:.2f`].

# %% tags=["nbval-check-output"]
row = tf.model_row(trials["second_P"], trials["P"], model=second_model, n_draws=n_draws,
                   seed=bootstrap_seed).with_runs(runs)
book.show(row, runs=runs)

# %%
vr = row.values
assert vr[f"t4.{second_model}.n_trials"] == len(trials["P"])
if reference_validation:
    assert vr[f"t4.{second_model}.more_lo_pp"] > 0, "planted: less report weight, more flips with the report"
book.glue_values("mlf", vr, runs=runs)
book.glue_values("mlf.t4.second", {k.removeprefix(f"t4.{second_model}."): v for k, v in vr.items()}, runs=runs)

# %% [markdown]
# ## The second model on both designs
#
# The paper's MedGemma-4B paragraph: the same one-question cells and the all-14 unit, with
# and without the report, lowercase readout, no instruction. On the demo, `ref-anchored@0.25`: its
# report-absent answers are the CNN's, so it must flip more without the report on both designs.

# %% tags=["nbval-check-output"]
second = tf.second_model_table(trials["second_P"], trials["second_A"], model=second_model, n_draws=n_draws,
                               seed=bootstrap_seed).with_runs(runs)
book.show(second, runs=runs)

# %%
vs = second.values
for design in ("one_q", "all14"):
    k = f"f.{second_model}.{design}"
    assert np.isclose(vs[f"{k}.diff_pp"], 100 * (vs[f"{k}.A.flip_rate"] - vs[f"{k}.P.flip_rate"]))
    if reference_validation:
        assert vs[f"{k}.diff_lo_pp"] > 0, "planted: the report lowers the flip rate"
assert vs[f"f.{second_model}.all14.n_trials"] == len(trials["second_P"])
book.glue_values("mlf", vs, runs=runs)
book.glue_values("mlf.second", {k.removeprefix(f"f.{second_model}."): v for k, v in vs.items()}, runs=runs)

# %% [markdown]
# ## Without the answer instruction
#
# The paper's Qwen3.5-9B answered yes on almost every report-absent case without the instruction,
# and its first generated token was a bare yes or no on only a minority of cases, so its report
# effect is read under the instruction. The same summary for this profile's uninstructed arms
# ({glue:text}`mlf.uninstructed_model`): yes count on the source image and the share of bare
# yes/no first tokens.

# %% tags=["nbval-check-output"]
plain = tf.uninstructed_table(trials[uninstructed[1]], trials[uninstructed[2]], model=uninstructed[0]).with_runs(runs)
book.show(plain, runs=runs)

# %%
vp = plain.values
for arm in ("P", "A"):
    assert 0 <= vp[f"f.{uninstructed[0]}.plain.{arm}.yes"] <= vp[f"f.{uninstructed[0]}.plain.{arm}.n"]
    assert 0.0 <= vp[f"f.{uninstructed[0]}.plain.{arm}.bare_first_token"] <= 1.0
book.glue_values("mlf", vp, runs=runs)
book.glue("mlf.uninstructed_model", uninstructed[0], runs=runs)

# %% [markdown]
# ## The paper's numbers and their checks
#
# The audit's consistency checks of Appendix F (differences and ratios from the stated rates, the
# counts implied by rates over {glue:text}`mlf.paper.cases:,d` cases, the prespecified questions' yes-rates inside the rule), then the
# paper's values beside this run's where this run has the same model.

# %% tags=["nbval-check-output"]
checks = appendix_checks("Appendix F")
book.show(checks, runs=runs)
mine = {**v14, **v13, **vr, **vs, **vp}
# values of the paper's models this profile does not run are shown as "not run"
vs_paper, _ = paper_section("mlf", mine, tf.PAPER_KEYS, reproduces_paper=reproduces_paper, runs=runs,
                            name="ml-f-paper-vs-run", optional=("",), show_missing=True)

# %%
assert (checks["status"] == "passed").sum() >= len(checks) - 2, "the audit flags at most the known items"
assert reproduces_paper or vs_paper.values["n_missing"] == len(tf.PAPER_KEYS), "the demo has none of the paper's models"
book.glue("mlf.n_checks", int(len(checks)), runs=runs)

# %% [markdown]
# ## Records read

# %%
book.show(book.runs_table(runs), runs=runs)
