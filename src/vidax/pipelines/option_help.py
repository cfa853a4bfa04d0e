"""The ``--help`` text of a call keyword several pipelines declare: their helps joined into one
text (``vidax generate``'s one flag per keyword)."""

from __future__ import annotations

import re


def _sentences(text: str) -> list[str]:
    """``text`` split after each ``.`` that ends a sentence outside parentheses."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "." and depth == 0 and (i + 1 == len(text) or text[i + 1] == " "):
            out.append(text[start : i + 1].strip())
            start = i + 1
    rest = text[start:].strip()
    return out + ([rest] if rest else [])


def _split(sentence: str) -> tuple[str, str | None]:
    """``"Video to condition on (X)."`` -> ``("Video to condition on", "X")``; a sentence without
    a closing parenthetical: ``(sentence without its period, None)``."""
    m = re.fullmatch(r"(.*?) \(([^()]*(?:\([^()]*\)[^()]*)*)\)\.?", sentence)
    return (m.group(1), m.group(2)) if m else (sentence.rstrip("."), None)


def join_helps(helps: list[str]) -> str:
    """One text from the helps of one keyword: sentences that only differ in their closing
    parenthetical become one sentence with the parentheticals joined by ``;``
    (``"Video to condition on (Cosmos 3 ...; LTX-2 ...)."``), a sentence said already (with or
    without a parenthetical) is not repeated."""
    order: list[str] = []
    notes: dict[str, list[str]] = {}
    for help_text in helps:
        for sentence in _sentences(help_text):
            head, note = _split(sentence)
            if head not in notes:
                order.append(head)
                notes[head] = []
            if note is not None and note not in notes[head]:
                notes[head].append(note)
    return " ".join(f"{h} ({'; '.join(notes[h])})." if notes[h] else f"{h}." for h in order)
