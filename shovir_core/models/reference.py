"""Reference models with known behaviour: they validate the benchmark where real weights are absent.

Each model turns a request into one evidence logit ``z`` for the asked finding and answers through
the same readout arithmetic as a transformer (a two-token vocabulary ``yes``/``no`` with logits
``log sigmoid(z)`` and ``log sigmoid(-z)``, so ``margin = z``). Reports are
:func:`~shovir_core.models.report_text.template_report` of the findings with ``z > 0``.

=====================  ==========================================  ===================================
name                   evidence                                    stated behaviour (a test holds it)
=====================  ==========================================  ===================================
``ref-blind-prior``    demo label prevalence of the finding        ignores image and report: Delta_FN
                                                                   = 0, every flip rate 0
``ref-report-reader``  the report's mention/negation of the        ignores the image: swap flip rate 0
                       finding (prior when no report)              in both report arms
``ref-image-classifier``  the CNN's probability (``cnn.py``)       ignores the report: present ==
                                                                   absent
``ref-anchored@w``     the report on a hashed share w of (report,  report-present flip rate = (1 - w)
                       question) pairs, else the image; under a    x report-absent; w = 1: 0; a
                       framing, w times :data:`FRAMING_DISCOUNT`   warning reads as ref-anchored@(w/2)
``ref-context-shortcut``  the co-occurring findings' boxes, never  OCO on c leaves its call of c
                       the finding's own (``boxes`` input)         unchanged; DOCO turns calls off
``ref-distance-planted``  a 2-D code of the image's bytes (its     flip probability ε + (1 − 2ε)θ/π on
                       "vision tower"); never the report           a pair whose codes are θ apart
=====================  ==========================================  ===================================

Every reference model embeds images (:meth:`ReferenceModel.vision_embedding`) with the reference
CNN's pooled penultimate features, except ``ref-distance-planted``, whose embedding is its code.

Parameters (priors, CNN weights, context thresholds) come from
``python -m shovir_core.training.reference`` and live in ``shovir_core/resources/ref_*``.
"""
from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from typing import Sequence

import numpy as np

from .. import paths
from ..labels import FINDINGS_13
from .protocol import VLM, Box, ScoreRequest, image_fingerprint, to_gray_float
from .prompts import ANSWER_OPTIONS
from .readouts import TokenFamilies, parse_answer, yes_no_readout
from .report_text import COMPOSITE, finding_of_question, read_report, template_report
from .spec import ModelSpec, code_sha256

__all__ = [
    "ReferenceModel", "BlindPrior", "ReportReader", "ImageClassifier", "Anchored", "ContextShortcut",
    "REFERENCE_MODELS", "REFERENCE_SPECS", "build_reference", "context_texture", "context_textures", "PARAMS_FILE", "WEIGHTS_FILE",
    "DistancePlanted", "planted_flip_probability", "EVIDENCE_CLIP", "FRAMING_DISCOUNT", "PRIOR_CALL",
]

PARAMS_FILE = "ref_reference_models.json"
WEIGHTS_FILE = "ref_image_classifier.safetensors"

REPORT_LOGIT = 4.0
"""Evidence of a positive (+) or negated (-) mention; an unmentioned finding gets the prior's evidence."""
PRIOR_CALL = 0.3
"""``ref-blind-prior`` calls a finding when its training prevalence is at least this."""
CONTEXT_GAIN = 4.0
"""Logit per calibration scale unit by which the context texture lies below the finding's threshold."""
CONTEXT_CAP = 0.05
"""Largest local contrast one pixel contributes to the context texture (about 13 of 255 grey levels)."""
_CLIP = 12.0
EVIDENCE_CLIP = _CLIP
"""Every reference model's evidence logit (= its margin) is clipped to ±EVIDENCE_CLIP."""
FRAMING_DISCOUNT: dict[str, float] = {"historical": 1.0, "warning": 0.5}
"""Factor on ``ref-anchored@w``'s report weight when the report comes with a framing sentence
(:data:`shovir_core.models.prompts.FRAMINGS`, ModaLens App. D): a report framed as unreliable
(``warning``) weighs half as much, one framed as historical context is read as plain."""

