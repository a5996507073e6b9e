"""Text-content controls of the report (ModaLens Table 18, Figure 5; §4.1 "Text content").

Each control rewrites the report shown with a question, everything else fixed:

==================  ======================================================================
control             report shown
==================  ======================================================================
``none``            the report unchanged (the plain full-report arm)
``neutral_prose``   non-clinical prose of the same length (characters, within one word),
                    drawn per case from :data:`NEUTRAL_SENTENCES`
``boilerplate``     clinical boilerplate without any finding, same length, drawn per case
                    from :data:`BOILERPLATE_SENTENCES`
``finding_removed`` the report without the sentences that name the asked finding
``answer_sentence`` one sentence stating the reference answer (the source label), its phrasing
                    drawn per case
``opposite_label``  the sentences naming the asked finding replaced by one sentence stating
                    the opposite label
``findings_only``   the FINDINGS section alone (cases with both sections)
``impression_only`` the IMPRESSION section alone (cases with both sections)
==================  ======================================================================

The paper (Appendix, "Text-content controls") describes the arms but not their exact wording; the
sentences here are this package's. A sentence *names* a finding when the labeller's mention
lexicon (:mod:`shovir_core.labeling.lexicon`: phrases and token patterns, negated mentions
included) finds it there; for the composite question ("any acute cardiopulmonary finding") a
sentence names it when it names any of the 13 findings or says "acute cardiopulmonary". The
answer and opposite sentences use the phrases of
:data:`shovir_core.data.template_reports.PHRASES`; the composite's negative sentence lists the 13
findings so that it states the answer, not only its wording. The answer-sentence control draws its
phrasing per case (one of :data:`~shovir_core.data.template_reports.POSITIVE_FORMS` /
:data:`~shovir_core.data.template_reports.NEGATIVE_FORMS`; for the composite's negative sentence,
the order of the 13 listed findings), so that cases asking the same finding do not all see one
byte-identical report, as no two real reports are; the opposite-label sentence keeps the first
phrasing (it sits inside the case's own report).

Sections. :func:`parse_sections` finds the FINDINGS and IMPRESSION sections in the header forms
real reports use: upper-case headers at a line start or inline (``FINDINGS:``, ``IMPRESSION:``),
mixed case at a line start (``Findings:``), plurals, and ``CONCLUSION`` as an impression; a
combined ``FINDINGS AND IMPRESSION`` / ``FINDINGS/IMPRESSION`` header is one section, not two.
Any other upper-case header (``INDICATION:``, ``COMPARISON:``, ...) ends a section. A report
without both sections returns ``None`` from the section controls: the protocol counts those
cases and leaves them out of the section arms.

Everything is deterministic: the two random controls and the answer sentence draw from
:func:`shovir_core.perturb.rng.seed_sequence` of ``(seed, "text_control", control, case id)``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..labels import FINDINGS_13
from ..vocab import COMPOSITE
from .template_reports import NEGATIVE_FORMS, PHRASES, POSITIVE_FORMS

__all__ = [
    "TEXT_CONTROLS", "SECTION_CONTROLS", "RANDOM_CONTROLS", "NEUTRAL_SENTENCES", "BOILERPLATE_SENTENCES",
    "Sections", "parse_sections", "split_sentences", "mentions", "names_finding", "answer_sentence",
    "remove_finding", "replace_with_opposite", "section_only", "length_matched", "apply_text_control",
]

TEXT_CONTROLS = ("none", "neutral_prose", "boilerplate", "finding_removed", "answer_sentence",
                 "opposite_label", "findings_only", "impression_only")
"""Report conditions beside the full report (``none``); see the module docstring."""

SECTION_CONTROLS = ("findings_only", "impression_only")
"""Controls defined only on reports with both a FINDINGS and an IMPRESSION section."""

RANDOM_CONTROLS = ("neutral_prose", "boilerplate")
"""Controls that draw text (seeded per case)."""

NEUTRAL_SENTENCES = (
    "The morning train left the station a few minutes after seven.",
    "A small bakery on the corner sells bread and pastries every day.",
    "The garden path winds past a row of tall sunflowers.",
    "Several children were reading books in the quiet library.",
    "The river was calm and a few boats drifted along it.",
    "An old clock in the hall chimed twice in the afternoon.",
    "The recipe calls for flour, sugar, butter and two eggs.",
    "A light breeze moved the curtains by the open window.",
    "The museum opened a new room of paintings last spring.",
    "Two friends walked along the beach and collected shells.",
    "The bus stopped at the square where the market is held.",
    "A cat slept on the warm stones near the front door.",
    "The choir rehearsed a new song for the winter concert.",
    "Fresh apples and pears were stacked in wooden crates.",
    "The hikers reached the top of the hill before noon.",
    "A yellow kite rose above the park on a windy day.",
)
"""Non-clinical sentences for the length-matched neutral-prose control (no finding vocabulary)."""

BOILERPLATE_SENTENCES = (
    "Examination: chest radiograph.",
    "Technique: frontal view of the chest was obtained.",
    "Comparison is made with the prior examination where available.",
    "The study was reviewed at the time of dictation.",
    "Clinical correlation is recommended.",
    "This report was dictated and electronically signed.",
    "Patient identity was confirmed before the examination.",
    "Images were acquired in the radiology department.",
    "The referring clinician may contact the reading room with questions.",
    "Findings were communicated according to department policy.",
    "Positioning and exposure are as documented by the technologist.",
    "Please refer to the electronic record for the indication.",
)
"""Clinical boilerplate without any finding, for the boilerplate control."""

_COMPOSITE_TEXT = re.compile(r"\bacute\s+cardio-?pulmonary\b", re.IGNORECASE)

# ----------------------------------------------------------------------------- sections
_FINDINGS_NAMES = ("FINDINGS", "FINDING")
_IMPRESSION_NAMES = ("IMPRESSION", "IMPRESSIONS", "CONCLUSION", "CONCLUSIONS")
# an upper-case header at a line start (any name), e.g. "INDICATION:" or "FINDINGS AND IMPRESSION:"
_LINE_HEADER = re.compile(r"(?m)^[ \t]*([A-Z][A-Z /&()-]*[A-Z)])[ \t]*:")
# a known upper-case header anywhere ("... COMPARISON: None. FINDINGS: ...")
_INLINE_HEADER = re.compile(r"\b(FINDINGS?|IMPRESSIONS?|CONCLUSIONS?|INDICATION|HISTORY|TECHNIQUE|COMPARISON|"
                            r"EXAMINATION|RECOMMENDATIONS?|NOTIFICATION)[ \t]*:")
# a known header in mixed case at a line start ("Findings:", "Impression:")
_MIXED_HEADER = re.compile(r"(?im)^[ \t]*(findings?|impressions?|conclusions?)[ \t]*:")


@dataclass(frozen=True)
class _Header:
    start: int
    end: int
    name: str  # upper case, single spaces

    @property
    def kind(self) -> str:
        words = set(re.split(r"[ /&]+", self.name))
        is_f = bool(words & set(_FINDINGS_NAMES))
        is_i = bool(words & set(_IMPRESSION_NAMES))
        if is_f and is_i:
            return "combined"
        return "findings" if is_f else "impression" if is_i else "other"


def _headers(text: str) -> list[_Header]:
    found: dict[int, _Header] = {}
    for rx in (_LINE_HEADER, _INLINE_HEADER, _MIXED_HEADER):
        for m in rx.finditer(text):
            name = " ".join(m.group(1).upper().split())
            h = _Header(m.start(1), m.end(), name)
            prev = found.get(h.start)
            if prev is None or h.end > prev.end:
                found[h.start] = h
    out: list[_Header] = []
    for h in sorted(found.values(), key=lambda h: (h.start, -h.end)):
        if out and h.start < out[-1].end:  # nested in a longer header ("FINDINGS" inside "FINDINGS/IMPRESSION:")
            continue
        out.append(h)
    return out


@dataclass(frozen=True)
class Sections:
    """The FINDINGS and IMPRESSION sections of a report (bodies stripped; ``None`` when absent).

    ``combined`` is True when the report has a single FINDINGS AND IMPRESSION section.
    ``findings_header`` / ``impression_header`` are the headers as written (for the section-only
    controls, which keep them).
    """

    findings: str | None
    impression: str | None
    combined: bool = False
    findings_header: str = "FINDINGS:"
    impression_header: str = "IMPRESSION:"

    @property
    def has_both(self) -> bool:
        """Both sections present and non-empty (the section controls' inclusion rule)."""
        return bool(self.findings) and bool(self.impression)


def parse_sections(text: str) -> Sections:
    """FINDINGS and IMPRESSION of a report (the first section of each kind).

    >>> s = parse_sections("FINAL REPORT\\n FINDINGS: The heart is enlarged.\\n\\n IMPRESSION: Cardiomegaly.")
    >>> s.findings, s.impression, s.has_both
    ('The heart is enlarged.', 'Cardiomegaly.', True)
    >>> parse_sections("COMPARISON: None. FINDINGS: Lungs are clear.").has_both
    False
    >>> parse_sections("FINDINGS AND IMPRESSION: No acute process.").combined
    True
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_sections: report must be str, got {type(text).__name__}")
    heads = _headers(text)
    bodies: dict[str, tuple[str, str]] = {}
    combined = False
    for i, h in enumerate(heads):
        end = heads[i + 1].start if i + 1 < len(heads) else len(text)
        body = " ".join(text[h.end:end].split())
        kind = h.kind
        if kind == "combined":
            combined = True
        elif kind in ("findings", "impression") and kind not in bodies and body:
            bodies[kind] = (body, text[h.start:h.end].strip())
    f, i_ = bodies.get("findings"), bodies.get("impression")
    return Sections(findings=f[0] if f else None, impression=i_[0] if i_ else None,
                    combined=combined and not (f and i_),
                    findings_header=f[1] if f else "FINDINGS:", impression_header=i_[1] if i_ else "IMPRESSION:")


def section_only(text: str, section: str) -> str | None:
    """``"<HEADER> <body>"`` of one section (``"findings"`` or ``"impression"``); ``None`` unless both exist."""
    if section not in ("findings", "impression"):
        raise ValueError(f"section_only: section {section!r} must be 'findings' or 'impression'")
    s = parse_sections(text)
    if not s.has_both:
        return None
    return (f"{s.findings_header} {s.findings}" if section == "findings"
            else f"{s.impression_header} {s.impression}")


# ----------------------------------------------------------------------------- sentences
_SENTENCE = re.compile(r"\S(?:[^\n]*?)(?:[.!?](?=\s|$)|(?=\n)|$)")


def _segments(text: str) -> list[tuple[str, int, int]]:
    """``(kind, start, end)`` spans of the report: ``header`` and ``sentence`` (gaps are whitespace)."""
    heads = _headers(text)
    out: list[tuple[str, int, int]] = []
    pos = 0
    bounds = [(h.start, h.end) for h in heads] + [(len(text), len(text))]
    for h_start, h_end in bounds:
        for m in _SENTENCE.finditer(text, pos, h_start):
            s, e = m.start(), min(m.end(), h_start)
            if text[s:e].strip():
                out.append(("sentence", s, e))
        if h_start < len(text):
            out.append(("header", h_start, h_end))
        pos = h_end
    return out


def split_sentences(text: str) -> list[str]:
    """The report's sentences, section headers left out.

    A sentence ends at ``.``, ``!`` or ``?`` followed by whitespace, at a line break or at a header.

    >>> split_sentences("FINDINGS: The heart is enlarged. No effusion.\\nIMPRESSION: Cardiomegaly.")
    ['The heart is enlarged.', 'No effusion.', 'Cardiomegaly.']
    """
    return [text[s:e].strip() for kind, s, e in _segments(text) if kind == "sentence"]


@lru_cache(maxsize=1)
def _nlp():
    import spacy

    from ..labeling.lexicon import load_lexicon

    lex = load_lexicon()
    nlp = spacy.blank("en")
    ruler = nlp.add_pipe("entity_ruler", config={"phrase_matcher_attr": "LOWER"})
    patterns = []
    for cls in FINDINGS_13:
        patterns += [{"label": cls, "pattern": p} for p in lex.phrases[cls]]
        patterns += [{"label": cls, "pattern": p} for p in lex.patterns[cls]]
    patterns += [{"label": "EXCLUDED", "pattern": p} for p in lex.exclusions]
    ruler.add_patterns(patterns)
    return nlp


@lru_cache(maxsize=65536)
def mentions(sentence: str) -> frozenset[str]:
    """The findings a sentence names (any polarity), by the labeller's mention lexicon.

    >>> sorted(mentions("The heart is enlarged, without pleural effusion."))
    ['Cardiomegaly', 'Pleural Effusion']
    """
    doc = _nlp()(" ".join(sentence.split()))
    return frozenset(e.label_ for e in doc.ents if e.label_ != "EXCLUDED")


def names_finding(sentence: str, finding: str) -> bool:
    """Whether a sentence names ``finding`` (for the composite: any finding, or "acute cardiopulmonary")."""
    if finding == COMPOSITE:
        return bool(mentions(sentence)) or bool(_COMPOSITE_TEXT.search(sentence))
    if finding not in FINDINGS_13:
        raise ValueError(f"unknown finding {finding!r}; use one of {list(FINDINGS_13)} or {COMPOSITE!r}")
    return finding in mentions(sentence)


def answer_sentence(finding: str, label: float, *, rng: np.random.Generator | None = None) -> str:
    """One sentence stating ``label`` (1 = present, 0 = absent) for the asked finding.

    Without ``rng`` the first phrasing; with it, a phrasing drawn from ``rng`` (see the module
    docstring). Every phrasing states the same label.

    >>> answer_sentence("Edema", 1), answer_sentence("Pleural Effusion", 0)
    ('There is pulmonary edema.', 'No pleural effusion.')
    >>> answer_sentence("composite", 1)
    'There is an acute cardiopulmonary finding.'
    """
    if label not in (0, 1):
        raise ValueError(f"answer_sentence: label must be 0 or 1, got {label!r}")
    if finding == COMPOSITE:
        if label:
            return "There is an acute cardiopulmonary finding."
        order = list(FINDINGS_13) if rng is None else [FINDINGS_13[int(i)] for i in rng.permutation(len(FINDINGS_13))]
        listed = ", ".join(PHRASES[f] for f in order[:-1]) + f" or {PHRASES[order[-1]]}"
        return f"No acute cardiopulmonary finding (no {listed})."
    if finding not in FINDINGS_13:
        raise ValueError(f"unknown finding {finding!r}; use one of {list(FINDINGS_13)} or {COMPOSITE!r}")
    forms = POSITIVE_FORMS if label else NEGATIVE_FORMS
    form = forms[0] if rng is None else forms[int(rng.integers(len(forms)))]
    phrase = PHRASES[finding]
    return form.format(phrase=phrase, Phrase=phrase[0].upper() + phrase[1:])


def _rebuild(text: str, keep: list[tuple[str, str]]) -> str:
    """Join ``(kind, piece)`` pieces, dropping headers left without a sentence."""
    pieces: list[str] = []
    pending_header: str | None = None
    for kind, piece in keep:
        if kind == "header":
            pending_header = piece
            continue
        if pending_header is not None:
            pieces.append(("\n" if pieces else "") + pending_header + " " + piece)
            pending_header = None
        else:
            pieces.append((" " if pieces else "") + piece)
    return "".join(pieces).strip()


def _edit(text: str, finding: str, replacement: str | None) -> str:
    segs = _segments(text)
    keep: list[tuple[str, str]] = []
    inserted = replacement is None
    for kind, s, e in segs:
        piece = " ".join(text[s:e].split())
        if kind == "sentence" and names_finding(piece, finding):
            if not inserted:
                keep.append(("sentence", replacement))
                inserted = True
            continue
        keep.append((kind, piece))
    if not inserted:  # nothing named the finding: state the opposite at the start of FINDINGS (or the report)
        at = next((k + 1 for k, (kind, piece) in enumerate(keep)
                   if kind == "header" and _Header(0, 0, piece.rstrip(":").upper()).kind == "findings"), 0)
        keep.insert(at, ("sentence", replacement))
    return _rebuild(text, keep)


def remove_finding(text: str, finding: str) -> str:
    """The report without the sentences naming ``finding``; headers left empty are dropped.

    >>> remove_finding("FINDINGS: There is cardiomegaly. No pneumothorax.\\nIMPRESSION: Cardiomegaly.", "Cardiomegaly")
    'FINDINGS: No pneumothorax.'
    """
    return _edit(text, finding, None)


def replace_with_opposite(text: str, finding: str, label: float) -> str:
    """The sentences naming ``finding`` replaced by one stating ``1 - label`` (inserted where none did).

    >>> replace_with_opposite("FINDINGS: There is cardiomegaly.\\nIMPRESSION: Cardiomegaly.", "Cardiomegaly", 1)
    'FINDINGS: No cardiomegaly.'
    """
    if label not in (0, 1):
        raise ValueError(f"replace_with_opposite: label must be 0 or 1, got {label!r}")
    return _edit(text, finding, answer_sentence(finding, 1 - int(label)))


def length_matched(n_chars: int, pool: tuple[str, ...], rng: np.random.Generator) -> str:
    """Text of about ``n_chars`` characters: sentences of ``pool`` in a random order, cut at a word.

    The result is never longer than ``n_chars`` (at least one word) and ends with a period; it is
    shorter by less than one word.
    """
    if n_chars < 1:
        raise ValueError(f"length_matched: n_chars must be >= 1, got {n_chars}")
    if not pool:
        raise ValueError("length_matched: the sentence pool is empty")

    def close(ws: list[str]) -> str:
        text = " ".join(ws)
        return text if text.endswith(".") else text.rstrip(",;:") + "."

    words: list[str] = []
    while True:
        for idx in rng.permutation(len(pool)):
            for w in pool[int(idx)].split():
                if words and len(close(words + [w])) > n_chars:
                    while len(words) > 1 and len(close(words)) > n_chars:
                        words.pop()
                    return close(words)
                words.append(w)


def apply_text_control(control: str, text: str, *, finding: str, label: float | None = None, seed: int = 0,
                       case_id: str = "") -> str | None:
    """The report shown under ``control`` (``None``: the case is outside the arm).

    Parameters
    ----------
    control
        One of :data:`TEXT_CONTROLS`.
    text
        The full report.
    finding
        The asked finding (CheXpert name) or ``"composite"``.
    label
        The source label of the asked finding (1 / 0; ``None`` or NaN where the label policy
        excludes it -- the answer and opposite controls then return ``None``).
    seed, case_id
        The random stream of the neutral-prose, boilerplate and answer-sentence controls.
    """
    if control not in TEXT_CONTROLS:
        raise ValueError(f"unknown text control {control!r}; use one of {list(TEXT_CONTROLS)}")
    if control == "none":
        return text
    from ..perturb.rng import seed_sequence

    rng = np.random.default_rng(seed_sequence(int(seed), "text_control", control, str(case_id)))
    if control in RANDOM_CONTROLS:
        pool = NEUTRAL_SENTENCES if control == "neutral_prose" else BOILERPLATE_SENTENCES
        return length_matched(max(len(text), 1), pool, rng)
    if control in SECTION_CONTROLS:
        return section_only(text, control.removesuffix("_only"))
    if control == "finding_removed":
        return remove_finding(text, finding)
    if label is None or (isinstance(label, float) and np.isnan(label)):
        return None
    if control == "answer_sentence":
        return answer_sentence(finding, int(label), rng=rng)
    return replace_with_opposite(text, finding, int(label))
