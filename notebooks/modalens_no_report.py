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
# # Datasets without a report (VQA-RAD, SLAKE, OmniMedVQA, ProbMed)
#
# Without a report there is nothing to anchor the answer, so the image swap asks the plain question:
# does the answer move when the image changes and the question stays? ModaLens runs it on public
# VQA datasets (Table 6). On VQA-RAD MedGemma-27B changes its answer on
# {glue:text}`ml.nr.paper.nr.vqarad.main.flip_rate:.1%` of {glue:text}`ml.nr.paper.nr.vqarad.main.n_pairs`
# pairs and is right on both images in {glue:text}`ml.nr.paper.nr.vqarad.main.accuracy_both:.3f` of them
# (§4.1, published values); blocking the image tokens changes the answer about as often as blocking as
# many random tokens (App. N.4), and on SLAKE the flip rate depends on what is asked (Table 9).
#
# A single protocol serves every dataset (`shovir_core.protocols.noreport`): a case pool with a stated
# leakage rule, the image swap with the question fixed, swap tiers, the final-token yes/no readout (the
# option letter for OmniMedVQA), text-side symmetry arms, open-ended answers mapped to an option, the
# key audits and the image-token knockout with a count-matched random-token control.

# %% [markdown] tags=["profile:demo"]
# **What the demo runs.** VQA-RAD is the **real release**, shipped in `data/vqa-rad` (CC0 1.0; all
# {glue:text}`ml.nr.vqarad.n_images` images byte for byte, hashes checked on load). The models answering it: `ref-vlm-vqarad`, the
# `ref-vlm` architecture (a {glue:text}`ml.nr.ref_vlm.layers`-layer `Gemma3ForConditionalGeneration`) **trained in this repository** on
# VQA-RAD's official training questions, and reference models with stated behaviour
# (`shovir_core.models.reference_vqa`): `ref-question-only` never reads the image (its flip rate must be
# exactly 0) and `ref-image-reader` reads nothing else (its flip rate must be high, its knockout rate
# equal to it). **SLAKE, OmniMedVQA and ProbMed run on fixtures** written in their releases' exact
# layouts with invented images (`data/fixtures`): their rows, Table 9 included, test the adapters and the
# protocol and say nothing about any model on those datasets.

# %% tags=["parameters"]
profile = "demo"
run_ids = None
n_draws = None
bootstrap_seed = None
reproduces_paper = None
primary = None  # the model under study on VQA-RAD (role "main")
on_fixture = None  # SLAKE, OmniMedVQA and ProbMed are fixtures with invented images

# %%
import numpy as np

from shovir_core import book
from shovir_core.book.paper_section import paper_section
from shovir_core.models.ref_vlm import TRAIN_CONFIG as REF_VLM_CONFIG
from shovir_core.protocols import noreport
from shovir_core.tables import modalens_no_report as nr

runs = book.load_runs("modalens_no_report", profile=profile, run_ids=run_ids)
roles = {key: key.split("_", 1) for key in runs}  # "vqarad_main" -> ("vqarad", "main")
names = {"vqarad": "VQA-RAD", "slake": "SLAKE", "omni": "OmniMedVQA", "probmed": "ProbMed"}
models = {key: run.manifest["spec"]["model"] for key, run in runs.items()}
model_names = {tuple(roles[key]): name for key, name in models.items()}
values = {}
for key, run in runs.items():
    ds_key, role = roles[key]
    values.update(nr.dataset_values(run.trials, dataset=names[ds_key], role=role, counts=run.manifest["counts"],
                                    n_draws=n_draws, seed=bootstrap_seed))
book.glue_values("ml", values, runs=runs)
book.glue("ml.nr.n_draws", n_draws, runs=runs)
book.glue("ml.nr.primary", primary, runs=runs)
book.glue("ml.nr.floor", nr.FLOOR, runs=runs)
book.glue_values("ml.nr.ref_vlm", {"layers": REF_VLM_CONFIG["dims"]["layers"], "width": REF_VLM_CONFIG["dims"]["hidden"]},
                 runs=[], source="shovir_core/models/ref_vlm.py (TRAIN_CONFIG)")  # the architecture's settings, not a result

# %% [markdown]
# ## Table 6: the datasets and what ran here
#
# Images and questions are counted from each record's dataset manifest (all questions of the release as
# the adapter reads it: SLAKE's English half, VQA-RAD's official and templated rows).

# %% tags=["nbval-check-output"]
manifests = {names[roles[k][0]]: runs[k].manifest["dataset"] for k in runs if roles[k][1] == "main"}
here = {n: ("fixture in the release's layout (invented images)" if on_fixture and n != "VQA-RAD" else
            f"{'the shipped release' if n == 'VQA-RAD' else 'your copy'}: "
            + ", ".join(sorted({models[k] for k in runs if names[roles[k][0]] == n})))
        for n in manifests}
t6 = nr.table6(manifests, ran=here).with_runs(runs)
book.show(t6, runs=runs, name="ml-nr-t6")