_FAMILIES = TokenFamilies(0, 1, (0,), (1,), {0: "yes", 1: "no"})


def _logit(p: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return float(np.log(p) - np.log1p(-p))


def _sigmoid(z: float) -> float:
    return float(1.0 / (1.0 + np.exp(-z)))


@lru_cache(maxsize=1)
def _load_params() -> dict:
    path = paths.resources_root() / PARAMS_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"reference-model parameters {path} are missing: run `python -m shovir_core.training.reference`"
        )
    return json.loads(path.read_text())


@lru_cache(maxsize=1)
def _reference_cnn():
    """The reference CNN (``ref-image-classifier``'s weights) in eval mode, loaded once per process."""
    from safetensors.torch import load_file

    from .cnn import CLASSES, build_cnn

    net = build_cnn(n_classes=len(CLASSES))
    net.load_state_dict(load_file(str(paths.resources_root() / WEIGHTS_FILE)))
    net.eval()
    return net


def _fingerprints(images: Sequence[np.ndarray | None]) -> list[str]:
    """:func:`~shovir_core.models.protocol.image_fingerprint` of each image, hashing each array object once.

    A call's requests usually share one array per image (14 questions, both report arms), so this
    hashes each image once per call instead of once per request.
    """
    seen: dict[int, str] = {}
    out = []
    for image in images:
        key = id(image)  # the list holds every array while this runs, so ids are not reused
        if key not in seen:
            seen[key] = image_fingerprint(image)
        out.append(seen[key])
    return out


def context_region(shape: tuple[int, int], boxes: Sequence[Box] | None, finding: str) -> np.ndarray:
    """Boolean mask of the pixels ``ref-context-shortcut`` reads for ``finding``.

    The boxes of the other findings, minus ``finding``'s own boxes; when that leaves nothing (no
    other boxes, or all inside ``finding``'s), every pixel outside ``finding``'s boxes.
    """
    h, w = shape

    def paint(mask, selected, value):
        for _, x1, y1, x2, y2 in selected:
            mask[max(int(np.floor(y1)), 0):min(int(np.ceil(y2)), h),
                 max(int(np.floor(x1)), 0):min(int(np.ceil(x2)), w)] = value
        return mask

    own = [b for b in boxes or () if b[0] == finding]
    other = [b for b in boxes or () if b[0] != finding]
    region = paint(paint(np.zeros(shape, dtype=bool), other, True), own, False)
    return region if region.any() else paint(np.ones(shape, dtype=bool), own, False)


def context_texture(gray: np.ndarray, boxes: Sequence[Box] | None, finding: str) -> float:
    """Mean clipped local contrast ``min(|dx| + |dy|, CONTEXT_CAP)`` over :func:`context_region`.

    A pixel counts when it and its right and lower neighbours all lie in the region, so pixels in
    ``finding``'s own boxes cannot move the value (a region too thin to hold such a pixel gives 0).
    Clipping bounds what one noisy pixel can add, so the value grows with the share of the region
    that is disturbed.
    """
    return context_textures(gray, boxes, (finding,))[finding]


