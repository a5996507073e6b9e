"""Word shingles of credentialed report text, and the project vocabulary they are checked against.

The credentialed-data guard fails on any run of :data:`SHINGLE_SIZE` (3) consecutive words of a
report or finding sentence of a credentialed dataset. Both the dataset texts and the text being
checked go through :func:`words` first:

1. Python escape sequences as ``repr`` prints them inside lists, dicts and bytes (``\\n``,
   ``\\xa0``, ``\\u200b``, UTF-8 byte escapes such as ``\\xc2\\xa0``) are decoded, in either case:
   ``repr(reports).upper()`` prints ``\\N``, ``\\XC2`` and ``\\U200B``, which decode as their
   lower-case forms (a ``\\U`` with 8 hex digits that name no code point is read as ``\\u`` and 4);
2. Unicode NFKC (non-breaking and other unicode spaces become spaces, full-width letters become
   ASCII), accents are stripped, the zero-width space separates words, other invisible format
   characters (soft hyphen, word joiner, zero-width joiners) are dropped, and case is folded;
3. the text is split into words: maximal runs of letters and digits. Punctuation, underscores and
   whitespace of any kind (newlines included) only separate words.

**The rule.** A text leaks when one of its 3-word windows is a 3-word window of a credentialed text
(:class:`ShingleIndex`), except windows that belong to the project's own vocabulary:

* every 3-word window of the project's own texts (:func:`project_phrases`: the CheXpert class
  names, ModaLens question texts and the rows of Table 8 (the questions in both templates, cells
  read in order, as a rendered table or its CSV joins them), answer instructions, metric names/descriptions of
  ``resources/metrics.yaml``, the papers' published-value descriptions, the shared vocabulary of
  :mod:`shovir_core.vocab`, and the string constants of the table builders ``shovir_core.tables``
  and the book's glue helpers -- column labels and captions -- and of the protocols, whose records
  store such labels as trial fields, e.g. the funnel steps of ``accounting``) is removed from the index;
* a window whose words are all *label words* (:func:`label_words`: the words of the class names,
  metric names and shared vocabulary) or numbers is never a leak. Aggregate tables put class names
  and numbers next to each other ("Pneumothorax  Pleural Effusion  0.25"), and reports say
  "no pneumothorax, pleural effusion" all the time; such windows carry no report content.

So "no pleural effusion" or "pleural effusion 2" never fail, while any three consecutive words of
a report holding one word outside the label words ("The heart is", "No acute cardiopulmonary
process") do. Texts of fewer than three words cannot be checked by shingles (a single finding name
is not report content).

The index holds 64-bit hashes of the windows, is built in memory once per process for each dataset
(:func:`index_for_texts`) and is never written to disk.
"""
from __future__ import annotations

import ast
import functools
import re
import unicodedata
from collections.abc import Iterable
from pathlib import Path

import numpy as np

__all__ = [
    "SHINGLE_SIZE", "words", "shingles", "ShingleIndex", "project_phrases", "label_words", "is_number",
]

SHINGLE_SIZE = 3
"""Consecutive words that make a leak (the issue's rule: any run of >= 3 words of a report)."""

_ESC_BYTES = re.compile(r"(?:\\[xX][0-9a-fA-F]{2})+")
_ESC_U = re.compile(r"\\U([0-9a-fA-F]{8})|\\[uU]([0-9a-fA-F]{4})")
_ESC_WS = re.compile(r"\\[ntrfvNTRFV]")
_WORD = re.compile(r"[^\W_]+")


def _decode_escapes(text: str) -> str:
    def _bytes(m: re.Match) -> str:
        raw = bytes(int(h, 16) for h in re.split(r"\\[xX]", m.group(0))[1:])
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.decode("latin-1")

    def _u(m: re.Match) -> str:
        if m.group(1) is not None:  # \\U and 8 digits
            code = int(m.group(1), 16)
            # no code point: an upper-cased \\u escape followed by 4 hex characters (\\u00e9abcd -> \\U00E9ABCD)
            return chr(code) if code <= 0x10FFFF else chr(int(m.group(1)[:4], 16)) + m.group(1)[4:]
        return chr(int(m.group(2), 16))

    if "\\" not in text:
        return text
    text = _ESC_WS.sub(" ", text)
    text = _ESC_BYTES.sub(_bytes, text)
    return _ESC_U.sub(_u, text)


