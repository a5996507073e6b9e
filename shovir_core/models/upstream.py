"""The authors' own code of the GitHub-code ShoViR models: where it is, what it is, how it is imported.

LLaVA-Rad and Libra-v1 (the Libra code base) and RaDialog (the code shipped in its Hugging Face
repository) are not transformers checkpoints: their modelling code, loaders, conversation templates
and pre-processing live in separate code bases. Their adapters (:mod:`.libra`, :mod:`.radialog`)
import that code and call its own entry points. It is found, in order,

1. as an installed package (``pip install -e <checkout>``): ``import libra`` works;
2. in ``$SHOVIR_CODE_DIR/<folder>`` (a checkout; ``folder`` below), and for RaDialog also in the
   checkpoint folder itself (its Hugging Face repository ships the code next to the weights).

A checkout that is not an installable package imports its own top-level modules by bare name
(RaDialog's ``from LLAVA_Biovil.llava... import``, ``utils``, ``findings_classifier``); the authors'
wrappers put the checkout on ``sys.path``. Here a meta-path finder scoped to the declared top-level
names of that one folder resolves them instead (:func:`import_upstream`), so nothing else on the
path changes; the folder, its git commit and the modules used are recorded in the adapter's
provenance.

Nothing is downloaded; a missing code base raises
:class:`~shovir_core.models.spec.ModelNotAvailableError` naming the repository, the commit the
adapter was written against, the folder searched and the weights the model needs.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .spec import ModelNotAvailableError

__all__ = ["CODE_DIR_ENV", "UpstreamCode", "CodeSource", "UPSTREAM", "locate_code", "import_upstream",
           "git_commit"]

CODE_DIR_ENV = "SHOVIR_CODE_DIR"


@dataclass(frozen=True)
class UpstreamCode:
    """One external code base an adapter runs.

    ``modules`` are the top-level names the adapter imports (the first is the probe);
    ``entry_points`` the callables it uses (named in errors); ``commit`` the commit whose public API
    the adapter follows; ``weights`` what the model needs besides the code.
    """

    key: str
    repo: str
    url: str
    folder: str
    commit: str
    modules: tuple[str, ...]
    entry_points: tuple[str, ...]
    weights: str
    install: str
    wrapper: str = ""

    def describe(self) -> str:
        return (f"{self.repo} ({self.url}, written against commit {self.commit}); entry points "
                f"{', '.join(self.entry_points)}")


@dataclass(frozen=True)
class CodeSource:
    """Where an upstream code base was found (recorded in provenance)."""

    key: str
    kind: str  # "installed" or "checkout"
    location: str
    commit: str | None
    version: str | None = None
    modules: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict:
        return {"code": self.key, "kind": self.kind, "location": self.location, "commit": self.commit,
                "version": self.version, "modules": list(self.modules)}


UPSTREAM: dict[str, UpstreamCode] = {
    "libra": UpstreamCode(
        key="libra", repo="X-iZhang/Libra", url="https://github.com/X-iZhang/Libra", folder="Libra",
        commit="1a4edaf06c2e08141b047c29a6fb5f304fa955a9", modules=("libra",),
        entry_points=("libra.model.builder.load_pretrained_model", "libra.mm_utils.process_images",
                      "libra.mm_utils.tokenizer_image_token", "libra.mm_utils.KeywordsStoppingCriteria",
                      "libra.conversation.conv_templates", "libra.constants.IMAGE_TOKEN_INDEX"),
        weights="the checkpoint folder (X-iZhang/libra-v1.0-7b or X-iZhang/libra-llava-rad, with config.json); "
                "its vision encoder (config.json 'mm_vision_tower') must be in the local Hugging Face cache",
        install="git clone https://github.com/X-iZhang/Libra $SHOVIR_CODE_DIR/Libra (or pip install -e it)",
        wrapper="arco-group/ShoViR-Bench src/benchmark/models/libra@073eb6c, models/llavarad@6fc3066"),
    "radialog": UpstreamCode(
        key="radialog", repo="ChantalPellegrini/RaDialog-interactive-radiology-report-generation",
        url="https://huggingface.co/ChantalPellegrini/RaDialog-interactive-radiology-report-generation "
            "(code mirrored at https://github.com/ChantalMP/RaDialog_LLaVA)",
        folder="RaDialog-interactive-radiology-report-generation",
        commit="424a0c5e2c94b0fdba0f4976dd9208a910122fc6 (RaDialog_LLaVA)",
        modules=("LLAVA_Biovil", "utils", "findings_classifier"),
        entry_points=("LLAVA_Biovil.llava.model.builder.load_pretrained_model",
                      "LLAVA_Biovil.llava.mm_utils.remap_to_uint8", "LLAVA_Biovil.llava.mm_utils.tokenizer_image_token",
                      "LLAVA_Biovil.llava.mm_utils.KeywordsStoppingCriteria",
                      "LLAVA_Biovil.llava.conversation.conv_vicuna_v1", "LLAVA_Biovil.llava.constants.IMAGE_TOKEN_INDEX",
                      "utils.create_chest_xray_transform_for_inference",
                      "findings_classifier.chexpert_train.LitIGClassifier",
                      "findings_classifier.chexpert_train.ExpandChannels"),
        weights="the LoRA checkpoint folder (the Hugging Face repository above), its findings classifier "
                "findings_classifier/checkpoints/chexpert_train/ChexpertClassifier.ckpt, the base model "
                "liuhaotian/llava-v1.5-7b at $SHOVIR_MODEL_DIR/liuhaotian--llava-v1.5-7b (or in the Hugging Face "
                "cache) and the BioViL-T image weights (microsoft/BiomedVLP-BioViL-T) in the Hugging Face cache",
        install="git clone https://huggingface.co/ChantalPellegrini/RaDialog-interactive-radiology-report-generation "
                "$SHOVIR_CODE_DIR/RaDialog-interactive-radiology-report-generation (the same folder may serve as the "
                "checkpoint)",
        wrapper="arco-group/ShoViR-Bench src/benchmark/models/radialog@5420a55"),
}
"""The external code bases, by key (the adapters name theirs)."""


def git_commit(folder: Path) -> str | None:
    """The checked-out commit of ``folder`` when it is the top of a git work tree (``git rev-parse``),
    else ``None`` (a folder inside another repository does not inherit that repository's commit)."""
    folder = Path(folder).resolve()
    try:
        out = subprocess.run(["git", "-C", str(folder), "rev-parse", "--show-toplevel", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.split()
    if out.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != folder:
        return None
    return lines[1]


class _CheckoutFinder(importlib.abc.MetaPathFinder):
    """Resolves the declared top-level module names from one folder (and nothing else)."""

    def __init__(self, root: Path, names: tuple[str, ...]) -> None:
        self.root, self.names = Path(root), tuple(names)

    def find_spec(self, fullname, path=None, target=None):
        if path is not None or fullname not in self.names:
            return None
        return importlib.machinery.PathFinder.find_spec(fullname, [str(self.root)])

    def __repr__(self) -> str:
        return f"<_CheckoutFinder {self.root} {self.names}>"


_FINDERS: dict[tuple[str, tuple[str, ...]], _CheckoutFinder] = {}


def _top_level_names(root: Path) -> tuple[str, ...]:
    names = []
    for p in sorted(root.iterdir()):
        if p.is_dir() and (p / "__init__.py").is_file():
            names.append(p.name)
        elif p.suffix == ".py" and p.stem.isidentifier():
            names.append(p.stem)
    return tuple(names)


def _installed(code: UpstreamCode) -> CodeSource | None:
    """The code base as an installed package (a module resolved from a registered checkout does not count)."""
    spec = importlib.util.find_spec(code.modules[0])
    if spec is None or (spec.origin is None and not spec.submodule_search_locations):
        return None
    location = Path(spec.origin or list(spec.submodule_search_locations)[0]).resolve()
    if any(Path(root) in location.parents for root, _ in _FINDERS):
        return None
    try:
        version = importlib.metadata.version(code.modules[0])
    except importlib.metadata.PackageNotFoundError:
        version = None
    root = location.parent
    return CodeSource(code.key, "installed", str(root), git_commit(root.parent) or git_commit(root), version,
                      code.modules)


def _candidates(code: UpstreamCode, extra: tuple[Path, ...]) -> list[Path]:
    out = []
    base = os.environ.get(CODE_DIR_ENV)
    if base:
        out.append(Path(base).expanduser() / code.folder)
    out += [Path(p) for p in extra]
    return out


def _missing(code: UpstreamCode, tried: list[str], model: str) -> ModelNotAvailableError:
    where = "; ".join(tried) if tried else f"${CODE_DIR_ENV} is not set"
    return ModelNotAvailableError(
        f"model {model!r}: its modelling code is not in a transformers checkpoint; it needs the authors' code "
        f"{code.describe()}. Module `{code.modules[0]}` is not importable and no checkout was found (searched: "
        f"{where}). Install it: {code.install}. Weights needed: {code.weights}.")


def locate_code(key: str, *, model: str, extra_dirs: tuple[Path, ...] = ()) -> CodeSource:
    """Find upstream code base ``key`` (installed package first, then checkouts) without importing it.

    Raises
    ------
    ModelNotAvailableError
        Naming the repository, commit, folders searched and the weights needed.
    """
    code = UPSTREAM[key]
    for cand in _candidates(code, extra_dirs):
        if cand.is_dir() and all((cand / m).is_dir() or (cand / f"{m}.py").is_file() for m in code.modules):
            return CodeSource(code.key, "checkout", str(cand.resolve()), git_commit(cand), None, code.modules)
    found = _installed(code)
    if found is not None:
        return found
    tried = [f"{c} ({'exists, lacks ' + ', '.join(code.modules) if c.is_dir() else 'missing'})"
             for c in _candidates(code, extra_dirs)]
    raise _missing(code, tried, model)


def import_upstream(source: CodeSource, dotted: str):
    """Import ``module.attribute`` (or a module) from the code base ``source`` points at.

    For a checkout, its top-level modules (the folder's packages and ``*.py`` files) are resolved
    from that folder by a finder placed first on ``sys.meta_path`` (the checkout shadows same-named
    installed modules, as the authors' ``sys.path.insert(0, ...)`` does); a module of the same name
    already imported from elsewhere is an error, not silently reused.
    """
    if source.kind == "checkout":
        root = Path(source.location).resolve()
        names = _top_level_names(root)
        key = (str(root), names)
        if key not in _FINDERS:
            finder = _CheckoutFinder(root, names)
            _FINDERS[key] = finder
            sys.meta_path.insert(0, finder)
        top = dotted.split(".")[0]
        loaded = sys.modules.get(top)
        if loaded is not None:
            origin = Path(getattr(loaded, "__file__", "") or "").resolve()
            if root not in origin.parents:
                raise ModelNotAvailableError(
                    f"module `{top}` is already imported from {origin}, not from the checkout {root}; "
                    "run the model in a fresh process")
    module_name, _, attr = dotted.rpartition(".")
    try:
        try:
            module = importlib.import_module(dotted)
            return module
        except ModuleNotFoundError as exc:
            if not module_name or exc.name != dotted:
                raise
        module = importlib.import_module(module_name)
        return getattr(module, attr)
    except (ImportError, AttributeError) as exc:
        raise ModelNotAvailableError(
            f"{dotted} could not be imported from {source.kind} {source.location} "
            f"(commit {source.commit or 'unknown'}): {type(exc).__name__}: {exc}; the adapter follows "
            f"{UPSTREAM[source.key].describe()}") from exc
