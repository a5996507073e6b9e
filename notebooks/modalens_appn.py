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
# # ModaLens Appendix N: where in the network the report wins (logit lens, attention knockout)
#
# ModaLens Appendix N asks where, inside the decoder, the answer stops depending on the image when
# the report is in the prompt. The logit lens (N.1) reads the answer position of every layer through
# the final norm and the unembedding of the answer tokens (`yes`, `no`); the per-layer disagreement between the
# source and the substitute image ends, at the output layer, exactly at the flip rate. Attention
# knockout (N.2) blocks the answer's attention to the report from a start layer on and asks whether
# the image sensitivity of the report-absent prompt comes back; a question-span and an image-span
# knockout of matched size are the controls.
#
# **What the demo profile runs.** `ref-vlm`, a small `Gemma3ForConditionalGeneration` (MedGemma's
# class: SigLIP vision tower, projector, Gemma-3 decoder, Gemma turn template) **trained in
# this repository** on the demo patients outside this chapter's cohort
# (`python -m shovir_core.training.ref_vlm`; see `shovir_core.models.ref_vlm`), with template
# reports. Its curriculum plants the ModaLens behaviour: with a report it answers from the report,
# without one from the image. Its numbers validate the code, not the paper; the `mimic` profile runs
# MedGemma-27B on MIMIC-CXR-JPG. Residual patching and steering (N.2-N.3, Table 25) and the probe and
# tuned lens (Tables 26, 34) are the following chapters; N.4's image-token knockout runs here on the chest
# X-rays, while its other datasets (VQA-RAD, SLAKE, OmniMedVQA) are not in this repository.

# %% tags=["parameters"]
profile = "demo"
run_ids = None
model = None
n_draws = None
n_perm = None
still_apart_tv = None
bootstrap_seed = None
reproduces_paper = None
disagreement_layer = None
agreement_layer = None
difference_layer = None

# %%
import matplotlib.pyplot as plt

from shovir_core import book
from shovir_core.models.ref_vlm import PLANTED_FACTS
from shovir_core.book import figures
from shovir_core.book.paper_section import paper_section
from shovir_core.tables import modalens_appn as an

runs = book.load_runs("modalens_appn", profile=profile, run_ids=run_ids)
trials = {key: run.trials for key, run in runs.items()}
for key, paper_id in (("n_layers", "setup.layers"), ("excursion_layer", "n1.excursion_layer"),
                      ("calibration_arms", "n1.calibration_arms"), ("diff_layer", "n2.diff_layer"),
                      ("question_region_lo", "n2.question_region_lo"), ("question_region_hi", "n2.question_region_hi")):
    book.glue_paper(f"mln.paper.design.{key}", paper_id)

# %% [markdown]
# ## The reference model's planted facts
#
# Stated in `ref-vlm`'s docstring before any of these records existed: (1) with the report the
# image-swap flip rate is far below the rate without it (below
# {glue:text}`mln.facts.planted_flip_ratio:.2f` times it); (2) without the report the answer comes from the
# image, with a balanced accuracy above chance ({glue:text}`mln.facts.planted_balanced_accuracy`) on these
# held-out patients;
# (3) with the report the answer agrees with the report's label on more than
# {glue:text}`mln.facts.planted_label_agreement:.0%` of trials.

# %% tags=["nbval-check-output"]
facts = an.planted_facts(trials["lens_P"], trials["lens_A"], n_draws=n_draws, seed=bootstrap_seed)
book.show(facts, runs=runs)

# %%
fv = facts.values
if not reproduces_paper:
    assert fv["present.flip_rate"] < fv["absent.flip_rate"] * PLANTED_FACTS["flip_ratio"], \
        "planted: report-present flips far below absent"
    assert fv["absent.balanced_accuracy"] > PLANTED_FACTS["balanced_accuracy"], \
        "planted: image-only answers above chance on held-out patients"
    assert fv["present.label_agreement"] > PLANTED_FACTS["label_agreement"], \
        "planted: with the report the answer follows the report"
