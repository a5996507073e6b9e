"""Tables and figure data derived from run records: pure functions of records.

Every chapter table is built by ``shovir_core.tables.<chapter>`` and returned as one type,
:class:`~shovir_core.tables.result.TableResult` (frame, glue values, display metadata, run ids);
the formulas they evaluate live in :mod:`shovir_core.metrics`.

``tables.data``           the demo cohorts: counts, label prevalence, studies per patient, boxes
``tables.labeller``       the report labeller against the IU X-ray MeSH reference
``tables.perturbations``  box sets and the DOCO rule, image-swap substitutes, noise statistics
``tables.shovir``         Table 1, Figure 2 (μ-F1 over p), Figure 3 (Δ_X, FR, per-class F1)
``tables.modalens``       Tables 1-5, Figure 2 (margins), the anchoring sweep, paper-vs-run columns
``tables.audit``          the consistency checks of the published numbers (``audit_rows``: an appendix's checks)
"""
from .result import TableResult, frame_of, run_ids_of

__all__ = ["TableResult", "frame_of", "run_ids_of"]
