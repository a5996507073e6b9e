"""Model catalogue: models declared in YAML, merged with the built-in registry.

A catalogue file declares models without code (``--models FILE`` or ``$SHOVIR_MODELS``, several files
separated by ``os.pathsep``)::

    models:
      my-smolvlm:
        adapter: hf-auto                 # or a registry name of the hf family (inherits its prompts and tokens)
        checkpoint: /models/SmolVLM-256M # a local folder, or an id looked up under $SHOVIR_MODEL_DIR
        revision: null
        dtype: bfloat16
        report_prompt: Describe the findings of this chest X-ray.
        question_template: "{question}"  # {question} and {finding} are filled in
        answer_instruction: Answer with exactly Yes or No.

Every entry is validated by :data:`ENTRY` (:class:`~shovir_core.protocols.spec.SpecSchema`): an
unknown, mistyped or out-of-range key is one line naming the file, the model, the key and what is
allowed. A declared name that the registry already holds is an error. The declared entry (all its
keys, defaults filled) and its SHA-256 go into :func:`~shovir_core.models.registry.model_fingerprint`,
so every record's resolved spec -- and hence its manifest -- says which declared model made it.

The catalogue sits in the protocols layer beside the spec helper it validates with; the registry
(:mod:`shovir_core.models.registry`) knows nothing of it but calls the loaders in
``registry.LOADERS``, where importing this module installs :func:`ensure_env_catalogue` (the
protocols package imports it, so every process that makes records reads ``$SHOVIR_MODELS``).

Token families: ``yes_family`` / ``no_family`` (token ids) are optional; when absent they are derived
from the tokenizer at load time (:meth:`~shovir_core.models.readouts.TokenFamilies.from_tokenizer`)
and shown in the record's provenance and by ``shovir audit --show``.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..models.spec import DeclaredModelError, DeclaredSpec, ModelSpec
from .spec import Field, SpecError, SpecSchema

__all__ = ["MODELS_ENV", "ENTRY", "DeclaredSpec", "CatalogueError", "load_catalogue", "register_catalogue",
           "ensure_env_catalogue", "declared_entry", "ADAPTER_KINDS", "install"]

MODELS_ENV = "SHOVIR_MODELS"
"""Environment variable naming catalogue files (``os.pathsep``-separated), read on first registry use."""

ADAPTER_KINDS = ("hf-auto", "imported")
"""Adapters a catalogue entry may name besides a registry name of the ``hf`` family."""


class CatalogueError(DeclaredModelError):
    """A catalogue file or entry is malformed (one line: file, model, key, what is allowed)."""


def _entry_schema():
    def _template(value):
        if "{question}" not in value and "{finding}" not in value:
            return "must contain {question} or {finding}"
        try:
            value.format(question="q", finding="f")
        except (KeyError, IndexError, ValueError) as exc:
            return f"is not a valid template ({exc}); use only {{question}} and {{finding}}"
        return None

    def _ids(value):
        return None if value is None or all(isinstance(i, int) and i >= 0 for i in value) else \
            "must be a list of token ids (integers >= 0)"

    return SpecSchema("model catalogue", [
        Field("adapter", str, "hf-auto", doc="hf-auto, imported, or a registry name of the hf family"),
        Field("checkpoint", (str, type(None)), None, doc="local folder with config.json, or an id under $SHOVIR_MODEL_DIR"),
        Field("revision", (str, type(None)), None, doc="pinned revision (checked against a cached snapshot)"),
        Field("dtype", str, "bfloat16", choices=("bfloat16", "float16", "float32"), doc="weights dtype on a GPU"),
        Field("report_prompt", (str, type(None)), None, doc="the user text of the report prompt"),
        Field("report_system", (str, type(None)), None, doc="an optional system turn of the report prompt"),
        Field("report_order", str, "image_first", choices=("image_first", "text_first")),
        Field("question_template", str, "{question}", check=_template,
              doc="how a ModaLens question is put: {question} (the protocol's text) and {finding}"),
        Field("answer_instruction", (str, type(None)), None,
              doc="the text of the protocol's 'yes_no' answer instruction for this model"),
        Field("max_new_tokens", int, 128, range=(1, 8192), doc="report length (greedy decoding)"),
        Field("decoding", str, "greedy", choices=("greedy",), doc="report decoding (greedy only)"),
        Field("yes_family", (list, type(None)), None, items=int, check=_ids, doc="token ids read as yes"),
        Field("no_family", (list, type(None)), None, items=int, check=_ids, doc="token ids read as no"),
        Field("processor", dict, {}, doc="keyword options of AutoProcessor.from_pretrained"),
        Field("chat_template", (str, type(None)), None, doc="a chat template for a checkpoint that has none"),
        Field("chat_template_kwargs", dict, {}, doc="keyword options of apply_chat_template"),
        Field("prefix_reuse", str, "auto", choices=("auto", "on", "off"),
              doc="reuse a shared prompt prefix's cache when scoring (auto: where the family allows it)"),
        Field("answers", (str, type(None)), None, doc="imported answers (adapter imported; written by shovir import)"),
        Field("notes", str, "", doc="free text"),
    ])


ENTRY = _entry_schema()
"""The declared keys of a catalogue entry (type, allowed values, default)."""




def declared_entry(entry: dict) -> tuple[dict, str]:
    """The entry with every default filled (sorted keys) and the SHA-256 of its canonical JSON."""
    canonical = json.dumps(entry, sort_keys=True, separators=(",", ":"))
    return entry, hashlib.sha256(canonical.encode()).hexdigest()


def _spec_of(name: str, entry: dict, *, where: str, registry: dict) -> DeclaredSpec:
    adapter = entry["adapter"]
    base: ModelSpec | None = None
    if adapter not in ADAPTER_KINDS:
        base = registry.get(adapter)
        if base is None or base.adapter not in ("hf", "tiny"):
            family = sorted(n for n, s in registry.items() if s.adapter in ("hf", "tiny"))
            raise CatalogueError(f"{where}: model {name!r}: 'adapter' = {adapter!r} is not allowed; use one of "
                                 f"{list(ADAPTER_KINDS)} or a registry name of the hf family ({', '.join(family)})")
    if adapter == "imported":
        if not entry["answers"]:
            raise CatalogueError(f"{where}: model {name!r}: adapter 'imported' needs 'answers' (a file written by "
                                 "shovir import)")
    elif not entry["checkpoint"]:
        raise CatalogueError(f"{where}: model {name!r}: 'checkpoint' is required (a local folder with config.json, "
                             "or an id under $SHOVIR_MODEL_DIR)")
    families = None
    if entry["yes_family"] is not None or entry["no_family"] is not None:
        if not entry["yes_family"] or not entry["no_family"]:
            raise CatalogueError(f"{where}: model {name!r}: give both 'yes_family' and 'no_family' (or neither: "
                                 "they are then derived from the tokenizer)")
        families = {"yes_id": entry["yes_family"][0], "no_id": entry["no_family"][0],
                    "yes_family": tuple(entry["yes_family"]), "no_family": tuple(entry["no_family"])}
    elif base is not None:
        families = base.families
    _, digest = declared_entry(entry)
    inherit = {}
    if base is not None:
        inherit = dict(report_user=base.report_user, report_system=base.report_system, report_order=base.report_order,
                       report_prompt_slot=base.report_prompt_slot, max_new_tokens=base.max_new_tokens,
                       chat_template_kwargs=dict(base.chat_template_kwargs),
                       processor_kwargs=dict(base.processor_kwargs))
    spec = dict(inherit)
    if entry["report_prompt"] is not None or base is None:
        spec["report_user"] = entry["report_prompt"] or "Describe this X-ray."
    if entry["report_system"] is not None:
        spec["report_system"] = entry["report_system"]
    if base is None or entry["report_order"] != "image_first":
        spec["report_order"] = entry["report_order"]
    if base is None or entry["max_new_tokens"] != 128:
        spec["max_new_tokens"] = entry["max_new_tokens"]
    spec.setdefault("chat_template_kwargs", {}).update(entry["chat_template_kwargs"])
    spec.setdefault("processor_kwargs", {}).update(entry["processor"])
    answers = entry["answers"]
    if answers is not None and not Path(answers).expanduser().is_absolute() and where:
        answers = str(Path(where).parent / answers)  # relative to the catalogue file (an import's folder: ".")
    checkpoint = entry["checkpoint"]
    hf_id = None if checkpoint is None or Path(checkpoint).expanduser().is_absolute() else checkpoint
    return DeclaredSpec(
        name=name, adapter="imported" if adapter == "imported" else "hf-auto", hf_id=hf_id or checkpoint,
        revision=entry["revision"], paper="declared", dtype=entry["dtype"], families=families,
        notes=entry["notes"] or (f"declared in {where}" + (f", family of {adapter}" if base is not None else "")),
        checkpoint=checkpoint, question_template=entry["question_template"],
        answer_instruction=entry["answer_instruction"], prefix_reuse=entry["prefix_reuse"],
        chat_template=entry["chat_template"], answers=answers, declared=entry, declared_sha256=digest,
        source_file=where, **spec)


def load_catalogue(path: str | Path, *, registry: dict | None = None) -> dict[str, DeclaredSpec]:
    """Read and validate a catalogue file; returns name -> :class:`DeclaredSpec` (nothing is registered).

    Raises
    ------
    CatalogueError
        One line naming the file, the model and the key, for any malformed entry.
    """
    import yaml
    from .. import yaml_text

    if registry is None:
        from ..models.registry import REGISTRY as registry  # noqa: N811 - the live registry
    path = Path(path).expanduser()
    where = str(path)
    try:
        data = yaml_text.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CatalogueError(f"model catalogue {where}: cannot be read ({exc.strerror or exc})") from None
    except yaml.YAMLError as exc:
        raise CatalogueError(f"model catalogue {where}: not valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(data, dict) or set(data) != {"models"} or not isinstance(data["models"], dict) \
            or not data["models"]:
        raise CatalogueError(f"model catalogue {where}: must be a mapping with one key, 'models', mapping each "
                             "model name to its entry")
    out: dict[str, DeclaredSpec] = {}
    for name, entry in data["models"].items():
        if not isinstance(name, str) or not name or any(c in name for c in " /@\\"):
            raise CatalogueError(f"model catalogue {where}: model name {name!r} must be a non-empty string without "
                                 "spaces, '/', '\\' or '@'")
        if not isinstance(entry, dict):
            raise CatalogueError(f"model catalogue {where}: model {name!r}: the entry must be a mapping of keys, "
                                 f"got {type(entry).__name__}")
        try:
            resolved = ENTRY.resolve(entry)
        except SpecError as exc:
            raise CatalogueError(str(exc).replace("model catalogue spec", f"model catalogue {where}: model {name!r}",
                                                  1)) from None
        if name in registry:
            raise CatalogueError(f"model catalogue {where}: model {name!r} is already registered "
                                 f"({registry[name].notes or registry[name].adapter}); choose another name")
        out[name] = _spec_of(name, resolved, where=where, registry=registry)
    return out


_LOADED: dict[str, str] = {}
"""Catalogue files already merged (resolved path -> the names they declared, comma-joined)."""


def register_catalogue(path: str | Path) -> list[str]:
    """Validate ``path`` and merge its models into the registry; returns their names.

    Registering the same file twice is a no-op; a name already registered (built in, or declared by
    another file) is a :class:`CatalogueError` and nothing of the file is registered.
    """
    from ..models.registry import REGISTRY

    key = str(Path(path).expanduser().resolve())
    if key in _LOADED:
        return _LOADED[key].split(",") if _LOADED[key] else []
    specs = load_catalogue(path, registry=REGISTRY)
    REGISTRY.update(specs)
    _LOADED[key] = ",".join(specs)
    return list(specs)


def ensure_env_catalogue() -> None:
    """Merge the files named by ``$SHOVIR_MODELS`` and the imported models' entries
    (``<runs>/imports/*/model.yaml``, written by ``shovir import``), once per file per process."""
    from ..paths import runs_root

    value = os.environ.get(MODELS_ENV, "")
    for item in (v for v in value.split(os.pathsep) if v.strip()):
        register_catalogue(item)
    imports = runs_root() / "imports"
    if imports.is_dir():
        for entry in sorted(imports.glob("*/model.yaml")):
            register_catalogue(entry)


def install() -> None:
    """Have the registry read ``$SHOVIR_MODELS`` (and imported models) on every lookup."""
    from ..models import registry

    if ensure_env_catalogue not in registry.LOADERS:
        registry.LOADERS.append(ensure_env_catalogue)


install()