book.glue_values("mln.facts", fv, runs=runs)
book.glue_values("mln.facts", {f"planted_{k}": v for k, v in PLANTED_FACTS.items()}, runs=runs)
book.glue("mln.model", model, runs=runs)

# %% [markdown]
# On {glue:text}`mln.facts.present.n_trials` trials per arm the flip rate is
# {glue:text}`mln.facts.present.flip_rate:.2%` with the report
# [{glue:text}`mln.facts.present.flip_lo:.2%`, {glue:text}`mln.facts.present.flip_hi:.2%`] and
# {glue:text}`mln.facts.absent.flip_rate:.2%` without it
# [{glue:text}`mln.facts.absent.flip_lo:.2%`, {glue:text}`mln.facts.absent.flip_hi:.2%`]
# ({glue:text}`mln.facts.ratio:.1f` times); the report-present answers agree with the report's label on
# {glue:text}`mln.facts.present.label_agreement:.1%` of trials, and the report-absent answers reach a
# balanced accuracy of {glue:text}`mln.facts.absent.balanced_accuracy:.3f` (pooled over questions;
# {glue:text}`mln.facts.absent.macro_balanced_accuracy:.3f` as the mean over findings with both classes:
# the image-only answers depend on the image -- the swap flips them -- but carry little per-finding
# signal on 64-px images; the pooled figure is helped by learnt differences between questions).

# %% [markdown] tags=["profile:demo"]
# ### Per question without the report: where the image-only answer is blind
#
# **The demo:** the planted fact is about the pooled balanced accuracy. Per question, `ref-vlm`'s
# report-absent answer on the original image is below chance on {glue:text}`mln.absent_pf.n_below_chance` of
# the {glue:text}`mln.absent_pf.n_both_classes` findings with both classes in this cohort
# ({glue:text}`mln.absent_pf.below_chance`), and each of those intervals holds chance
# ({glue:text}`mln.absent_pf.n_below_at_chance` of {glue:text}`mln.absent_pf.n_below_chance`; in all
# {glue:text}`mln.absent_pf.n_at_chance` findings are at chance). It answers
# {glue:text}`mln.absent_pf.n_constant` findings the same way on every trial, so the swap never flips them
# ({glue:text}`mln.absent_pf.constant`); {glue:text}`mln.absent_pf.n_constant_no_positive` of these have no
# positive study in the demo at all (NIH has no label for them). **The paper:** MedGemma-27B is also blind to
# the image on some findings without the report: {glue:text}`mln.paper.pf.low_n` of its findings flip on at
# most {glue:text}`mln.paper.pf.low_max:.1%` of cases with a yes rate of {glue:text}`mln.paper.pf.yes_lo:.1%`
# to {glue:text}`mln.paper.pf.yes_hi:.0%`, and the other {glue:text}`mln.paper.pf.high_n` flip on
# {glue:text}`mln.paper.pf.high_lo:.1%` to {glue:text}`mln.paper.pf.high_hi:.1%` (§4.1). **Why the demo
# differs:** `ref-vlm` is a toy model (its docstring: a few decoder layers of small width, a handful of image
# tokens, 64-px inputs) trained on NIH's text-mined labels of the training patients; its curriculum asks
# each question's image-only answer with balanced positives, which plants an image dependence that is
# modest overall (the planted fact above) and, per finding, within chance. Its blind findings are
# therefore a property of the reference model and the weak 64-px labels, not evidence about MedGemma's; the
# page asserts that every finding below chance is at chance, so a reference model that reads the image
# *against* its label would fail it.

# %% tags=["nbval-check-output"]
if model == "ref-vlm":  # the paragraph above: a per-question account of the reference model
    per_q = an.absent_by_finding(trials["lens_A"], n_draws=n_draws, seed=bootstrap_seed).with_runs(
        {"lens_A": runs["lens_A"]})
    book.show(per_q, runs={"lens_A": runs["lens_A"]}, name="ml-appn-absent-per-question")
    qv = per_q.values
    assert qv["absent_pf.n_below_at_chance"] == qv["absent_pf.n_below_chance"], \
        "a finding's image-only answer is below chance beyond its interval: the paragraph above no longer holds"
    book.glue_values("mln", qv, runs={"lens_A": runs["lens_A"]})
    for key in ("low_n", "high_n"):
        book.glue_paper(f"mln.paper.pf.{key}", f"s41.pf.{key}")
    for key in ("low_max", "yes_lo", "yes_hi", "high_lo", "high_hi"):  # printed in %: glued as fractions
        book.glue_paper(f"mln.paper.pf.{key}", f"s41.pf.{key}", scale=0.01)