_INVISIBLE_SPACES = frozenset("\u200b\u180e")
"""Zero-width space and the Mongolian vowel separator separate words although they are format characters."""


def _fold(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    text = unicodedata.normalize("NFKD", text)
    kept = []
    for ch in text:
        if ch in _INVISIBLE_SPACES:
            kept.append(" ")
            continue
        cat = unicodedata.category(ch)
        if cat == "Mn" or cat == "Cf":  # accents; zero-width and other invisible format characters
            continue
        kept.append(ch)
    return "".join(kept).casefold()


def words(text) -> list[str]:
    """The normalised words of ``text`` (see the module docstring).

    >>> words("The\\u00a0heart IS en\\u00adlarged;\\nno_effusion")
    ['the', 'heart', 'is', 'enlarged', 'no', 'effusion']
    >>> words("['Possible small\\\\nleft effusion']")
    ['possible', 'small', 'left', 'effusion']
    """
    if isinstance(text, (bytes, bytearray, memoryview)):
        text = bytes(text).decode("utf-8", errors="replace")
    return _WORD.findall(_fold(_decode_escapes(str(text))))


def is_number(word: str) -> bool:
    return word.isdigit()


def shingles(tokens: list[str], size: int = SHINGLE_SIZE) -> list[tuple[str, ...]]:
    """Consecutive ``size``-word windows of a word list."""
    return [tuple(tokens[i:i + size]) for i in range(len(tokens) - size + 1)]


def _hashes(tokens: list[str], size: int) -> np.ndarray:
    return np.fromiter((hash(s) for s in zip(*(tokens[i:] for i in range(size)))), dtype=np.int64)


class ShingleIndex:
    """Hashes of every ``size``-word window of a set of texts (in memory only).

    Parameters
    ----------
    texts : iterable of str
        The credentialed texts (reports, finding sentences).
    label : str
        What the texts are (named in error messages), e.g. ``"reports of 'mimic-cxr-jpg'"``.
    allow : iterable of str, optional
        Texts whose windows are removed from the index (default: :func:`project_phrases`).
    size : int
        Window length (default :data:`SHINGLE_SIZE`).
    """

    def __init__(self, texts: Iterable[str], *, label: str, allow: Iterable[str] | None = None,
                 size: int = SHINGLE_SIZE) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"shingle size must be a positive integer, got {size!r}")
        self.size = size
        self.label = label
        self.n_texts = 0
        parts = []
        for t in texts:
            if t is None or (isinstance(t, float) and np.isnan(t)):
                continue
            self.n_texts += 1
            parts.append(_hashes(words(t), size))
        hashes = np.unique(np.concatenate(parts)) if parts else np.empty(0, dtype=np.int64)
        allowed = (_project_hashes(size) if allow is None
                   else np.concatenate([np.empty(0, dtype=np.int64)] + [_hashes(words(a), size) for a in allow]))
        if len(allowed) and len(hashes):
            hashes = np.setdiff1d(hashes, allowed, assume_unique=False)
        self._hashes = hashes
        self._labels = label_words()

    def __len__(self) -> int:
        return int(len(self._hashes))

    @classmethod
    def merge(cls, indexes: Iterable["ShingleIndex"]) -> "ShingleIndex":
        """One index over several (the labels are joined)."""
        indexes = list(indexes)
        labels = dict.fromkeys(i.label for i in indexes if i.n_texts)
        out = cls([], label="; ".join(labels) or "no texts", allow=[],
                  size=indexes[0].size if indexes else SHINGLE_SIZE)
        if indexes:
            if len({i.size for i in indexes}) != 1:
                raise ValueError("cannot merge shingle indexes of different sizes")
            out._hashes = np.unique(np.concatenate([i._hashes for i in indexes]))
            out.n_texts = sum(i.n_texts for i in indexes)
        return out

    def _exempt(self, window: tuple[str, ...]) -> bool:
        return all(w in self._labels or is_number(w) for w in window)

    def hits(self, text) -> list[tuple[str, ...]]:
        """The windows of ``text`` that are windows of an indexed text (label/number windows excepted)."""
        tokens = words(text)
        if len(tokens) < self.size or not len(self._hashes):
            return []
        h = _hashes(tokens, self.size)
        pos = np.searchsorted(self._hashes, h)
        pos[pos == len(self._hashes)] = 0
        found = np.flatnonzero(self._hashes[pos] == h)
        out = []
        for i in found:
            window = tuple(tokens[i:i + self.size])
            if not self._exempt(window):
                out.append(window)
        return out

    def leaks(self, text) -> bool:
        return bool(self.hits(text))


