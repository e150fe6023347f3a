"""The docs cannot drift: the configuration reference is the one the config models render, the
site builds strictly (every page in the navigation, no broken link), the README stays short."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from binlake.config_reference import reference

ROOT = Path(__file__).parents[1]


def test_the_configuration_reference_is_the_models_own() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert page == reference(), "docs/configuration.md is out of date: run `make docs`"


def test_every_config_key_is_documented() -> None:
    rows = [line for line in reference().splitlines() if line.startswith("| `")]
    undocumented = [row.split("|")[1].strip() for row in rows if row.rstrip().endswith("|  |")]
    assert len(rows) > 80
    assert not undocumented, f"keys without a docstring under their field: {undocumented}"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).parent / "mkdocs"
    built = subprocess.run(
        [str(mkdocs), "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    assert (tmp_path / "site" / "configuration" / "index.html").is_file()


def test_the_readme_is_read_in_five_minutes() -> None:
    readme = (ROOT / "README.md").read_text().splitlines()
    assert len(readme) <= 300
    assert readme[3].startswith("make demo")  # the first lines: the two commands
    assert readme[4].startswith("make test")