# %% [markdown]
# ## N.1 Logit lens: Figure 6 and Table 36 (disagreement by layer), Figure 3 (Δ margin, agreement)
#
# Layer 0 reads the embeddings; layer L the residual after decoder layer L, of the
# {glue:text}`mln.lens.present.n_layers` decoder layers of {glue:text}`mln.model` (the paper's MedGemma-27B has
# {glue:text}`mln.paper.design.n_layers`). The last layer's entry is the model's own readout, so its disagreement
# must equal the record's flip rate exactly.

# %% tags=["nbval-check-output"]
lens = an.lens_table({"present": trials["lens_P"], "absent": trials["lens_A"]}, n_draws=n_draws, seed=bootstrap_seed,
                     tv=still_apart_tv)
book.glue("mln.lens.tv", float(still_apart_tv), runs=runs)
book.show(lens, runs=runs)

# %%
lv = lens.values
for arm in ("present", "absent"):
    assert lv[f"{arm}.endpoint_disagreement"] == lv[f"{arm}.flip_rate"], f"{arm}: the output layer is the readout"
book.glue_values("mln.lens", lv, runs=runs)

# %% tags=["nbval-check-output"]
one_q_ids = set(trials["ko_report"]["trial_id"])
settle = an.settling_table(trials["lens_P_1q"], trials["lens_A_1q"], n_perm=n_perm, seed=bootstrap_seed,
                           n_draws=n_draws)
book.show(settle, runs=runs, name="ml-appn-settling", intervals={"value": ("lo", "hi")})

# %%
sv = settle.values
assert sv["n_trials"] == len(one_q_ids), "the one-question lens records hold the knockout's trials"
assert sv["paired_mean_diff_lo"] <= sv["paired_mean_diff"] <= sv["paired_mean_diff_hi"]
book.glue_values("mln.settle", sv, runs=runs)

# %% [markdown]
# **Layers with intervals.** The paper reads the lens at a shallow and a deep layer: the disagreement between
# the two images at its brief excursion at layer {glue:text}`mln.paper.design.excursion_layer`, with and without
# the report and as a paired difference, and the balanced agreement of the projection with the model's own
# output at layer {glue:text}`mln.paper.lens.present.calibration_depth`, the first layer that clears the constant
# baseline. This profile reads layers {glue:text}`mln.at.disagreement_layer` and
# {glue:text}`mln.at.agreement_layer` (the chapter's parameters `disagreement_layer`, `agreement_layer`;
# the `mimic` profile sets the paper's) on the all-14 trials, with patient-clustered intervals.

# %% tags=["nbval-check-output"]
at = an.layer_intervals(trials["lens_P"], trials["lens_A"], disagreement_layer=disagreement_layer,
                        agreement_layer=agreement_layer, n_draws=n_draws, seed=bootstrap_seed)
book.show(at, runs=runs, name="ml-appn-layers", intervals={"value": ("lo", "hi")})

# %%
atv = at.values
for arm in ("present", "absent"):
    assert atv[f"{arm}.disagreement_lo"] <= atv[f"{arm}.disagreement"] <= atv[f"{arm}.disagreement_hi"]
book.glue_values("mln.at", atv, runs=runs)

