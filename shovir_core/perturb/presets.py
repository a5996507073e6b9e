"""Named noise presets: the paper's description and the authors' reference code.

The ShoViR paper (Supp. §B as summarised in the main text) says: take the
pixels whose intensity lies between the 1st and 99th percentiles, compute their
mean and standard deviation, draw i.i.d. Gaussian noise with those statistics,
and blend ``x' = (1 - p) x + p n`` inside the target region. The public
reference code (arco-group/ShoViR-Bench ``src/benchmark/preprocess.py``@2a15203)
differs in several places; each difference is an option here, and the
``"reference-code"`` preset switches all of them on:

===================  =====================  ==================================================
option               ``"paper"``            ``"reference-code"``
===================  =====================  ==================================================
``engine``           ``"vectorised"``       ``"reference-code"``: full-frame arrays in the
                                            reference code's order of operations, Pillow's
                                            ``GaussianBlur`` for the noise (radius 2) and the
                                            8-bit feathering mask (radius 6); consumes a passed
                                            ``numpy.random.RandomState`` exactly as the
                                            reference functions consume ``np.random``
``center``           ``"mean"``             ``"median"``
``trim``             ``(1, 99)``            ``(1, 99)``
``min_std``          ``0``                  ``1`` (in 8-bit units)
``smooth_radius``    ``0`` (i.i.d.)         ``2`` (Gaussian blur of the noise)
``stats_region``     ``"image"``            ``"outside"`` (outside the occluded union)
``feather_radius``   ``0`` (hard edges)     ``6`` (Gaussian-feathered blending mask)
``feather_kernel``   ``"gaussian"``         ``"pillow"`` (the 8-bit mask ``uint8(mask p 255)``
                                            blurred by Pillow's ``GaussianBlur``, ``/ 255``, per p;
                                            kept by every variant of the preset)
``channels``         ``"image"``            ``"rgb"`` (three channels, independent noise)
``rounding``         ``"round"``            ``"truncate"`` (``astype`` casts; RO box sizes ``int()``)
``footprint``        ``"cover"``            ``"truncate"`` (box edges ``int()``, ``_clip_bbox``)
``iou_inclusive``    ``False`` (IoU < t)    ``True`` (IoU <= t)
``doco_iou_filter``  ``"always"``           ``"except-padchest"`` (the reference code loads the
                                            unfiltered per-class files for PadChest-GR)
``ro_sizes``         ``"dataset"``          ``"reference"`` (PadChest-GR constants)
``ro_noise``         ``"matched"``          ``"plain"`` (untrimmed mean/std, no blur/feather,
                                            boxes filled one after another)
``ro_avoid``         ``"all"`` (every       ``"sets"`` (only ``B_c`` and the ``B_c̄`` DOCO uses;
                     annotated box)         IoU-dropped boxes may be covered)
``input_scaling``    ``"none"``             ``"minmax-uint8"`` (min-max to 8 bits first)
``fill``             ``"matched"``          ``"matched"``
``text_metrics``     ``"project"``          ``"reference-code"`` (BLEU/ROUGE-L as
                                            ``evaluations/run_eval.py`` @07a7a6d)
===================  =====================  ==================================================

With ``input_scaling="minmax-uint8"`` the input is first mapped to
``floor(255 * (x - min) / (max - min))`` as ``uint8`` (the reference code's
``_to_uint8_rgb``; a constant image becomes zeros), so the preset's baseline
(p = 0) is that 8-bit image and every output is ``uint8``. With ``"none"`` the
input's dtype (uint8 or uint16) is kept.

The vectorised engine smooths with :func:`scipy.ndimage.gaussian_filter` (``sigma =
radius``) over a window around the boxes and shares one noise field across a p grid;
the reference-code engine reproduces the reference functions byte for byte (see
:mod:`shovir_core.perturb.reference`). ``fill`` selects the occluder of the
occluder-type ablation (vectorised engine only): ``"matched"`` Gaussian noise,
``"uniform"`` noise over the whole intensity range, ``"mean"`` (the trimmed mean,
constant) or ``"black"`` (zeros). ``text_metrics`` picks the BLEU/ROUGE convention of
:mod:`shovir_core.metrics.text`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

__all__ = ["Preset", "PRESETS", "resolve_preset"]


@dataclass(frozen=True)
class Preset:
    """Every option of the matched-noise generation and blending.

    Parameters
    ----------
    name : str
        Preset name recorded in every output description.
    center : {"mean", "median"}
        Centre of the noise distribution (trimmed mean or trimmed median).
    trim : tuple of float or None
        Percentiles ``(low, high)``; statistics use the pixels whose value lies
        in ``[P_low, P_high]`` (inclusive). ``None`` uses every pixel.
    min_std : float
        Lower bound of the noise standard deviation, in 8-bit units (scaled by
        ``max_value / 255`` for 16-bit images).
    smooth_radius : float
        Standard deviation (pixels) of the Gaussian that smooths the noise; 0
        keeps it i.i.d.
    stats_region : {"image", "outside"}
        Pixels the statistics come from: the whole image, or the pixels outside
        the occluded union (falls back to the whole image when fewer than
        ``min_pixels`` remain).
    feather_radius : float
        Standard deviation (pixels) of the Gaussian that feathers the blending
        mask; 0 gives hard edges.
    channels : {"image", "rgb"}
        ``"image"`` keeps the input's channels; ``"rgb"`` returns three channels
        (a grayscale input is replicated, as PIL's ``convert("RGB")``) with noise
        drawn independently per channel.
    rounding : {"round", "truncate"}
        How float results are cast back to the integer dtype.
    iou_inclusive : bool
        DOCO rule: keep a co-finding box when its IoU with every target box is
        ``< t`` (False, paper) or ``<= t`` (True, reference code).
    ro_sizes : {"dataset", "reference"}
        Random-occlusion box sizes: drawn from the dataset's own box-size pool
        (paper) or from the reference code's truncated normals.
    ro_noise : {"matched", "plain"}
        Random occlusion uses the same matched noise (paper) or the reference
        code's fast path (untrimmed mean and std of the whole image, no
        smoothing, no feathering).
    min_pixels : int
        Fewer trimmed (or outside) pixels than this fall back to all pixels.
    input_scaling : {"none", "minmax-uint8"}
        ``"minmax-uint8"`` rescales the input to 8 bits (min-max, truncated)
        before anything else, as the reference code does.
    engine : {"vectorised", "reference-code"}
        The implementation (see the module docstring); ``"reference-code"``
        requires the reference values of the noise options above.
    footprint : {"cover", "truncate"}
        Pixels a box covers (:func:`~shovir_core.perturb.boxes.footprint`).
    ro_avoid : {"all", "sets"}
        What random boxes must not overlap: every annotated box, or only
        ``B_c`` and the ``B_c̄`` used by DOCO.
    doco_iou_filter : {"always", "except-padchest"}
        Whether DOCO applies the IoU rule on every dataset or not on PadChest-GR.
    fill : {"matched", "uniform", "mean", "black"}
        The occluder (occluder-type ablation).
    feather_kernel : {"gaussian", "pillow"}
        How the vectorised engine feathers the blending mask: ``"gaussian"`` (scipy, ``sigma =
        feather_radius``, reaching 4 sigma: 24 px at 6) or ``"pillow"``, the reference code's weight
        (:func:`shovir_core.perturb.reference.feather_alpha`: the 8-bit ``mask * p`` blurred by Pillow,
        reaching about 15 px at radius 6), so a variant of ``"reference-code"`` that runs on the
        vectorised engine keeps the authors' blending weight exactly.
    text_metrics : {"project", "reference-code"}
        BLEU / ROUGE-L convention (:data:`shovir_core.metrics.text.TEXT_CONVENTIONS`).
    """

    name: str = "paper"
    center: Literal["mean", "median"] = "mean"
    trim: tuple[float, float] | None = (1.0, 99.0)
    min_std: float = 0.0
    smooth_radius: float = 0.0
    stats_region: Literal["image", "outside"] = "image"
    feather_radius: float = 0.0
    channels: Literal["image", "rgb"] = "image"
    rounding: Literal["round", "truncate"] = "round"
    iou_inclusive: bool = False
    ro_sizes: Literal["dataset", "reference"] = "dataset"
    ro_noise: Literal["matched", "plain"] = "matched"
    min_pixels: int = 32
    input_scaling: Literal["none", "minmax-uint8"] = "none"
    text_metrics: Literal["project", "reference-code"] = "project"
    engine: Literal["vectorised", "reference-code"] = "vectorised"
    footprint: Literal["cover", "truncate"] = "cover"
    ro_avoid: Literal["all", "sets"] = "all"
    doco_iou_filter: Literal["always", "except-padchest"] = "always"
    fill: Literal["matched", "uniform", "mean", "black"] = "matched"
    feather_kernel: Literal["gaussian", "pillow"] = "gaussian"

    def __post_init__(self) -> None:
        choices = {
            "center": ("mean", "median"), "stats_region": ("image", "outside"),
            "channels": ("image", "rgb"), "rounding": ("round", "truncate"),
            "ro_sizes": ("dataset", "reference"), "ro_noise": ("matched", "plain"),
            "input_scaling": ("none", "minmax-uint8"), "text_metrics": ("project", "reference-code"),
            "engine": ("vectorised", "reference-code"), "footprint": ("cover", "truncate"),
            "ro_avoid": ("all", "sets"), "doco_iou_filter": ("always", "except-padchest"),
            "fill": ("matched", "uniform", "mean", "black"), "feather_kernel": ("gaussian", "pillow"),
        }
        for field, allowed in choices.items():
            if getattr(self, field) not in allowed:
                raise ValueError(f"preset {self.name!r}: {field}={getattr(self, field)!r} not in {allowed}")
        if self.trim is not None:
            lo, hi = self.trim
            if not 0.0 <= lo < hi <= 100.0:
                raise ValueError(f"preset {self.name!r}: trim={self.trim!r} must satisfy 0 <= low < high <= 100")
            object.__setattr__(self, "trim", (float(lo), float(hi)))
        for field in ("min_std", "smooth_radius", "feather_radius"):
            if not getattr(self, field) >= 0:
                raise ValueError(f"preset {self.name!r}: {field} must be >= 0, got {getattr(self, field)!r}")
        if self.min_pixels < 1:
            raise ValueError(f"preset {self.name!r}: min_pixels must be >= 1")
        if self.engine == "reference-code":
            wrong = {k: getattr(self, k) for k, v in _REFERENCE_ENGINE.items() if getattr(self, k) != v}
            if wrong:
                raise ValueError(f"preset {self.name!r}: engine='reference-code' implements the reference code's "
                                 f"noise only; these options differ from it: {wrong} (need {_REFERENCE_ENGINE})")

    def replace(self, **changes) -> "Preset":
        """A copy with ``changes``; its name becomes ``"<name>+<option>=<value>,..."``."""
        if not changes:
            return self
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"unknown preset options {sorted(unknown)}")
        name = changes.pop("name", None) or (
            self.name + "+" + ",".join(f"{k}={v}" for k, v in sorted(changes.items())))
        return dataclasses.replace(self, name=name, **changes)

    def to_dict(self) -> dict:
        """JSON-ready options (recorded with every output)."""
        d = dataclasses.asdict(self)
        d["trim"] = list(self.trim) if self.trim is not None else None
        return d

    def for_random_occlusion(self) -> "Preset":
        """The options random occlusion uses (the reference code's fast path when ``ro_noise="plain"``)."""
        if self.ro_noise == "matched":
            return self
        return dataclasses.replace(self, center="mean", trim=None, smooth_radius=0.0,
                                   stats_region="image", feather_radius=0.0, engine="vectorised")


_REFERENCE_ENGINE = {"center": "median", "trim": (1.0, 99.0), "min_std": 1.0, "smooth_radius": 2.0,
                     "stats_region": "outside", "feather_radius": 6.0, "channels": "rgb", "rounding": "truncate",
                     "ro_noise": "plain", "input_scaling": "minmax-uint8", "min_pixels": 32, "fill": "matched",
                     "feather_kernel": "pillow"}
"""The options the reference-code engine implements (it reproduces ``preprocess.py``, not a variant of it)."""

PRESETS: dict[str, Preset] = {
    "paper": Preset(),
    "reference-code": Preset(
        name="reference-code", center="median", trim=(1.0, 99.0), min_std=1.0, smooth_radius=2.0,
        stats_region="outside", feather_radius=6.0, channels="rgb", rounding="truncate",
        iou_inclusive=True, ro_sizes="reference", ro_noise="plain", input_scaling="minmax-uint8",
        text_metrics="reference-code", engine="reference-code", footprint="truncate", ro_avoid="sets",
        doco_iou_filter="except-padchest", feather_kernel="pillow",
    ),
}
"""The two named presets; ``"paper"`` is the default everywhere."""


def resolve_preset(preset: str | Preset | dict) -> Preset:
    """A :class:`Preset` from a name, a preset, or a dict ``{"base": name, **options}``.

    >>> resolve_preset("reference-code").center
    'median'
    >>> resolve_preset({"base": "paper", "center": "median"}).name
    'paper+center=median'
    """
    if isinstance(preset, Preset):
        return preset
    if isinstance(preset, str):
        try:
            return PRESETS[preset]
        except KeyError:
            raise ValueError(f"unknown noise preset {preset!r}; choose one of {sorted(PRESETS)}") from None
    if isinstance(preset, dict):
        options = dict(preset)
        base = resolve_preset(options.pop("base", "paper"))
        if "trim" in options and options["trim"] is not None:
            options["trim"] = tuple(options["trim"])
        if base.engine == "reference-code" and "engine" not in options and set(options) & set(_REFERENCE_ENGINE):
            options["engine"] = "vectorised"  # a variant of the reference options runs on the vectorised engine,
            # keeping the authors' blending weight (feather_kernel "pillow", unless the variant changes it)
        return base.replace(**options)
    raise TypeError(f"preset must be a name, a Preset or a dict, not {type(preset).__name__}")