def context_textures(gray: np.ndarray, boxes: Sequence[Box] | None, findings: Sequence[str]) -> dict[str, float]:
    """:func:`context_texture` of each of ``findings``, the image's contrast computed once.

    Findings with the same own boxes (most often none) read the same region, which is averaged once;
    the values are those of :func:`context_texture` bit for bit (the same selection of the same array).

    >>> g = np.zeros((8, 8)); g[::2] = 40.0
    >>> b = [("Nodule", 0, 0, 4, 4), ("Mass", 4, 4, 8, 8)]
    >>> t = context_textures(g, b, ["Nodule", "Mass", "Edema"])
    >>> [t[f] == context_texture(g, b, f) for f in ("Nodule", "Mass", "Edema")]
    [True, True, True]
    """
    g = np.asarray(gray, dtype=np.float64)
    contrast = np.minimum(np.abs(np.diff(g, axis=1))[:-1, :] + np.abs(np.diff(g, axis=0))[:, :-1], CONTEXT_CAP)
    by_own: dict[tuple, float] = {}
    out = {}
    for finding in findings:
        own = tuple(b for b in boxes or () if b[0] == finding)
        if own not in by_own:
            keep = context_region(g.shape, boxes, finding)
            valid = keep[:-1, :-1] & keep[:-1, 1:] & keep[1:, :-1]
            by_own[own] = float(contrast[valid].mean()) if valid.any() else 0.0
        out[finding] = by_own[own]
    return out


class ReferenceModel(VLM):
    """Base of the reference models: evidence logit -> readouts, reports from positive calls."""

    stated_behaviour: str = ""

    def __init__(self, name: str) -> None:
        self.name = name
        self.params = _load_params()

    # evidence ------------------------------------------------------------------------------
    def _finding_logits(self, image: np.ndarray | None, report: str | None,
                        boxes: Sequence[Box] | None, *, fingerprint: str | None = None) -> dict[str, float]:
        """Evidence logit for each of the 13 findings (``fingerprint``: the image's, when known)."""
        raise NotImplementedError

    def _request_logits(self, req: ScoreRequest, fingerprint: str) -> dict[str, float]:
        """Evidence logits of one request; the default ignores the framing sentence."""
        return self._finding_logits(req.image, req.report, req.boxes if self.uses_boxes else None,
                                    fingerprint=fingerprint)

    def _evidence(self, logits: dict[str, float], finding: str) -> float:
        if finding == COMPOSITE:
            p_none = float(np.prod([1.0 - _sigmoid(logits[f]) for f in FINDINGS_13]))
            return _logit(1.0 - p_none)
        return logits[finding]

    # protocol ------------------------------------------------------------------------------
    def generate_reports(self, images, *, prompt=None, max_new_tokens=None, boxes=None) -> list[str]:
        if boxes is not None and len(boxes) != len(images):
            raise ValueError(f"{self.name}: {len(images)} images but {len(boxes)} box lists")
        out = []
        for i, image in enumerate(images):
            logits = self._finding_logits(image, None, None if boxes is None else boxes[i])
            out.append(template_report([f for f, z in logits.items() if z > 0]))
        return out

    def score_yes_no(self, requests: Sequence[ScoreRequest], *, answer_tokens: int = 0) -> list[dict]:
        requests = list(requests)
        fingerprints = _fingerprints([req.image for req in requests])
        memo: dict[tuple, dict[str, float]] = {}
        results = []
        for req, fingerprint in zip(requests, fingerprints):
            finding = req.finding or finding_of_question(req.question)
            if finding != COMPOSITE and finding not in FINDINGS_13:
                raise ValueError(f"{self.name}: request {req.question!r}: unknown finding {finding!r}")
            key = (fingerprint, req.report, req.framing, json.dumps(req.boxes) if self.uses_boxes else None)
            if key not in memo:
                memo[key] = self._request_logits(req, fingerprint)
            z = float(np.clip(self._evidence(memo[key], finding), -_CLIP, _CLIP))
            row = np.array([-np.logaddexp(0.0, -z), -np.logaddexp(0.0, z)])
            res = yes_no_readout(row, _FAMILIES)
            res["top1_token"] = _FAMILIES.names[res["top1_id"]]
            res["generated"] = res["answer"] = res["compliant"] = None
            if answer_tokens > 0:
                options = ANSWER_OPTIONS[req.instruction]
                p = _sigmoid(z)
                res["generated"] = "Uncertain" if "Uncertain" in options and 0.4 < p < 0.6 else \
                    ("Yes" if z > 0 else "No")
                res["answer"], res["compliant"] = parse_answer(res["generated"], options=options)
            res["n_input_tokens"] = None
            results.append(res)
        return results

    def vision_embedding(self, images) -> list[np.ndarray]:
        """The reference CNN's globally pooled penultimate features (64 per image; ``cnn.py``).

        One image per forward pass, for the reason given in :meth:`ImageClassifier.probabilities`.
        """
        import torch

        from .cnn import penultimate_features, preprocess

        net, cfg = _reference_cnn(), self.params["cnn"]
        out = []
        with torch.inference_mode():
            for i, image in enumerate(images):
                if image is None:
                    raise ValueError(f"{self.name}: vision_embedding got no image at position {i}")
                x = (preprocess(to_gray_float(image)) - cfg["mean"]) / cfg["std"]
                feats = penultimate_features(net, torch.from_numpy(x[None, None].astype(np.float32)))
                out.append(feats.double().numpy()[0])
        return out

    def identity(self) -> dict:
        return {"name": self.name, "kind": "reference", "class": type(self).__name__,
                "params_sha256": self.params["sha256"], "code_sha256": code_sha256("reference")}

    def provenance(self) -> dict:
        return {**self.identity(), "stated_behaviour": self.stated_behaviour,
                "params_file": PARAMS_FILE, "trained_on": self.params.get("dataset")}


