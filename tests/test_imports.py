"""Importing the package stays light: only building a model loads torch/transformers."""
import subprocess
import sys


def test_no_torch_at_import():
    code = (
        "import sys\n"
        "import shovir_core.data, shovir_core.perturb, shovir_core.labeling, shovir_core.metrics, "
        "shovir_core.stats, shovir_core.records, shovir_core.protocols, shovir_core.tables.shovir, "
        "shovir_core.tables.modalens, shovir_core.book, shovir_core.papers, shovir_core.models\n"
        "from shovir_core.models import get_model\n"
        "get_model('ref-report-reader')\n"
        "heavy = sorted(m for m in ('torch', 'transformers') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"imported at package import: {out.stdout.strip()}"


def test_chapter_kernels_that_read_records_import_no_torch():
    """A chapter that only reads records imports every ``tables`` module and the protocols' specs
    without torch (the App. N chapters did so through the knockout spans of ``models.lens``)."""
    import pkgutil

    import shovir_core.tables

    names = sorted(m.name for m in pkgutil.iter_modules(shovir_core.tables.__path__))
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module('shovir_core.tables.' + name)\n"
        "import shovir_core.protocols as p\n"
        "for name in p.REGISTRY:\n"
        "    p.get_protocol(name).SPEC\n"
        "print(','.join(sorted(m for m in ('torch', 'transformers') if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"imported by a tables module or a protocol spec: {out.stdout.strip()}"
