"""A cache you can trust (issue 25, item 2): sealed entries, checked reads, one-line errors for damaged
files, `shovir cache verify/clear`, and records that say which cache entries they were made from."""
from __future__ import annotations

import json
import sqlite3

import pytest

from shovir_core import cli, protocols
from shovir_core.models import ScoreRequest, cached, get_model
from shovir_core.models.cache import CACHE_ENTRIES_FILE, CacheError, InferenceCache, default_cache_dir, entry_sha256

from test_models_cache import _requests


def _filled(tmp_path):
    _, requests = _requests(2)
    model = cached(get_model("ref-image-classifier"), directory=tmp_path, progress=False)
    scores = model.score_yes_no(requests)
    return model, requests, scores


def _edit(path, key, value: str, *, reseal: bool = False):
    with sqlite3.connect(path) as con:
        con.execute("UPDATE results SET value = ? WHERE key = ?", (value, key))
        if reseal:
            con.execute("UPDATE results SET entry_sha256 = ? WHERE key = ?", (entry_sha256(key, value), key))
    con.close()


def test_an_edited_entry_is_refused_naming_the_file_the_entry_and_the_evicting_command(tmp_path, capsys):
    model, requests, scores = _filled(tmp_path)
    key = scores[0]["input_hash"]
    value = {k: v for k, v in scores[0].items() if k != "input_hash"}
    flipped = {**value, "p_yes": 1 - value["p_yes"]} if "p_yes" in value else {**value, "edited": True}
    _edit(model.cache.path, key, json.dumps(flipped))
    with pytest.raises(CacheError) as info:
        model.score_yes_no(requests)
    msg = str(info.value)
    assert str(model.cache.path) in msg and key in msg and "shovir cache verify --evict" in msg
    assert "shovir cache clear" in msg
    assert cli.main(["cache", "verify", "--dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert sum(line.startswith("BAD ") for line in out.splitlines()) == 1 and key in out
    assert cli.main(["cache", "verify", "--dir", str(tmp_path), "--evict"]) == 0
    assert cli.main(["cache", "verify", "--dir", str(tmp_path)]) == 0
    again = cached(get_model("ref-image-classifier"), directory=tmp_path, progress=False).score_yes_no(requests)
    assert again == scores  # the evicted entry was computed again


def test_two_swapped_values_are_refused(tmp_path):
    model, requests, scores = _filled(tmp_path)
    a, b = scores[0]["input_hash"], scores[1]["input_hash"]
    with sqlite3.connect(model.cache.path) as con:
        rows = dict(con.execute("SELECT key, value || char(0) || entry_sha256 FROM results WHERE key IN (?, ?)", (a, b)))
        for key, other in ((a, b), (b, a)):
            value, seal = rows[other].split("\0")
            con.execute("UPDATE results SET value = ?, entry_sha256 = ? WHERE key = ?", (value, seal, key))
    con.close()
    if json.loads(rows[a].split("\0")[0]) == json.loads(rows[b].split("\0")[0]):
        pytest.skip("the two entries hold the same value")
    with pytest.raises(CacheError, match="does not match its seal"):
        model.cache.get_many([a, b])


def test_edited_key_inputs_are_refused(tmp_path):
    model, requests, scores = _filled(tmp_path)
    key = scores[0]["input_hash"]
    with sqlite3.connect(model.cache.path) as con:
        con.execute("UPDATE results SET inputs = replace(inputs, 'score_yes_no', 'score_yes_nO') WHERE key = ?", (key,))
    con.close()
    with pytest.raises(CacheError, match="key inputs do not hash to its key"):
        model.cache.get_many([key])


@pytest.mark.parametrize("damage", ["json", "truncated"])
def test_a_damaged_cache_file_is_one_line_naming_it(tmp_path, damage, capsys):
    model, requests, _ = _filled(tmp_path)
    path = model.cache.path
    if damage == "json":
        path.write_text(json.dumps({"not": "a database"}))
    else:
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 3])
    with pytest.raises(CacheError) as info:
        InferenceCache(tmp_path).get_many([r for r in ["x"]])
    assert str(path) in str(info.value) and "shovir cache clear" in str(info.value)
    from shovir_core.errors import run_guarded

    assert run_guarded(lambda: InferenceCache(tmp_path).get_many(["x"])) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and str(path) in err
    assert cli.main(["cache", "verify", "--dir", str(tmp_path)]) == 1
    assert cli.main(["cache", "clear", "--dir", str(tmp_path)]) == 0
    assert not path.exists()
    assert len(InferenceCache(tmp_path)) == 0


def test_clear_one_model_keeps_the_others(tmp_path, capsys):
    _, requests = _requests(1)
    for name in ("ref-image-classifier", "ref-blind-prior"):
        cached(get_model(name), directory=tmp_path, progress=False).score_yes_no(requests)
    cache = InferenceCache(tmp_path)
    counts = cache.models()
    assert set(counts) == {"ref-image-classifier", "ref-blind-prior"}, counts
    assert cli.main(["cache", "clear", "--model", "ref-blind-prior", "--dir", str(tmp_path)]) == 0
    assert "removed 2 entries of model 'ref-blind-prior'" in capsys.readouterr().out
    assert cache.models() == {"ref-image-classifier": counts["ref-image-classifier"]}


