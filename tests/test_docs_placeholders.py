"""No unfilled template slot in the README or the docs: a ``{name}`` left where a table or
a figure should have been printed (outside code blocks and inline code, where braces are
JSON, f-strings or format examples)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+).*?\1")
# a slot: {identifier} or {identifier.attr} / {identifier[0]}, not preceded by a backslash
# or another brace (LaTeX \frac{a}{b}, {{escaped}})
SLOT = re.compile(r"(?<![\\{\w^_])\{[A-Za-z_][\w.\[\]]*(?::[^{}\s]*)?\}(?!\})")


def unfilled_slots(text: str) -> list[tuple[int, str]]:
    """``(line number, slot)`` for each template slot outside fenced and inline code."""
    found, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        prose = re.sub(r"\$[^$]*\$", "", INLINE_CODE.sub("", line))  # and inline math
        found += [(number, m.group()) for m in SLOT.finditer(prose)]
    return found


def test_the_check_finds_slots_and_spares_code():
    text = "\n".join(
        [
            "**Results**",
            "",
            "{explore}",
            "| arm | {w1} |",
            "Run `fieldrl x --out {dir}` for $\\frac{a}{b}$.",
            "```python",
            'print(f"{value}")',
            '{"key": 1}',
            "```",
            "~~~",
            "{tracking}",
            "~~~",
        ]
    )
    assert unfilled_slots(text) == [(3, "{explore}"), (4, "{w1}")]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_unfilled_placeholder(path):
    slots = unfilled_slots(path.read_text(encoding="utf-8"))
    where = ", ".join(f"line {n}: {s}" for n, s in slots)
    assert not slots, f"{path.relative_to(ROOT)} has unfilled template slots ({where})"
