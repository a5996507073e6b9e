from shovir_core import papers


def test_audit_glue_values_cover_totals_kinds_and_flags():
    checks = papers.audit("shovir")
    counts = {"n_values": 123}
    values = papers.audit_glue_values(checks, counts, paper="shovir")
    flagged = checks[checks["status"] == "flagged"]
    assert values["audit.shovir.n_checks"] == len(checks)
    assert values["audit.shovir.n_flagged"] == len(flagged) > 0
    assert values["audit.shovir.n_passed"] + values["audit.shovir.n_flagged"] == len(checks)
    assert values["audit.shovir.n_values"] == 123
    kinds = checks["kind"].unique()
    assert sum(values[f"audit.shovir.kind.{k}.checks"] for k in kinds) == len(checks)
    for cid, stated in zip(flagged["id"], flagged["stated"]):
        assert values[f"audit.shovir.flagged.{cid.removeprefix('shovir.')}.stated"] == stated
    assert all(k.startswith("audit.shovir.") for k in values)
