"""The web UI writes numbers one way, the server's way ("20,000"): through format.js only."""

from __future__ import annotations

import re
from pathlib import Path

import durable_ops.gateway

WEB = Path(durable_ops.gateway.__file__).parent / "web"
FORMATTER = WEB / "static" / "format.js"
# Another way to format a number than formatNumber in format.js.
OTHER_FORMATTER = re.compile(r"toLocaleString\(|NumberFormat\(|toFixed\(")
# A number of four digits or more written out in text meant for people: "20000".
UNGROUPED = re.compile(r"""["'`>][^"'`<>\n]*?(?<![\d.,])\d{4,}(?![\d.,])""")


def _shown_files() -> list[Path]:
    return sorted([*WEB.glob("*.html"), *(WEB / "static").rglob("*.js")])


def _code(path: Path) -> str:
    """The file without its comment lines: a comment may cite "RFC 9457"; no page shows it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return "\n".join(line for line in lines if not line.lstrip().startswith(("//", "/*", "*")))


def test_the_patterns_find_what_they_look_for() -> None:
    assert OTHER_FORMATTER.search("`${n.toLocaleString()} characters`")
    assert UNGROUPED.search('"Up to 20000 characters."')
    assert UNGROUPED.search("<p>Up to 20000 characters.</p>")
    assert UNGROUPED.search('"Up to 20,000 characters."') is None
    assert UNGROUPED.search("const CV_TEXT_MAX = 200000;") is None


def test_only_format_js_formats_numbers() -> None:
    assert FORMATTER.is_file()
    others = [
        f"{path.relative_to(WEB)}: {found.group()}"
        for path in _shown_files()
        if path != FORMATTER
        for found in OTHER_FORMATTER.finditer(_code(path))
    ]
    assert others == []


def test_no_page_spells_a_large_number_without_its_separator() -> None:
    spelled = [
        f"{path.relative_to(WEB)}: {found.group()}"
        for path in _shown_files()
        for found in UNGROUPED.finditer(_code(path))
    ]
    assert spelled == []