def test_entries_of_an_older_cache_are_sealed_as_they_are(tmp_path):
    path = tmp_path / "inference.sqlite"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE results (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        con.execute("INSERT INTO results VALUES ('k', '{\"p_yes\": 0.25}')")
    con.close()
    cache = InferenceCache(tmp_path)
    assert cache.get_many(["k"]) == {"k": {"p_yes": 0.25}} and cache.verify() == []
    _edit(path, "k", '{"p_yes": 0.75}')
    assert len(cache.verify()) == 1


def test_opening_a_current_cache_reads_no_table(tmp_path):
    """A current file is told from an older one by its columns and its partial index of unsealed entries: the
    lookup reads that index (empty), not the whole table, at every open; a file of the previous version (the
    columns, no index) gets the index when opened."""
    cache = InferenceCache(tmp_path)
    cache.put_many({f"k{i}": {"p_yes": i / 10} for i in range(10)})
    with sqlite3.connect(cache.path) as con:
        plan = con.execute("EXPLAIN QUERY PLAN SELECT 1 FROM results WHERE entry_sha256 IS NULL LIMIT 1").fetchall()
        assert "USING INDEX results_unsealed" in " ".join(str(row[-1]) for row in plan), plan
        assert InferenceCache._schema_current(con)
        con.execute("DROP INDEX results_unsealed")
        assert not InferenceCache._schema_current(con)
    con.close()
    assert InferenceCache(tmp_path).get_many(["k3"]) == {"k3": {"p_yes": 0.3}}
    with sqlite3.connect(cache.path) as con:
        assert InferenceCache._schema_current(con)
    con.close()


MODALENS = {"dataset": "demo-64px", "model": "ref-anchored@0.5", "ssim_size": 64, "n_patients": 3, "batch_cases": 2}


def test_a_record_names_the_cache_entries_it_was_made_from(runs_root, capsys):
    run = protocols.run("modalens", "cache-deps", MODALENS, progress=False)
    info = run.manifest["inference_cache"]
    entries = json.loads((run.path / CACHE_ENTRIES_FILE).read_text())["files"]
    cache_file = str(default_cache_dir() / "inference.sqlite")
    assert info["cache_files"] == [cache_file] and info["n_entries"] == len(entries[cache_file]) > 0
    assert set(run.trials["input_hash"]) <= set(entries[cache_file]) if "input_hash" in run.trials else True
    assert cli.main(["records", "verify"]) == 0
    capsys.readouterr()
    # an entry recomputed differently later (a valid seal, another value): the record depended on it
    key = sorted(entries[cache_file])[0]
    cache = InferenceCache(default_cache_dir())
    value = cache.get_many([key])[key]
    cache.put_many({key: {**value, "changed": 1}} if isinstance(value, dict) else {key: [value, 1]})
    assert cli.main(["records", "verify"]) == 1
    out = capsys.readouterr().out
    assert f"BAD {run.run_id}" in out and "1 of the" in out and key in out and "changed since" in out
    # the list itself is covered by the manifest
    cache.put_many({key: value})
    assert cli.main(["records", "verify"]) == 0
    (run.path / CACHE_ENTRIES_FILE).write_text((run.path / CACHE_ENTRIES_FILE).read_text().replace(key, "0" * 64))
    assert cli.main(["records", "verify"]) == 1
    assert "does not match the manifest's inference_cache.sha256" in capsys.readouterr().out


def test_entries_of_a_record_are_committed_before_its_trials_not_after_every_call(tmp_path, runs_root):
    """Attached to a record's writer, new entries are held and served from memory, then committed in one
    transaction when the writer is about to write trials: a trial never exists before its entries."""
    from shovir_core.records import RunWriter

    _, requests = _requests(2)
    model = cached(get_model("ref-image-classifier"), directory=tmp_path, progress=False)
    with RunWriter("shovir", "deferred", {"x": 1}) as writer:
        model.record_into(writer)
        first = model.score_yes_no(requests[:2])
        second = model.score_yes_no(requests)  # the first two are served from the held entries
        assert second[:2] == first and model.computed == len(requests)
        con = sqlite3.connect(model.cache.path)
        assert con.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 0  # nothing committed yet
        con.close()
        writer.append([{"trial_id": f"t{i}", "input_hash": s["input_hash"]} for i, s in enumerate(second)])
        stored = InferenceCache(tmp_path).seals([s["input_hash"] for s in second])
        assert stored == {s["input_hash"]: model.used[s["input_hash"]] for s in second}
    fresh = cached(get_model("ref-image-classifier"), directory=tmp_path, progress=False)
    assert fresh.score_yes_no(requests) == second and fresh.computed == 0


def _open_after(barrier, directory, queue) -> None:
    barrier.wait()
    try:
        InferenceCache(directory)
        queue.put(None)
    except Exception as exc:  # noqa: BLE001 - reported to the test
        queue.put(f"{type(exc).__name__}: {exc}")


@pytest.mark.parametrize("old_schema", [False, True])
def test_processes_opening_one_cache_at_once_all_open_it(tmp_path, old_schema):
    """Shards of one run open (and, for a new or an older file, create or upgrade) the same cache at the same
    moment: each opens it, none sees another's half-made schema (two upgrades once raced to "duplicate column
    name", and a rehearsal shard died of it)."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    for attempt in range(12):
        directory = tmp_path / f"c{attempt}"
        if old_schema:
            directory.mkdir()
            with sqlite3.connect(directory / "inference.sqlite") as con:
                con.execute("CREATE TABLE results (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                con.execute("INSERT INTO results VALUES ('k', '1')")
        barrier, queue = ctx.Barrier(6), ctx.Queue()
        procs = [ctx.Process(target=_open_after, args=(barrier, directory, queue)) for _ in range(6)]
        for p in procs:
            p.start()
        errors = [queue.get(timeout=120) for _ in procs]
        for p in procs:
            p.join()
        assert errors == [None] * 6, errors
        if old_schema:
            assert InferenceCache(directory).get_many(["k"]) == {"k": 1}