# %%
assert manifests["VQA-RAD"]["n_images"] == 315 and manifests["VQA-RAD"]["n_official"] == 2248  # the release
book.glue("ml.nr.vqarad.n_images", manifests["VQA-RAD"]["n_images"], runs=runs)
assert all(runs[k].manifest["counts"]["pool_rows"] >= runs[k].manifest["counts"]["admissible"] for k in runs)

# %% [markdown]
# ## Case pools and the leakage rule
#
# A source is a closed yes/no question (multiple choice for OmniMedVQA) whose text is asked of
# more than a single image; its substitute is the same question on another image, drawn with the seed. On the shipped
# VQA-RAD release that pool holds {glue:text}`ml.nr.vqarad.main.pool_rows` rows on
# {glue:text}`ml.nr.vqarad.main.pool_questions` questions: the same rows and questions as the paper's
# label audit ({glue:text}`ml.nr.paper.nr.vqarad.main.audit.rows` rows,
# {glue:text}`ml.nr.paper.nr.vqarad.main.audit.questions` questions). The **leakage rule** admits a pair when both its rows are official
# **test** questions, so a model trained on the training questions has seen neither: that gives
# {glue:text}`ml.nr.vqarad.main.admissible` admissible pairs; the **ceiling**, every test source with a
# substitute from either split, is {glue:text}`ml.nr.vqarad.main.ceiling`. The paper states
# {glue:text}`ml.nr.paper.nr.vqarad.main.n_pairs` admissible pairs under a ceiling of
# {glue:text}`ml.nr.paper.nr.vqarad.main.ceiling` without the rule that produced them; the rule here is ours, so the counts
# differ, and every VQA-RAD rate below is over {glue:text}`ml.nr.vqarad.main.admissible` pairs. Of them
# {glue:text}`ml.nr.vqarad.main.swap_changed` change their answer key with the image.

# %% [markdown]
# ## §4.1 on VQA-RAD: the image swap with the question fixed
#
# Final-token yes/no readout on both images, flip rate with a percentile bootstrap clustered by **source
# image** ({glue:text}`ml.nr.n_draws` draws); accuracy against the release's key on the original image,
# on the substitute, and on both.

# %% tags=["nbval-check-output"]
vq_models = {role: models[f"vqarad_{role}"] for role in ("main", "reader", "qonly")}
t41 = nr.models_table(values, dataset="VQA-RAD", models=vq_models).with_runs(runs)
book.show(t41, runs=runs, name="ml-nr-vqarad")

# %%
for role in vq_models:
    p = f"nr.vqarad.{role}"
    assert values[f"{p}.flip_rate_lo"] <= values[f"{p}.flip_rate"] <= values[f"{p}.flip_rate_hi"]
    assert np.isclose(values[f"{p}.flip_rate"], values[f"{p}.flip_cases"] / values[f"{p}.n_pairs"])
    assert values[f"{p}.accuracy_both"] <= min(values[f"{p}.accuracy_c"], values[f"{p}.accuracy_d"])
failures = [f for key in runs for f in nr.planted_failures(values, dataset=names[roles[key][0]], role=roles[key][1],
                                                             model=models[key])]
assert not failures, failures

# %% [markdown]
# {glue:text}`ml.nr.primary` changes its answer on {glue:text}`ml.nr.vqarad.main.flip_rate:.1%`
# [{glue:text}`ml.nr.vqarad.main.flip_rate_lo:.1%`, {glue:text}`ml.nr.vqarad.main.flip_rate_hi:.1%`] of the
# admissible pairs and is right on both images in {glue:text}`ml.nr.vqarad.main.accuracy_both:.3f` of them.
# The reference models behave as stated: `ref-question-only` flips on
# {glue:text}`ml.nr.vqarad.qonly.flip_rate:.1%` (exactly zero), `ref-image-reader` on
# {glue:text}`ml.nr.vqarad.reader.flip_rate:.1%`; the chapter fails if either breaks its statement.

# %% [markdown] tags=["profile:demo"]
# ### The trained model against the majority answer
#
# `ref-vlm-vqarad` was trained on the official training questions and is scored here on all
# {glue:text}`ml.nr.vqarad.main.orig.n` closed yes/no **test** questions: accuracy {glue:text}`ml.nr.vqarad.main.orig.accuracy:.3f` against
# {glue:text}`ml.nr.vqarad.main.orig.majority_accuracy:.3f` for always answering the training split's
# majority answer ("{glue:text}`ml.nr.vqarad.main.orig.majority_answer`"); it answers yes on
# {glue:text}`ml.nr.vqarad.main.orig.yes_rate:.1%` of them. Both accuracies are shown as they came out of
# the record (a {glue:text}`ml.nr.ref_vlm.layers`-layer model of width {glue:text}`ml.nr.ref_vlm.width`, trained for minutes on
# a single CPU thread).

# %% [markdown]
# ## Swap tiers
#
# VQA-RAD: a substitute of the same organ is the **hard** tier, another organ the **easy** one (OmniMedVQA:
# same source dataset vs another).

# %% tags=["nbval-check-output"]
tiers = nr.tiers_frame(values, datasets=("vqarad", "omni"), roles=("main", "reader"), names=model_names)
book.show(tiers, runs=runs, name="ml-nr-tiers")

