"""``shovir audit``: one model (declared in a catalogue, built in, or imported) through the ShoViR and
ModaLens designs to a report card; ``--export DIR`` writes the audit's model inputs for a model that
runs elsewhere (answer them, then ``shovir import``)."""
from __future__ import annotations

import argparse
import os
import sys

__all__ = ["add_parser", "main", "use_catalogue"]


def use_catalogue(path: str | None) -> None:
    """Register a catalogue file and name it in ``$SHOVIR_MODELS`` (so shard processes see it too)."""
    if not path:
        return
    from ..protocols.catalog import MODELS_ENV, register_catalogue

    register_catalogue(path)
    full = os.path.abspath(os.path.expanduser(path))
    have = [p for p in os.environ.get(MODELS_ENV, "").split(os.pathsep) if p]
    if full not in have:
        os.environ[MODELS_ENV] = os.pathsep.join(have + [full])


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``audit`` subcommand."""
    p = subparsers.add_parser(
        "audit", help="run one model through ShoViR and ModaLens and write its report card",
        description="Make (or resume) the records of the ShoViR image- and disease-level protocol and the "
                    "ModaLens primary design (report present/absent, with and without the answer instruction) "
                    "for MODEL, then write its report card (card.html, card.md, card.csv) beside the papers' "
                    "models. MODEL is a registry name, a model of a catalogue (--models FILE or "
                    "$SHOVIR_MODELS) or a model imported with `shovir import`. With --export DIR, write the "
                    "audit's exact model inputs instead (no MODEL needed).")
    p.add_argument("model", nargs="?", metavar="MODEL")
    p.add_argument("--profile", default="demo", help="params/report_card/<profile>.yaml (default: demo)")
    p.add_argument("--only", choices=["shovir", "modalens"], help="one protocol only")
    p.add_argument("--models", dest="catalogue", metavar="FILE", help="a model catalogue (YAML)")
    p.add_argument("--out", help="folder of the card (default: $SHOVIR_RUNS/cards/<model>/<profile>)")
    p.add_argument("--export", metavar="DIR", help="write the audit's model inputs to DIR instead")
    p.add_argument("--show", action="store_true", help="print how the model is prompted and read (token families)")
    p.add_argument("--force", action="store_true", help="--export: allow a folder of the repository")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=main)
    return p


def main(args: argparse.Namespace) -> int:
    from . import audit_parameters, audit_runs, make_records
    from .plan import AuditError

    use_catalogue(args.catalogue)
    if args.export:
        from .export import export_inputs

        info = export_inputs(args.export, profile=args.profile, only=args.only, force=args.force,
                             progress=not args.quiet)
        print(f"exported {info['n_trials']['report']} report and {info['n_trials']['yes_no']} yes/no trials to "
              f"{args.export} (trials.jsonl, images/); answer them, then `shovir import FILE --name NAME "
              f"--export {args.export}`")
        return 0
    if not args.model:
        raise AuditError("audit: name a MODEL (or --export DIR)")
    from ..models import get_model, list_models

    if args.model not in list_models() and args.model.partition("@")[0] not in list_models():
        raise AuditError(f"audit: unknown model {args.model!r}; declare it in a catalogue (--models FILE), import "
                       "its answers (shovir import), or use a registry name (python -c \"from shovir_core.models "
                       "import list_models; print(list_models())\")")
    if args.show:
        model = get_model(args.model)
        describe = getattr(model, "describe", None)
        import json

        print(json.dumps(describe() if describe else model.provenance(), indent=2, default=str))
        return 0
    from .card import write_card

    params = audit_parameters(args.profile)
    runs = make_records(audit_runs(args.model, profile=args.profile, only=args.only), progress=not args.quiet)
    bad = [k for k, r in runs.items() if r is None or r.status != "complete"]
    if bad:
        print(f"audit: records {bad} are not complete (run again to resume)", file=sys.stderr)
        return 1
    page = write_card(args.model, runs, profile=args.profile, out_dir=args.out,
                      n_draws=int(params.get("n_draws", 200)), seed=int(params.get("seed", 3)),
                      paper_dataset=params.get("paper_dataset"))
    for key, run in runs.items():
        print(f"{key}: {run.run_id} ({run.info.n_trials} trials)")
    print(f"report card: {page}")
    return 0