# %% [markdown]
# At layer {glue:text}`mln.at.disagreement_layer` the projected answers of the two images disagree on
# {glue:text}`mln.at.present.disagreement:.4f` of trials with the report
# [{glue:text}`mln.at.present.disagreement_lo:.3f`, {glue:text}`mln.at.present.disagreement_hi:.3f`] and
# {glue:text}`mln.at.absent.disagreement:.4f` without it
# [{glue:text}`mln.at.absent.disagreement_lo:.3f`, {glue:text}`mln.at.absent.disagreement_hi:.3f`], a paired
# difference of {glue:text}`mln.at.disagreement_diff_pp:+.1f` points
# [{glue:text}`mln.at.disagreement_diff_pp_lo:+.1f`, {glue:text}`mln.at.disagreement_diff_pp_hi:+.1f`]. At layer
# {glue:text}`mln.at.agreement_layer` the projection's balanced agreement with the output is
# {glue:text}`mln.at.present.balanced_agreement:.3f`
# [{glue:text}`mln.at.present.balanced_agreement_lo:.3f`, {glue:text}`mln.at.present.balanced_agreement_hi:.3f`]
# with the report and {glue:text}`mln.at.absent.balanced_agreement:.3f`
# [{glue:text}`mln.at.absent.balanced_agreement_lo:.3f`, {glue:text}`mln.at.absent.balanced_agreement_hi:.3f`]
# without it.
#
# **Calibration over every lens arm.** The paper finds the same first informative layer in all
# {glue:text}`mln.paper.design.calibration_arms` arms (all-14 and one-question, with and without the report,
# image first and text first). This profile runs {glue:text}`mln.calib.n_arms` of them: the demo the
# one-question arms in both orders and the all-14 arms image first only (to stay fast), the `mimic` profile
# all of the paper's.

# %% tags=["nbval-check-output"]
lens_arms = {key.removeprefix("lens_"): t for key, t in trials.items() if key.startswith("lens_")}
calib = an.calibration_table(lens_arms, n_draws=n_draws, seed=bootstrap_seed)
book.show(calib, runs=runs, name="ml-appn-calibration", intervals={"depth": ("depth_lo", "depth_hi")})

# %%
cv = calib.values
assert cv["n_arms"] == len(lens_arms) >= 6
book.glue_values("mln.calib", cv, runs=runs)

# %% [markdown]
# Over the {glue:text}`mln.calib.n_arms` lens arms the calibration depth runs from layer
# {glue:text}`mln.calib.min_depth` to {glue:text}`mln.calib.max_depth`.

# %%
frame = lens.frame
fig, axes = plt.subplots(1, 3, figsize=figures.column_figsize(3.6))
for arm, style in (("present", "-o"), ("absent", "--s")):
    f = frame[frame["arm"] == arm]
    axes[0].plot(f["layer"], f["disagreement"], style, label=f"report {arm}")
    axes[1].plot(f["layer"], f["mean_abs_delta_margin"], style, label=f"report {arm}")
    axes[2].plot(f["layer"], f["agreement_final"], style, label=f"report {arm}")
    axes[2].axhline(f["majority_floor"].iloc[0], ls=":", lw=1, color=axes[2].lines[-1].get_color())
axes[0].set_title("A: disagreement c vs d")
axes[1].set_title("B: mean |Δ margin|")
axes[2].set_title("C: agreement with final")
fig.supxlabel("residual stream after k decoder layers (k = 0: the embeddings)", fontsize=11)
axes[0].legend(fontsize=9)
fig.tight_layout()
book.show(fig, runs=runs, name="ml-appn-lens",
          caption=f"Logit lens ({model}, {profile}) per layer (0 = embeddings): A, share of trials whose projected "
                  "answers on the two images disagree (Figure 6); B, mean |Δ projected margin| (Figure 3A); C, "
                  "agreement of the projected answer with the final answer, dotted: the majority floor (Figure 3B).",
          alt="Three line charts over layers, one line per report arm (present solid, absent dashed).")

