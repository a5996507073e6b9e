"""Training commands of the demo's own models (above ``models``, ``data`` and ``protocols``).

``python -m shovir_core.training.reference``  the reference models' CNN weights and parameters
``python -m shovir_core.training.ref_vlm``    the trained ``ref-vlm`` (ModaLens demo model)
``python -m shovir_core.training.ref_vlm_vqarad``  ``ref-vlm-vqarad`` (VQA-RAD's official training questions)

``models`` only loads what these write to ``shovir_core/resources/``; it never imports this package.
"""
