"""Tables and figure data derived from run records: pure functions of records.

``tables.shovir``    Table 1, Figure 2 (μ-F1 over p), Figure 3 (Δ_X, FR, per-class F1)
``tables.modalens``  Tables 1-5, Figure 2 (margins), the anchoring sweep, paper-vs-run columns
"""