class BlindPrior(ReferenceModel):
    """Answers and reports from the demo label prevalence; ignores image and report.

    A finding is called (reported, answered yes) when its training prevalence is at least
    :data:`PRIOR_CALL`: the model writes the same non-empty report of the most prevalent findings
    for every image, so its F1 is above zero and its Delta_FN = 0 and flip rates 0 are tested on
    positive calls, not on an empty report.
    """

    stated_behaviour = ("Ignores image and report: the same report of the findings with prevalence >= 0.3 for "
                        "every image, so Delta_FN = 0 with F1 > 0, ShoViR flip rates 0 on its positive calls and "
                        "ModaLens swap flip rate 0 in both arms.")

    def _finding_logits(self, image, report, boxes, *, fingerprint=None):
        return {f: _logit(self.params["priors"][f]) - _logit(PRIOR_CALL) for f in FINDINGS_13}


class ReportReader(BlindPrior):
    """Answers from the report's mentions: +REPORT_LOGIT for a positive mention, -REPORT_LOGIT for a
    negated one; a finding the report does not mention (or no report at all) falls back on the
    ``ref-blind-prior`` evidence, so a report without any sentence about the finding is answered
    exactly as no report."""

    stated_behaviour = ("Ignores the image: ModaLens swap flip rate 0 with and without the report; "
                        "report absent answers, and answers on findings the report does not mention, equal "
                        "ref-blind-prior.")

    def _finding_logits(self, image, report, boxes, *, fingerprint=None):
        prior = super()._finding_logits(image, None, boxes)
        if report is None:
            return prior
        read = read_report(report)
        return {f: REPORT_LOGIT * v if v else prior[f] for f, v in read.items()}


