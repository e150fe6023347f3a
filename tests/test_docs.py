"""The docs cannot drift: the configuration reference is the one the config models render, the
site builds strictly (every page in the navigation, no broken link), the README stays short."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from binlake.config.reference import reference

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


def test_the_docs_hold_the_present_and_cite_the_project_only() -> None:
    """Dated runs belong in bench/RESULTS.md (docs/benchmarks.md holds the current figures);
    code and docs cite docs/architecture.md, never a design file outside the project."""
    import re

    dated = re.compile(r"(?<![`'\"])\b20\d\d-[01]\d-[0-3]\d\b")
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = [f"{p.name}:{n}" for p in pages for n, line in enumerate(p.read_text().splitlines(), 1)
             if dated.search(line)]  # fmt: skip
    assert found == []
    sources = [*ROOT.glob("include/**/*.py"), *ROOT.glob("dags/*.py"), *ROOT.glob("jobs/*.py"), *pages]
    assert [str(p.relative_to(ROOT)) for p in sources if "ARCHITECTURE.md" in p.read_text()] == []


def test_the_readme_pipelines_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pipeline file the README shows is one binlake reads (the environment it names set)."""
    import re

    from binlake.config.pipeline_file import load_config

    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert len(blocks) >= 2
    for n, text in enumerate(blocks):
        for name in re.findall(r"\$\{(\w+)", text):
            monkeypatch.setenv(name, "x")
        path = tmp_path / f"readme-{n}.yaml"
        path.write_text(text)
        config = load_config(str(path))
        assert config.pipeline.name == "shop"
        assert config.source.tables == ["shop\\..*"]