# %% [markdown]
# On VQA-RAD {glue:text}`ml.nr.primary` flips on {glue:text}`ml.nr.vqarad.main.tier.hard.flips` of
# {glue:text}`ml.nr.vqarad.main.tier.hard.n` hard pairs and {glue:text}`ml.nr.vqarad.main.tier.easy.flips` of
# {glue:text}`ml.nr.vqarad.main.tier.easy.n` easy ones.
#
# ## Text-side symmetry
#
# How often the answer moves when the text changes and the image does not: the question swapped for
# another pool question, the options reversed (OmniMedVQA), beside the image swap and the uniform option
# reroll (a key redrawn uniformly over the options: the rate of chance, 1 − 1/k).

# %% tags=["nbval-check-output"]
sym = nr.symmetry_frame(values, datasets=("vqarad", "slake", "omni"), role="main", names=model_names)
book.show(sym, runs=runs, name="ml-nr-symmetry")

# %% [markdown]
# ## Open-ended answers and the key audits
#
# Greedy answers on the original image are mapped to an option by a frozen rule
# (`nr.map_generated`: the first word for yes/no, a leading letter or the single option named
# among the choices); a mapped answer counts only when its first token's probability reaches
# {glue:text}`ml.nr.floor`. On VQA-RAD {glue:text}`ml.nr.vqarad.main.open.mapped` of
# {glue:text}`ml.nr.vqarad.main.open.n` answers map and {glue:text}`ml.nr.vqarad.main.open.floor` clear the floor.
#
# *Image-decisive key vs the automatic label* (VQA-RAD, every pool row): the automatic label says the key is
# unchanged between source and substitute; the image-decisive key (here a rule on the release's own answers,
# standing in for the paper's hand-made key: the question is answered both yes and no across its images)
# agrees with it on {glue:text}`ml.nr.vqarad.main.audit.agree_n` of {glue:text}`ml.nr.vqarad.main.audit.rows`
# rows ({glue:text}`ml.nr.vqarad.main.audit.questions` questions), κ {glue:text}`ml.nr.vqarad.main.audit.kappa:.3f`.
# *Answer-key audit* (OmniMedVQA): a pair is flagged when the correct option's text is in the question;
# {glue:text}`ml.nr.omni.main.keyaudit.flagged` of {glue:text}`ml.nr.omni.main.keyaudit.n` are flagged, and the
# original-image accuracy {glue:text}`ml.nr.omni.main.keyaudit.accuracy:.3f` is bounded by
# {glue:text}`ml.nr.omni.main.keyaudit.bound_lo:.3f` and {glue:text}`ml.nr.omni.main.keyaudit.bound_hi:.3f`.

# %%
assert values["nr.vqarad.main.audit.rows"] == values["nr.vqarad.main.pool_rows"]
assert values["nr.omni.main.keyaudit.bound_lo"] <= values["nr.omni.main.keyaudit.accuracy"] <= values["nr.omni.main.keyaudit.bound_hi"]

# %% [markdown]
# ## App. N.4: image-token knockout against a count-matched random-token control
#
# The answer on the original image with every image token blocked from every query at every layer,
# against the same number of random positions blocked (transformers backend,
# `shovir_core.models.lens.Knockout`; the reference models state theirs).

# %% tags=["nbval-check-output"]
ko = nr.knockout_frame(values, datasets=("vqarad", "slake", "omni"), roles=("main", "reader", "qonly"),
                       names=model_names)
book.show(ko, runs=runs, name="ml-nr-knockout")

# %% [markdown]
# {glue:text}`ml.nr.primary` changes its VQA-RAD answer on {glue:text}`ml.nr.vqarad.main.knockout.flip_rate:.1%`
# of pairs under the image-token knockout and on {glue:text}`ml.nr.vqarad.main.knockout_random.flip_rate:.1%`
# under the random-token control (its image-swap flip rate: {glue:text}`ml.nr.vqarad.main.flip_rate:.1%`).
#
# ## Table 9: SLAKE flip rate by question category

# %% tags=["nbval-check-output"]
t9 = nr.table9(runs["slake_main"].trials, prefix="nr.slake.main", n_draws=n_draws, seed=bootstrap_seed).with_runs(runs)
book.show(t9, runs=runs, name="ml-nr-t9")
values.update(t9.values)
book.glue_values("ml", t9.values, runs=runs)

# %% [markdown] tags=["profile:demo"]
# These rows come from the SLAKE **fixture** (invented questions on invented images, answered by
# `ref-image-reader`); they check that the categories are read and counted, not what any model does on SLAKE.
#
# ## Paper vs this run

# %% tags=["nbval-check-output"]
keys = {**nr.paper_keys("main"), **nr.other_paper_keys("main")}
vs_paper, audit_table = paper_section("ml.nr", values, keys, reproduces_paper=reproduces_paper, runs=runs,
                                      name="ml-nr-paper-vs-run", audit_prefixes=nr.AUDIT_PREFIXES)

# %% [markdown]
# ## Records read

# %%
book.show(book.runs_table(runs), runs=runs)