# %% [markdown]
# With the report the projected answers of the two images disagree on at most
# {glue:text}`mln.lens.present.max_disagreement:.2%` of trials at any layer, without it up to
# {glue:text}`mln.lens.absent.max_disagreement:.2%` (peak at layer {glue:text}`mln.lens.absent.peak_layer`).
# The projected answer first agrees with the model's own forced choice better than a constant answer does
# (a higher balanced agreement) at layer {glue:text}`mln.lens.present.calibration_depth` with the report
# [{glue:text}`mln.lens.present.calibration_depth_lo:.0f`, {glue:text}`mln.lens.present.calibration_depth_hi:.0f`]
# and at layer {glue:text}`mln.lens.absent.calibration_depth` without it
# [{glue:text}`mln.lens.absent.calibration_depth_lo:.0f`, {glue:text}`mln.lens.absent.calibration_depth_hi:.0f`];
# the answer settles, on average, at layer {glue:text}`mln.lens.present.settling_mean:.2f` (present) and
# {glue:text}`mln.lens.absent.settling_mean:.2f` (absent) of {glue:text}`mln.lens.present.n_layers`.
#
# **Settling depth.** On the one-question trials (each case's primary finding, as the paper's N.1),
# the source image's projected answer settles at median layer {glue:text}`mln.settle.present.median:.0f`
# with the report and {glue:text}`mln.settle.absent.median:.0f` without it
# ({glue:text}`mln.settle.n_trials` trials); the paired mean difference present − absent is
# {glue:text}`mln.settle.paired_mean_diff:+.2f` layers (patient sign-flip null, two-sided
# p = {glue:text}`mln.settle.paired_mean_diff_p:.2g`), and the median per-trial |difference| of
# {glue:text}`mln.settle.median_abs_diff:.1f` layers compares with
# {glue:text}`mln.settle.median_abs_diff_null_mean:.2f` when the pairing is shuffled within finding
# (p = {glue:text}`mln.settle.median_abs_diff_p:.2g`).
#
# **Table 27 (still apart).** On the all-14 trials with the report, {glue:text}`mln.lens.present.n_still_apart`
# trials end with the two images' yes/no distributions more than {glue:text}`mln.lens.tv` apart in total
# variation against {glue:text}`mln.lens.present.n_flips` flips
# ({glue:text}`mln.lens.present.n_still_apart_not_flipped` apart without flipping); without it
# {glue:text}`mln.lens.absent.n_still_apart` against {glue:text}`mln.lens.absent.n_flips`. The paper's
# Table 27 counts on the knockout's one-question trials with the report, image first and text first:

# %% tags=["nbval-check-output"]
t27 = an.still_apart_table({"image_first": trials["lens_P_1q"], "text_first": trials["lens_P_1q_tf"]}, tv=still_apart_tv)
book.show(t27, runs=runs, name="ml-appn-t27")

# %%
t27v = t27.values
assert t27v["image_first.n_trials"] == t27v["text_first.n_trials"] == len(one_q_ids)
book.glue_values("mln.t27", t27v, runs=runs)

# %% [markdown]
# Image first, {glue:text}`mln.t27.image_first.n_still_apart` pairs stay apart against
# {glue:text}`mln.t27.image_first.n_flips` flips; text first, {glue:text}`mln.t27.text_first.n_still_apart`
# against {glue:text}`mln.t27.text_first.n_flips`.
#
# ## N.2 Attention knockout: Figure 7
#
# The answer position's attention to the report span is blocked from a start layer to the last
# (cumulative), on the one-question design (each case's primary finding), report present. Arms: the
# report line for the answer query only (`report_answer`) and for every non-image query
# (`report_all`); controls: the question line (`question`), the first report tokens matched in number
# to the question (`report_matched`), and image tokens matched in number to the report
# (`image_matched`); and the wide block at its start layer only (`report_single`). Intervals are
# patient-clustered bootstraps.
#
# **The paper's design.** ModaLens runs the knockout on {glue:text}`mln.paper.ko.n_cases:,` cases of the
# one-question cohort from {glue:text}`mln.paper.ko.n_patients:,` patients,
# {glue:text}`mln.paper.ko.n_decisive:,` of them decisive, at {glue:text}`mln.paper.ko.n_layers` of its
# {glue:text}`mln.paper.design.n_layers` decoder layers (published values), with the explicit answer
# instruction in the prompt (the question control blocks the question and the instruction). The paper
# names neither the draw nor the layers; the profiles choose them, as options of the `modalens-layers`
# protocol (`knockout_n_patients`, `knockout_n_cases`, `knockout_n_decisive`, `knockout_case_seed`,
# `knockout_layers`, set in the chapter's params files): the patients are drawn first, each gives a single
# case (a decisive one where it has any), the rest are filled in a seeded order; a case is **decisive** when
# the swap changes the asked finding's label (the right answer changes with the image). The `mimic`
# profile's layers are a regular stride from layer 0 plus every layer of the region where the paper's
# question control restores flips (layers {glue:text}`mln.paper.design.question_region_lo` to
# {glue:text}`mln.paper.design.question_region_hi`); this profile's are {glue:text}`mln.design.layer_list`.
# The one-question lens arms run the same sample, so Table 27 and the in-run endpoints are on the knockout's
# cases.

