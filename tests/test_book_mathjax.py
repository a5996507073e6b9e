"""The offline MathJax: installed with npm at the pinned version, refused when it is not the pinned file."""
import os
import stat

import pytest

from shovir_core.book import mathjax


def _fake_npm(tmp_path, content: bytes):
    """An `npm` that 'installs' mathjax by writing the given entry script (no network)."""
    script = tmp_path / "npm"
    payload = tmp_path / "payload.js"
    payload.write_bytes(content)
    script.write_text(
        "#!/bin/sh\n"
        "prefix=''\nwhile [ $# -gt 0 ]; do [ \"$1\" = --prefix ] && prefix=$2; shift; done\n"
        f"d=$prefix/node_modules/mathjax/es5; mkdir -p $d/input $d/output/chtml $d/ui $d/a11y $d/adaptors\n"
        f"cp {payload} $d/tex-mml-chtml.js; echo x > $d/output/chtml.js\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_a_file_that_is_not_the_pinned_one_fails(tmp_path):
    npm = _fake_npm(tmp_path, b"not mathjax")
    with pytest.raises(mathjax.MathJaxError, match="expected " + mathjax.MATHJAX_SHA256):
        mathjax.install_mathjax(tmp_path / "cache", npm=npm)


def test_missing_npm_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(mathjax.MathJaxError, match="npm is not installed"):
        mathjax.install_mathjax(tmp_path / "cache")


@pytest.mark.skipif(not os.environ.get("SHOVIR_TEST_NPM"), reason="set SHOVIR_TEST_NPM=1 to install from the npm registry")
def test_real_install_is_the_pinned_version(tmp_path):
    static = mathjax.install_mathjax(tmp_path / "cache")
    assert (static / mathjax.MATHJAX_ENTRY).is_file()
    assert (static / "mathjax" / "output" / "chtml" / "fonts").is_dir()
