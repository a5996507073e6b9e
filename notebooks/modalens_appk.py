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
# # ModaLens Appendix K: an image classifier as a surrogate label source (Table 24)
#
# The label-changed split of the main text says whether the source and substitute studies' *reports* disagree. An
# image classifier asks whether the *images* do: on trials where the classifier predicts a change
# between the source and the substitute image, a model that reads the image should flip far more
# often than where it predicts preservation. The paper uses TorchXRayVision's CheXpert DenseNet
# ({glue:text}`mlk.paper.trials:,d` trials on
# {glue:text}`mlk.paper.questions` questions with a head) and finds the report-absent
# arm flipping about {glue:text}`mlk.paper.a_change_ratio` times as often on predicted changes as on predicted
# preservations.
#
# **What the demo profile runs.** The surrogate is the project's reference CNN
# (`ref-image-classifier`) with its own operating points (its training class priors), not
# TorchXRayVision; its scores are operating-point normalised as the paper's are. The model is
# `ref-anchored@0.5`, whose planted behaviour is that the report-absent answer is the CNN's call and
# that with the report present a hashed half of the (report, question) pairs is answered from the
# report alone and the other half exactly as without it, from the CNN (never a mixture). The
# surrogate shares that CNN, so both arms' flips concentrate on predicted changes; the chapter
# asserts that the report-absent arm's concentration (change − preservation) is larger, with an
# interval above zero.

# %% tags=["parameters"]
profile = "demo"
run_ids = None
threshold = None
band = None
n_draws = None
bootstrap_seed = None
reproduces_paper = None

# %%
from shovir_core import book
from shovir_core.book.paper_section import paper_section
from shovir_core.tables import modalens_appk as tk
from shovir_core.tables.appendix_checks import appendix_checks

runs = book.load_runs("modalens_appk", profile=profile, run_ids=run_ids)
present, absent = runs["P"].trials, runs["A"].trials
scores = tk.record_scores(runs["scores"].trials)  # the surrogate's scores, made once into a record
image_ids = sorted(set(present["image_id"]) | set(present["sub_image_id"]))
assert set(image_ids) <= set(scores["normalised"]), "the score record covers every shown image"
book.glue_values("mlk", {"threshold": threshold, "band": band, "n_draws": n_draws, "n_images": len(image_ids),
                         "surrogate": runs["scores"].manifest["counts"]["surrogate"]}, runs=runs)
book.glue_paper("mlk.paper.trials", "k.trials")
book.glue_paper("mlk.paper.questions", "k.questions")
book.glue_paper("mlk.paper.auroc_lo", "k.auroc_lo")
book.glue_paper("mlk.paper.auroc_hi", "k.auroc_hi")
book.glue_paper("mlk.paper.a_change_ratio", "k.A_change_vs_preserve")

# %% [markdown]
# ## Table 24: flip rates on predicted changes and preservations
#
# The primary rule calls a finding present when the operating-point-normalised score is at least
# {glue:text}`mlk.threshold` (where the normalisation puts each head's operating point) and excludes a trial
# when either image lies within ±{glue:text}`mlk.band` of it; questions
# without a head lie outside the denominator. Scores for {glue:text}`mlk.n_images:,d` shown images;
# patient-clustered intervals ({glue:text}`mlk.n_draws:,d` draws).

# %% tags=["nbval-check-output"]
primary = tk.surrogate_table(present, absent, scores["normalised"], threshold=threshold, band=band, n_draws=n_draws,
                             seed=bootstrap_seed, key="t24").with_runs(runs)
raw = tk.surrogate_table(present, absent, scores["raw"], threshold=threshold, band=band, n_draws=n_draws,
                         seed=bootstrap_seed, key="t24raw").with_runs(runs)
book.show(primary, runs=runs)
book.show(raw, runs=runs)

# %%
v, vr = primary.values, raw.values
for t, k in ((v, "t24"), (vr, "t24raw")):
    assert t[f"{k}.n_change"] + t[f"{k}.n_preserve"] + t[f"{k}.n_excluded"] == t[f"{k}.n_trials"]
    assert t[f"{k}.n_trials"] + t[f"{k}.n_unmapped"] == len(present)
assert v["t24.A.diff_lo_pp"] > 0, "A flips more on predicted changes than on preservations"
if not reproduces_paper:
    assert v["t24.a_minus_p_lo_pp"] > 0, "planted: the report-absent answer is the CNN's call, P is half report"
book.glue_values("mlk", {**v, **vr}, runs=runs)

# %% [markdown]
# Without the report the answer flips on {glue:text}`mlk.t24.A.fr_change:.2%` of the
# {glue:text}`mlk.t24.n_change:,d` predicted changes and {glue:text}`mlk.t24.A.fr_preserve:.2%` of the
# {glue:text}`mlk.t24.n_preserve:,d` preservations ({glue:text}`mlk.t24.n_excluded:,d` excluded); with
# the report, {glue:text}`mlk.t24.P.fr_change:.2%` and {glue:text}`mlk.t24.P.fr_preserve:.2%`. The
# report-absent concentration exceeds the report-present one by {glue:text}`mlk.t24.a_minus_p_pp:.2f`
# points [{glue:text}`mlk.t24.a_minus_p_lo_pp:.2f`, {glue:text}`mlk.t24.a_minus_p_hi_pp:.2f`]. The
# report-derived split on the same trials: {glue:text}`mlk.t24.A.fr_label_changed:.2%` (label changed)
# against {glue:text}`mlk.t24.A.fr_label_unchanged:.2%` (unchanged) without the report.
#
# ## The surrogate against the report labels
#
# Per question, the AUROC of the surrogate's score against the source images' report labels and
# its positive-call rate beside the prevalence (the paper: AUROC
# {glue:text}`mlk.paper.auroc_lo:.2f`–{glue:text}`mlk.paper.auroc_hi:.2f`, call rates far above
# prevalence).

# %% tags=["nbval-check-output"]
heads = tk.head_validity(present, scores["normalised"], threshold=threshold).with_runs(runs)
book.show(heads, runs=runs)
book.glue_values("mlk.heads", heads.values, runs=runs)

# %% [markdown]
# ## The paper's numbers and their checks

# %% tags=["nbval-check-output"]
checks = appendix_checks("Appendix K")
book.show(checks, runs=runs)

# %%
assert (checks["status"] == "passed").all()

# %% [markdown]
# The paper's Table 24 and App. K values beside this run's (judged only where the profile runs the paper's
# model, data and classifier).

# %% tags=["nbval-check-output"]
vs_paper, _ = paper_section("mlk", {**v, **vr, "n_images": len(image_ids)}, tk.PAPER_KEYS,
                            reproduces_paper=reproduces_paper, runs=runs, name="ml-k-paper-vs-run")

# %% [markdown]
# ## Records read

# %%
book.show(book.runs_table(runs), runs=runs)