# %% tags=["nbval-check-output"]
arms = {"report_answer": trials["ko_report"], "report_all": trials["ko_report_all"],
        "report_single": trials["ko_report_single"], "report_matched": trials["ko_report_matched"],
        "question": trials["ko_question"], "image_matched": trials["ko_image"]}
ko = an.knockout_table(arms, n_draws=n_draws, seed=bootstrap_seed)
book.show(ko, runs=runs)
base = an.planted_facts(trials["lens_P_1q"], trials["lens_A_1q"], n_draws=n_draws, seed=bootstrap_seed)

# %%
kv, bv = ko.values, base.values
if not reproduces_paper:
    assert kv["report_all.L0.lo"] > bv["present.flip_rate"], "blocking the report restores image sensitivity"
    assert kv["report_answer.L0.lo"] > bv["present.flip_rate"], "also for the answer query alone"
    assert kv["report_answer.L0.hi"] < bv["absent.flip_rate"], "the demo model's restoration is partial"
    assert kv["image_matched.L0.hi"] < kv["report_all.L0.lo"], "the matched image-span control does not"
book.glue_values("mln.ko", kv, runs=runs)
book.glue_values("mln.ko_base", bv, runs=runs)
wide = trials["ko_report_all"]
design = {"n_cases": wide["case_id"].nunique(), "n_patients": wide["patient_id"].nunique(),
          "n_decisive": int((wide.groupby("case_id")["label_changed"].max() == 1).sum()),
          "n_layers": len(set(ko.frame["start_layer"]))}
book.glue_values("mln.design", design, runs=runs)
book.glue("mln.design.layer_list", ", ".join(str(int(x)) for x in sorted(set(ko.frame["start_layer"]))), runs=runs)

# %% [markdown]
# The knockout runs {glue:text}`mln.design.n_cases` cases of {glue:text}`mln.design.n_patients` patients,
# {glue:text}`mln.design.n_decisive` of them decisive, at {glue:text}`mln.design.n_layers` start layers.
#
# **Report-specific?** The report arm's flip rate minus each control's, paired by trial (wide scope,
# cumulative), on all cases and on the decisive ones (ModaLens App. N.2 reads the paired difference at
# its layer {glue:text}`mln.paper.design.diff_layer`; this profile compares at `difference_layer`,
# {glue:text}`mln.ko_diff.layer`).

# %% tags=["nbval-check-output"]
controls = {"question": trials["ko_question"], "image_matched": trials["ko_image"]}
ko_diff = an.knockout_difference(wide, controls, n_draws=n_draws, seed=bootstrap_seed)
decisive_ids = wide.loc[wide["label_changed"] == 1, "trial_id"]
ko_diff_dec = an.knockout_difference(wide, controls, n_draws=n_draws, seed=bootstrap_seed, subset=decisive_ids)
book.show(ko_diff, runs=runs, name="ml-appn-ko-diff", intervals={"diff": ("lo", "hi")})
book.show(ko_diff_dec, runs=runs, name="ml-appn-ko-diff-decisive", intervals={"diff": ("lo", "hi")},
          caption="As the table above, on the decisive cases only.")

# %%
dv = ko_diff.values
assert f"image_matched.L{difference_layer}_pp" in dv, "the comparison layer is one the knockout ran"
book.glue_values("mln.ko_diff", {**dv, "layer": difference_layer}, runs=runs)
book.glue_values("mln.ko_diff_dec", ko_diff_dec.values, runs=runs)

