"""Data Docs that render without internet: the scripts, styles and fonts they load, vendored.

great-expectations writes pages that load jQuery, Bootstrap, bootstrap-table, Font Awesome and Vega
from seven CDNs; offline, or on an air-gapped platform, the index lists nothing (its table is
built by bootstrap-table) and the pages have no styles. binlake takes the same files from their npm
packages (``web/package.json``, pinned by ``web/package-lock.json``; ``make setup`` installs them),
copies them once into ``<work_dir>/reports/_assets/``, beside the runs' sites (2.5 MB, shared by
every run), and points every page at them by a relative URL, so a report renders the same opened
from disk or served by binlake's Airflow plugin. Without the packages (``make setup`` not run) the
report keeps the CDN links and a warning says how to fix it.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

log = logging.getLogger(__name__)

_CDNJS = "https://cdnjs.cloudflare.com/ajax/libs"
_TABLE = "https://unpkg.com/bootstrap-table@{}/dist"
_FILTER = "extensions/filter-control/bootstrap-table-filter-control"
_JSDELIVR = "https://cdn.jsdelivr.net/npm"

#: Every CDN URL great-expectations' templates load → the file of its npm package that serves it.
ASSETS: dict[str, str] = {
    "https://code.jquery.com/jquery-3.7.1.min.js": "jquery/dist/jquery.min.js",
    **{
        f"https://{host}.bootstrapcdn.com/bootstrap/4.3.1/{kind}/bootstrap.min.{kind}": (
            f"bootstrap/dist/{kind}/bootstrap.min.{kind}"
        )
        for host, kind in (("maxcdn", "css"), ("stackpath", "js"))
    },
    f"{_CDNJS}/popper.js/1.12.9/umd/popper.min.js": "popper.js/dist/umd/popper.min.js",
    **{
        f"{_CDNJS}/bootstrap-datepicker/1.9.0/{kind}/bootstrap-datepicker.min.{kind}": (
            f"bootstrap-datepicker/dist/{kind}/bootstrap-datepicker.min.{kind}"
        )
        for kind in ("css", "js")
    },
    **{
        f"{_TABLE.format('1.19.1')}/{n}": f"bootstrap-table/dist/{n}"
        for n in ("bootstrap-table.min.css", "bootstrap-table.min.js")
    },
    f"{_TABLE.format('1.19.1')}/{_FILTER}.min.js": f"bootstrap-table/dist/{_FILTER}.min.js",
    # The templates ask for 1.19.0's filter-control styles beside 1.19.1's script: one release serves.
    **{
        f"{_TABLE.format('1.19.0')}/{_FILTER}{e}": f"bootstrap-table/dist/{_FILTER}{e}"
        for e in (".css", ".min.css")
    },
    f"{_JSDELIVR}/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css": (
        "@forevolve/bootstrap-dark/dist/css/bootstrap-prefers-dark.css"
    ),
    f"{_CDNJS}/font-awesome/6.6.0/css/all.min.css": "@fortawesome/fontawesome-free/css/all.min.css",
    **{
        f"{_JSDELIVR}/{name}@{major}": f"{name}/build/{name}.min.js"
        for name, major in (("vega", 5), ("vega-lite", 5), ("vega-embed", 6))
    },
}
#: Where great-expectations' pages take their logo from; the site holds the same images locally.
GX_IMAGES = "https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/"
#: Folders copied whole: what a vendored file loads by a relative URL (Font Awesome's fonts).
FOLDERS = ("@fortawesome/fontawesome-free/webfonts",)
#: The folder beside the sites that the files go to.
VENDOR = "_assets"
#: Where the npm packages are: ``BINLAKE_REPORT_ASSETS`` or ``web/node_modules`` of the checkout.
ENVIRONMENT = "BINLAKE_REPORT_ASSETS"

_URL = re.compile(r"""(?P<attr>(?:src|href)=["'])(?P<url>https://[^"']+)(?P<end>["'])""")


_INTEGRITY = re.compile(r"""\s(?:integrity=["'][^"']*["']|crossorigin(?:=["'][^"']*["'])?)""")


def packages_folder() -> Path:
    configured = os.environ.get(ENVIRONMENT)
    return Path(configured) if configured else Path(__file__).resolve().parents[3] / "web" / "node_modules"


def vendor(site: Path, packages: Path | None = None) -> int:
    """Copy the assets into ``site`` and point its pages at them; how many pages changed."""
    packages = packages or packages_folder()
    missing = sorted({p for p in ASSETS.values() if not (packages / p).is_file()})
    if missing:
        log.warning(
            "Data Docs in %s load their scripts and styles from CDNs (blank without internet): "
            "%d of the vendored files are missing under %s (first: %s). Fix: `make setup` (npm ci in web/).",
            site, len(missing), packages, missing[0],
        )  # fmt: skip
        return 0
    target = site.parent / VENDOR
    files = set(ASSETS.values())
    files |= {
        f.relative_to(packages).as_posix() for d in FOLDERS for f in (packages / d).rglob("*") if f.is_file()
    }
    for path in sorted(files):
        _copy(packages / path, target / path)
    return sum(_rewrite(page, site) for page in site.rglob("*.html"))


def _copy(source: Path, target: Path) -> None:
    if target.is_file() and target.stat().st_size == source.stat().st_size:
        return  # an earlier run's site shares the folder
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def _rewrite(page: Path, site: Path) -> bool:
    """Point ``page``'s CDN links at the vendored files, relative to the page."""
    up = "../" * len(page.relative_to(site).parts)  # to the site's folder, then out of it
    text = page.read_text(encoding="utf-8")

    def local(match: re.Match[str]) -> str:
        url = match["url"]
        if url.startswith(GX_IMAGES):
            image = Path("static") / "images" / url.removeprefix(GX_IMAGES).split("?")[0]
            if (site / image).is_file():
                return f"{match['attr']}{up[3:]}{image.as_posix()}{match['end']}"
        path = ASSETS.get(url)
        if path is None:
            return match[0]
        return f"{match['attr']}{up}{VENDOR}/{path}{match['end']}"

    changed = _URL.sub(local, text)
    if changed == text:
        return False
    # A subresource-integrity check makes the browser fetch the file with CORS, which a page
    # opened from file:// may not: the vendored copies are the locked packages' own files.
    changed = _INTEGRITY.sub("", changed)
    page.write_text(changed, encoding="utf-8")
    return True