class ImageClassifier(ReferenceModel):
    """The small CNN of :mod:`shovir_core.models.cnn`; ignores the report."""

    stated_behaviour = ("Ignores the report: report-present outputs equal report-absent outputs. Trained with "
                        "occlusion augmentation, so noise over a finding's own boxes (OCO) removes more of its "
                        "calls than the same noise in random boxes (RO-control).")

    _MEMO_SIZE = 4096

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._net = None
        self._memo: dict[str, np.ndarray] = {}

    def _load(self):
        if self._net is None:
            import torch
            from safetensors.torch import load_file

            from .cnn import CLASSES, build_cnn

            net = build_cnn(n_classes=len(CLASSES))
            net.load_state_dict(load_file(str(paths.resources_root() / WEIGHTS_FILE)))
            net.eval()
            self._net, self._torch = net, torch
        return self._net

    def probabilities(self, images: Sequence[np.ndarray]) -> np.ndarray:
        """CNN probabilities, shape (n, len(cnn.CLASSES)), one forward pass per image.

        Not batched, on purpose: a batch of float32 images takes another convolution kernel
        (oneDNN) that sums in another order, so an image's probabilities would move with the
        other images of its batch (CNN logits by up to about 1e-5), and the inference cache
        needs the output for an input to depend on that input only. One image per pass runs the
        same kernels whatever the call holds.
        """
        from .cnn import CLASSES, preprocess

        net = self._load()
        cfg = self.params["cnn"]
        out = np.zeros((len(images), len(CLASSES)))
        with self._torch.inference_mode():
            for k, image in enumerate(images):
                x = np.stack([(preprocess(to_gray_float(image)) - cfg["mean"]) / cfg["std"]])
                logits = net(self._torch.from_numpy(x[:, None].astype(np.float32)))
                out[k] = 1.0 / (1.0 + np.exp(-logits.double().numpy()[0]))
        return out

    def _image_probabilities(self, image: np.ndarray, fingerprint: str | None = None) -> np.ndarray:
        """The CNN probabilities of one image, computed once per distinct image (by fingerprint)."""
        key = image_fingerprint(image) if fingerprint is None else fingerprint
        if key not in self._memo:  # the same image is asked many questions (all-14 design, both report arms)
            if len(self._memo) >= self._MEMO_SIZE:
                self._memo.pop(next(iter(self._memo)))
            self._memo[key] = self.probabilities([image])[0]
        return self._memo[key]

    def _finding_logits(self, image, report, boxes, *, fingerprint=None):
        from .cnn import CLASSES

        if image is None:
            return {f: _logit(self.params["priors"][f]) for f in FINDINGS_13}
        probs = dict(zip(CLASSES, self._image_probabilities(image, fingerprint)))
        return {f: _logit(float(probs[f])) if f in probs else _logit(self.params["priors"][f]) for f in FINDINGS_13}

    def generate_reports(self, images, *, prompt=None, max_new_tokens=None, boxes=None) -> list[str]:
        from .cnn import CLASSES

        images = list(images)
        for i, image in enumerate(images):
            if image is None:
                raise ValueError(f"{self.name}: generate_reports got no image at position {i}")
        return [template_report([c for c, p in zip(CLASSES, self._image_probabilities(image, key)) if p > 0.5])
                for image, key in zip(images, _fingerprints(images))]