# %%
fig, ax = plt.subplots(figsize=figures.column_figsize(4.5))
groups = list(ko.frame.groupby("arm", sort=False))  # arms carry readable labels (KNOCKOUT_ARM_LABELS)
for k, ((arm, f), marker) in enumerate(zip(groups, "osD^vP")):
    x = f["start_layer"] + 0.08 * (k - (len(groups) - 1) / 2)  # dodged so overlapping arms stay visible
    ax.errorbar(x, 100 * f["flip_rate"], yerr=[100 * (f["flip_rate"] - f["flip_rate_lo"]),
                                              100 * (f["flip_rate_hi"] - f["flip_rate"])],
                marker=marker, capsize=3, label=arm)
ax.axhline(100 * bv["present.flip_rate"], color="black", lw=1, label="no knockout, report present")
ax.axhline(100 * bv["absent.flip_rate"], color="black", lw=1, ls="--", label="report absent")
ax.set_xticks(sorted(ko.frame["start_layer"].unique()))
ax.set_xlabel("knockout start decoder layer, 0-based (blocked to the last layer)")
ax.set_ylabel("flip rate (%)")
ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1))
fig.tight_layout()
book.show(fig, runs=runs, name="ml-appn-knockout",
          caption=f"Figure 7 ({model}, {profile}, one-question design): flip rate when attention to a span is "
                  "blocked from the start layer to the last, per arm, with patient-clustered intervals; solid and "
                  "dashed lines: no knockout with and without the report.",
          alt="Flip rate against knockout start layer, one line with error bars per blocked span.")

# %% [markdown]
# On the one-question trials the flip rate is {glue:text}`mln.ko_base.present.flip_rate:.2%` with the
# report and {glue:text}`mln.ko_base.absent.flip_rate:.2%` without it. Blocking every non-image
# position's attention to the report from layer 0 gives
# {glue:text}`mln.ko.report_all.L0.flip_rate:.2%`
# [{glue:text}`mln.ko.report_all.L0.lo:.2%`, {glue:text}`mln.ko.report_all.L0.hi:.2%`],
# blocking only the answer position's {glue:text}`mln.ko.report_answer.L0.flip_rate:.2%`; the
# matched image-token control gives {glue:text}`mln.ko.image_matched.L0.flip_rate:.2%` and the
# question-line control {glue:text}`mln.ko.question.L0.flip_rate:.2%`.

# %% [markdown] tags=["profile:demo"]
# The restoration is partial on
# `ref-vlm`: blocking the report from layer 0 takes the substitute's answers off the report's label
# (agreement {glue:text}`mln.ko.report_answer.L0.report_label_agreement:.1%` against
# {glue:text}`mln.ko.report_answer.L3.report_label_agreement:.1%` from layer 3), but the image
# sensitivity comes back only part of the way to the report-absent rate, and from layer 1 on the
# knockout has almost no effect: this small model moves the report's content into the later token
# positions in its first layer.

# %% [markdown]
# **Overlap of the flipped cases.** Do the arms flip the same cases? Per start layer, Jaccard and φ of
# both arms' flip indicators on the same trials, with φ's p-value against a pairing shuffled within
# finding.

# %% tags=["nbval-check-output"]
overlap = an.knockout_overlap(arms, [("report_all", "report_answer"), ("report_all", "question"),
                                     ("report_all", "image_matched")], n_perm=n_perm, seed=bootstrap_seed)
book.show(overlap, runs=runs, name="ml-appn-overlap")

# %%
ov = overlap.values
if not reproduces_paper:
    assert ov["report_all.report_answer.L0.phi"] > 0 and ov["report_all.report_answer.L0.phi_p"] < 0.05, \
        "the two blocks of the same report flip overlapping cases (more than a shuffled pairing would)"
book.glue_values("mln.overlap", ov, runs=runs)

