"""``layer_logits_each`` (several knockouts on one encoding of the requests) and the knockout record's span reuse
give exactly what one ``layer_logits`` / ``token_spans`` call each gives (issue 24, item 5: same results, less work)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from shovir_core.models import ScoreRequest, get_model  # noqa: E402
from shovir_core.models.lens import Knockout, layer_logits, layer_logits_each, token_spans  # noqa: E402
from shovir_core.protocols.modalens_layers import _spans  # noqa: E402

Q = "Does this chest X-ray show edema?"
REPORT = "FINDINGS: There is pulmonary edema. No pneumothorax.\nIMPRESSION: Pulmonary edema."


@pytest.fixture(scope="module")
def vlm():
    m = get_model("tiny-gemma3", seed=3)
    m.batch_size = 3  # several padded batches
    return m


@pytest.fixture(scope="module")
def requests_():
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 256, (64, 64), dtype=np.uint8), rng.integers(0, 256, (64, 64), dtype=np.uint8)
    return [ScoreRequest(a, Q, report=REPORT), ScoreRequest(b, Q, report=REPORT),
            ScoreRequest(a, "Does this chest X-ray show any acute cardiopulmonary finding?", report="No edema."),
            ScoreRequest(b, "Does this chest X-ray show any acute cardiopulmonary finding?", report="No edema."),
            ScoreRequest(b, Q, report="No edema.", order="text_first"), ScoreRequest(None, Q, report=REPORT)]


def test_each_knockout_on_one_encoding_equals_one_call_per_knockout(vlm, requests_, monkeypatch):
    kos = [None, Knockout.cumulative("report", 0, 2), Knockout.single("question", 1),
           Knockout.cumulative("image", 0, 2, scope="non_image")]
    alone = [layer_logits(vlm, requests_, knockout=ko) for ko in kos]
    spans = [token_spans(vlm, r) for r in requests_]
    calls = []
    encode = type(vlm)._encode
    monkeypatch.setattr(type(vlm), "_encode", lambda self, *a, **k: calls.append(1) or encode(self, *a, **k))
    together = layer_logits_each(vlm, requests_, kos, spans=spans)
    assert len(calls) == 3, "each padded batch is encoded once (6 requests, with and without an image, by 3)"
    for a, b in zip(alone, together):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(together[0], together[1]), "a knockout that changes nothing would make this vacuous"


def test_the_two_sides_of_a_trial_share_their_spans(vlm, requests_, monkeypatch):
    want = [token_spans(vlm, r) for r in requests_]
    located = []
    monkeypatch.setattr("shovir_core.models.lens.token_spans",
                        lambda m, r: located.append(r) or token_spans(m, r))
    got = _spans(vlm, requests_)
    assert len(located) == 4, "requests 0/1 and 2/3 differ only in the image's pixels: located once each"
    for a, b in zip(want, got):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