class Anchored(ImageClassifier):
    """Follows the report (``ref-report-reader``) on a share ``w`` of trials and the image (the CNN) on the rest.

    With the report present, each (report, question) pair draws ``u = gate(report_sha256, finding)``
    in [0, 1) from the report's SHA-256 (the ``report_sha256`` a record stores) and the finding; the answer follows the report when
    ``u < w`` and the image otherwise. The gate does not depend on the image, so the source and the
    substitute of a trial take the same branch: report-present flips happen only on image-branch
    trials, where the answer is exactly the report-absent one. Hence the planted behaviour,
    on every design: report-present flip rate = (1 - w) x report-absent flip rate in expectation
    (the realised gate share is in the record through the margins), w = 1 gives flip rate 0 and
    w = 0 gives report-present outputs equal to report-absent ones. The gate is nested in ``w``
    (a trial that follows the report at w follows it at every larger w), so the flip rate falls
    monotonically along a sweep of w on the same trials.

    The gate is a function of the pair's text, so the realised share of *trials* that follow the
    report is near w only when the trials' reports differ: trials that share a byte-identical report
    share one draw. The ModaLens demo's template reports therefore state every negative and draw
    their phrasing per study (:mod:`shovir_core.data.template_reports`, ``wording="varied"``), which
    also makes the report branch answer every stated finding from the report rather than from the
    ``ref-blind-prior`` fallback of an unmentioned one (on the one-question demo design the share is
    0.51 at w = 0.5; a test holds it within 0.06 of w).

    (A logit mixture ``w * report + (1 - w) * image`` does not anchor: where the report and a
    confident image disagree -- the one-question design asks each case's positive finding, on
    which the CNN's margin averages -6 against the report's +4 -- the mixture lands near 0, and
    the report *raises* the flip rate.)

    Planted framing effect (ModaLens App. D validation): a report preceded by a framing sentence is
    followed on a share ``w * FRAMING_DISCOUNT[framing]`` of pairs; the warning ("may not describe
    this image and may be wrong") halves it, the historical framing leaves it unchanged. The gate is
    nested in the share, so with the warning ``ref-anchored@0.5`` answers exactly as
    ``ref-anchored@0.25`` with the plain report, and with the historical framing exactly as itself.
    """

    stated_behaviour = ("Report present: a share w of (report, question) pairs, chosen by a hash of the report "
                        "and question (the same on both images), answer from the report, the rest from the image; "
                        "report-present flip rate = (1 - w) x report-absent flip rate in expectation; "
                        "w = 1: flip rate 0; w = 0: report-present outputs equal report-absent outputs; with a framing "
                        "sentence the share is w * FRAMING_DISCOUNT[framing] (warning 0.5, historical 1), so a "
                        "warning-framed report gives exactly the outputs of ref-anchored@(w/2) without framing.")

    def __init__(self, name: str, *, w: float) -> None:
        if not 0.0 <= w <= 1.0:
            raise ValueError(f"{name}: anchoring weight w = {w} must lie in [0, 1]")
        super().__init__(name)
        self.w = float(w)
        self._reader = ReportReader("ref-report-reader")

    @staticmethod
    def gate(report_sha256: str, finding: str) -> float:
        """The uniform draw in [0, 1) that decides whether a (report, finding) pair follows the report.

        ``report_sha256`` is the hex SHA-256 of the report text (UTF-8), as records store it.
        """
        digest = hashlib.sha256(f"anchored-gate|{finding}|{report_sha256}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2.0 ** 64

    def _finding_logits(self, image, report, boxes, *, fingerprint=None):
        img = super()._finding_logits(image, None, boxes, fingerprint=fingerprint)
        if report is None:
            return img
        rep = self._reader._finding_logits(None, report, None)
        return {"image": img, "report": rep, "text": report, "w": self.w}

    def _request_logits(self, req: ScoreRequest, fingerprint: str) -> dict:
        """The share that follows the report is ``w * FRAMING_DISCOUNT[framing]`` under a framing sentence."""
        logits = self._finding_logits(req.image, req.report, None, fingerprint=fingerprint)
        if "text" in logits and req.framing is not None:
            logits = {**logits, "w": self.w * FRAMING_DISCOUNT[req.framing]}
        return logits

    def _evidence(self, logits, finding: str) -> float:
        if "text" not in logits:
            return super()._evidence(logits, finding)
        sha = hashlib.sha256(logits["text"].encode()).hexdigest()
        branch = "report" if self.gate(sha, finding) < logits["w"] else "image"
        return super()._evidence(logits[branch], finding)

    def identity(self) -> dict:
        return {**super().identity(), "w": self.w}


class ContextShortcut(ReferenceModel):
    """Predicts each finding from the pixels of the co-occurring findings' boxes, never its own.

    The boxes arrive with the request (``ScoreRequest.boxes``, ``generate_reports(boxes=...)``):
    the boxes of the original image, also when the shown image is perturbed. Evidence for finding
    ``f`` is ``CONTEXT_GAIN * (t_f - T_f) / s`` with ``T_f`` :func:`context_texture` over
    :func:`context_region` (the other findings' boxes; everything outside ``f``'s boxes when there
    are none), ``t_f`` the demo quantile at ``prevalence(f)`` and ``s`` the demo spread: an intact,
    smooth co-finding region reads as the finding, a disturbed one does not. Noise in the other
    findings' boxes (DOCO) turns calls of ``f`` off; noise in ``f``'s own boxes (OCO) cannot move
    them, and random boxes that avoid all annotated boxes (RO) move them only on images without
    co-finding boxes.
    """

    uses_boxes = True
    stated_behaviour = ("OCO on class c leaves its call of c unchanged (OCO flip rate 0, against the baseline "
                        "and against RO); DOCO noise in the co-finding boxes turns calls of c off, so DOCO flip "
                        "rate > OCO flip rate.")

    def _finding_logits(self, image, report, boxes, *, fingerprint=None):
        if image is None:
            return {f: _logit(self.params["priors"][f]) for f in FINDINGS_13}
        gray = to_gray_float(image)
        ctx = self.params["context"]
        texture = context_textures(gray, boxes, FINDINGS_13)
        return {f: CONTEXT_GAIN * (ctx["thresholds"][f] - texture[f]) / ctx["scale"] for f in FINDINGS_13}


PLANT_SEED = 15
"""Seed of ``ref-distance-planted``'s per-question answer directions."""
PLANT_NOISE = 0.1
"""η: probability that ``ref-distance-planted`` inverts an answer (independently per image and question)."""
PLANT_LOGIT = 3.0
"""Evidence logit of a ``ref-distance-planted`` answer (+ for yes, − for no)."""
_PLANT_QUESTIONS = (*FINDINGS_13, COMPOSITE)


def _plant_code(fingerprint: str) -> np.ndarray:
    return np.random.default_rng(int(fingerprint[:32], 16)).standard_normal(2)


@lru_cache(maxsize=1)
def _plant_directions() -> np.ndarray:
    angle = np.random.default_rng(PLANT_SEED).uniform(0.0, 2.0 * np.pi, len(_PLANT_QUESTIONS))
    return np.column_stack([np.cos(angle), np.sin(angle)])


def planted_flip_probability(code_c, code_d, *, noise: float = PLANT_NOISE) -> np.ndarray:
    """``ref-distance-planted``'s flip probability on pairs with codes ``code_c``, ``code_d`` ((n, 2) each).

    P(flip) = ε + (1 − 2ε)·θ/π, θ the angle between the two codes and ε = 2η(1 − η) the probability
    that exactly one of the two answers is inverted (η = ``noise``).

    >>> planted_flip_probability([[1.0, 0.0]], [[-2.0, 0.0]], noise=0.0).tolist()
    [1.0]
    """
    a, b = np.atleast_2d(np.asarray(code_c, dtype=float)), np.atleast_2d(np.asarray(code_d, dtype=float))
    if a.shape != b.shape or a.shape[1] != 2:
        raise ValueError(f"codes must be two (n, 2) arrays, got {a.shape} and {b.shape}")
    cos = np.einsum("ij,ij->i", a, b) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    theta = np.arccos(np.clip(cos, -1.0, 1.0))
    eps = 2.0 * noise * (1.0 - noise)
    return eps + (1.0 - 2.0 * eps) * theta / np.pi


class DistancePlanted(ReferenceModel):
    """Answers from a 2-D code of the image, so its flips depend on the pair's image distance by construction.

    Vision tower (:meth:`vision_embedding`): the image's code u(x), two standard normals from a
    generator seeded by the image's SHA-256 fingerprint, so the codes of distinct images are
    independent and isotropic. The answer to question q (13 findings and the composite) is yes iff
    ``(w_q · u(x) > 0) XOR n_q(x)``: w_q a fixed direction per question (seed :data:`PLANT_SEED`),
    n_q(x) ~ Bernoulli(η = :data:`PLANT_NOISE`) drawn from the image fingerprint and q. The report
    and the labels are never read; without an image it answers from the label priors.

    Planted behaviour: for a pair of distinct images whose codes are θ apart, P(flip) = ε + (1 −
    2ε)·θ/π with ε = 2η(1 − η) (the sign of w·u differs on two isotropic codes θ apart with
    probability θ/π), independently across pairs of distinct images, the same with and without the
    report (:func:`planted_flip_probability`). ModaLens App. B regresses flip on z(distance) + label
    change + report presence; on this model that regression estimates the logistic projection of
    the planted curve on the cohort's rows -- its planted odds ratio per SD of distance
    (:func:`shovir_core.stats.fractional_logistic`) -- and an odds ratio of exactly 1 for the report.
    """

    stated_behaviour = ("Flips depend on image distance by construction: P(flip) = eps + (1 - 2 eps) theta/pi for "
                        "codes theta apart (eps = 2 eta (1 - eta), eta = 0.1); report and labels never read, so "
                        "report-present flips equal report-absent flips.")

    def _finding_logits(self, image, report, boxes, *, fingerprint=None):
        if image is None:
            out = {f: _logit(self.params["priors"][f]) for f in FINDINGS_13}
            out[COMPOSITE] = ReferenceModel._evidence(self, out, COMPOSITE)
            return out
        key = image_fingerprint(image) if fingerprint is None else fingerprint
        side = _plant_directions() @ _plant_code(key) > 0.0
        seed = int(key[:32], 16)
        noise = [np.random.default_rng([seed, q]).random() < PLANT_NOISE for q in range(len(_PLANT_QUESTIONS))]
        return {f: PLANT_LOGIT if (s != n) else -PLANT_LOGIT for f, s, n in zip(_PLANT_QUESTIONS, side, noise)}

    def _evidence(self, logits, finding):
        return logits[finding]

    def generate_reports(self, images, *, prompt=None, max_new_tokens=None, boxes=None) -> list[str]:
        out = []
        for image in images:
            logits = self._finding_logits(image, None, None)
            out.append(template_report([f for f in FINDINGS_13 if logits[f] > 0]))
        return out

    def vision_embedding(self, images) -> list[np.ndarray]:
        """The image's 2-D code (see the class docstring)."""
        out = []
        for i, key in enumerate(_fingerprints(list(images))):
            if key == "none":
                raise ValueError(f"{self.name}: vision_embedding got no image at position {i}")
            out.append(_plant_code(key))
        return out


REFERENCE_MODELS = {
    "ref-blind-prior": BlindPrior,
    "ref-report-reader": ReportReader,
    "ref-image-classifier": ImageClassifier,
    "ref-anchored": Anchored,
    "ref-context-shortcut": ContextShortcut,
    "ref-distance-planted": DistancePlanted,
}


REFERENCE_SPECS: tuple[ModelSpec, ...] = tuple(
    ModelSpec(n, "reference", paper="reference", dtype="float32", notes=cls.stated_behaviour)
    for n, cls in REFERENCE_MODELS.items())
"""The registry entries of the reference models (:data:`shovir_core.models.REGISTRY` includes them)."""


def build_reference(name: str) -> ReferenceModel:
    """Build a reference model by registry name (``ref-anchored@0.5`` sets ``w``; bare = 0.5)."""
    base, _, arg = name.partition("@")
    if base not in REFERENCE_MODELS:
        raise KeyError(f"unknown reference model {name!r}; known: {sorted(REFERENCE_MODELS)}")
    if base == "ref-anchored":
        try:
            w = float(arg) if arg else 0.5
        except ValueError:
            raise ValueError(f"{name!r}: the anchoring weight after '@' must be a number in [0, 1]") from None
        return Anchored(f"ref-anchored@{w:g}", w=w)
    if arg:
        raise ValueError(f"{name!r}: only ref-anchored takes an '@' argument")
    return REFERENCE_MODELS[base](name)


def params_sha256(params: dict) -> str:
    """Hash of the parameter record without its own hash field."""
    body = {k: v for k, v in params.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