# %% [markdown]
# From layer 0, the answer-only block and the wide block flip overlapping cases (Jaccard
# {glue:text}`mln.overlap.report_all.report_answer.L0.jaccard:.2f`, φ
# {glue:text}`mln.overlap.report_all.report_answer.L0.phi:+.2f`, shuffled-pairing p =
# {glue:text}`mln.overlap.report_all.report_answer.L0.phi_p:.2g`); the question-line control's flips are
# unrelated to the wide block's (φ {glue:text}`mln.overlap.report_all.question.L0.phi:+.2f`). Cells without a
# value are layers at which an arm flips no case.
#
# ## N.4 Image-token knockout and its random-token control
#
# On the report-absent prompt, where the answer must come from the image, blocking every non-image
# position's attention to **all** image tokens from layer 0 leaves nothing of the image in the text
# positions, so the two images of a pair must give the same answer: the flip rate must fall from the
# report-absent rate to exactly 0, which checks the knockout itself. The control blocks as many
# positions drawn at random from the whole prompt (seeded by the prompt, the same positions on both
# images).

# %% tags=["nbval-check-output"]
n4 = an.knockout_table({"image_all": trials["ko_image_all"], "random_matched": trials["ko_random"]},
                       n_draws=n_draws, seed=bootstrap_seed)
book.show(n4, runs=runs, name="ml-appn-n4")

# %%
n4v = n4.values
assert n4v["image_all.L0.flip_rate"] == 0.0, "no text position can see the image: both images answer alike"
if not reproduces_paper:  # planted in ref-vlm; a real model (or a rehearsal's random stand-in) may be image-blind
    assert bv["absent.flip_rate"] > 0.05, "without the knockout the report-absent answers do depend on the image"
book.glue_values("mln.n4", n4v, runs=runs)

# %% [markdown]
# Without the report the one-question flip rate is {glue:text}`mln.ko_base.absent.flip_rate:.2%`; with
# every image token blocked it is {glue:text}`mln.n4.image_all.L0.flip_rate:.2%` (as it must be);
# blocking as many random positions gives {glue:text}`mln.n4.random_matched.L0.flip_rate:.2%`
# [{glue:text}`mln.n4.random_matched.L0.lo:.2%`, {glue:text}`mln.n4.random_matched.L0.hi:.2%`]. The
# paper runs this knockout on VQA-RAD, SLAKE and OmniMedVQA; those rows are the chapter "Datasets
# without a report" (`notebooks/modalens_no_report.py`), which runs it on the shipped VQA-RAD release.
#
# Residual patching and steering (Table 25), and probes and the tuned lens (Tables 26, 34), are the
# following chapters.
#
# ## The paper's values beside this run's
#
# Appendix N.1 and N.2's printed values beside this run's (in the paper's setting only a verdict is
# judged; the layer-specific values at the layers the profile names).

# %% tags=["nbval-check-output"]
single = ko.frame[ko.frame["arm"] == an.KNOCKOUT_ARM_LABELS["report_single"]]["flip_rate"]
answer_only = ko.frame[ko.frame["arm"] == an.KNOCKOUT_ARM_LABELS["report_answer"]]["flip_rate"]
first = min(ko.frame["start_layer"])
mine = {**{f"lens.{k}": v for k, v in lv.items()}, **{f"at.{k}": v for k, v in atv.items()},
        **{f"settle.{k}": v for k, v in sv.items()}, **{f"t27.{k}": v for k, v in t27v.items()},
        **{f"ko.{k}": v for k, v in design.items()},
        "ko.report_all.first.flip_rate": kv[f"report_all.L{first}.flip_rate"],
        "ko.end_P": bv["present.flip_rate"], "ko.end_A": bv["absent.flip_rate"],
        "ko.single.max_flip_rate": float(single.max()), "ko.report_answer.max_flip_rate": float(answer_only.max()),
        "ko.diff.image_matched.at_pp": dv[f"image_matched.L{difference_layer}_pp"]}
vs_paper, _ = paper_section("mln", mine, an.PAPER_KEYS, reproduces_paper=reproduces_paper, runs=runs,
                            name="ml-appn-paper-vs-run")

# %%
assert vs_paper.values["n_missing"] == 0, "every published N.1-N.2 value has a run value"

# %% [markdown]
# ## Records read

# %%
book.show(book.runs_table(runs), runs=runs)