# --------------------------------------------------------------------------- project vocabulary
_PACKAGE = Path(__file__).resolve().parent.parent
_SOURCE_MODULES = ("tables", "protocols", "book/glue.py", "book/captions.py", "book/render.py", "tables/result.py",
                   "metrics/schema.py")


def _strings(node) -> Iterable[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(node, (list, tuple)):
        for v in node:
            yield from _strings(v)


def _source_constants(path: Path) -> Iterable[str]:
    """String constants of a module (not its docstrings): labels, captions, column names."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.value


def _source_files() -> list[Path]:
    files = []
    for rel in _SOURCE_MODULES:
        p = _PACKAGE / rel
        files += sorted(p.glob("*.py")) if p.is_dir() else ([p] if p.is_file() else [])
    return files


def _vocab_strings() -> list[str]:
    from .. import vocab

    out = []
    for name in vocab.__all__:
        out += list(_strings(getattr(vocab, name)))
    return out


def _metric_strings() -> list[str]:
    from .. import yaml_text

    path = _PACKAGE / "resources" / "metrics.yaml"
    return list(_strings(yaml_text.safe_load(path.read_text(encoding="utf-8")))) if path.is_file() else []


def _class_names() -> list[str]:
    from ..labels import CHEXPERT_CLASSES

    return list(CHEXPERT_CLASSES)


@functools.lru_cache(maxsize=1)
def label_words() -> frozenset[str]:
    """Words of the labels tables are made of: class names, metric names, shared vocabulary.

    A window made only of these words (and numbers) is never a leak (see the module docstring).
    """
    from .. import yaml_text

    texts = _class_names() + _vocab_strings()
    path = _PACKAGE / "resources" / "metrics.yaml"
    if path.is_file():
        metrics = (yaml_text.safe_load(path.read_text(encoding="utf-8")) or {}).get("metrics") or {}
        for key, m in metrics.items():
            texts += [key, str((m or {}).get("display", "")), str((m or {}).get("unit", ""))]
    return frozenset(w for t in texts for w in words(t))


@functools.lru_cache(maxsize=4)
def _project_hashes(size: int) -> np.ndarray:
    """The ``size``-word windows of :func:`project_phrases`, hashed once per process as the phrases are
    read once (a book run with credentialed chapters builds an index per dataset and field)."""
    out = np.unique(np.concatenate([np.empty(0, dtype=np.int64)] + [_hashes(words(a), size) for a in project_phrases()]))
    out.flags.writeable = False
    return out


@functools.lru_cache(maxsize=1)
def project_phrases() -> tuple[str, ...]:
    """The project's own texts whose 3-word windows are never report content (module docstring)."""
    from .. import yaml_text

    texts = _class_names() + _vocab_strings() + _metric_strings()
    try:
        from ..models.prompts import INSTRUCTIONS
        from ..protocols.modalens import TEMPLATES, question_text
    except ImportError:  # a trimmed install without the modalens protocol
        pass
    else:
        texts += [v for v in INSTRUCTIONS.values() if v]
        for template in TEMPLATES:
            texts += [question_text(f, template=template) for f in _class_names()[:-1]]
            texts += list(TEMPLATES[template].values())
        from ..tables.modalens_design import question_rows

        texts += [" ".join(row) for row in question_rows()]  # Table 8's rows, their cells read in order
    for path in sorted((_PACKAGE / "papers" / "data").glob("*.yaml")):
        texts += list(_strings(yaml_text.base_load(path.read_text(encoding="utf-8"))))
    for path in _source_files():
        texts += list(_source_constants(path))
    return tuple(dict.fromkeys(t for t in texts if t and len(words(t)) >= 2))
