"""``rewyn-kernel review NOTEBOOK.ipynb`` for a notebook an agent and a person shared
(``rewyn-kernel mcp --notebook``): who wrote each cell, and what became of each call the person
was asked to approve.

The review is a copy of the notebook with a summary at the top (a table of every cell: its
author, its approval, how its latest execution ended) and, above each agent cell, a line saying
which agent and call made it and what the person did: approved, edited (with the proposal's
diff), rejected (with the note), or let expire. Everything shown comes from the notebook's
metadata, which anything that edits the notebook can write: names and notes are shown as plain
text (Markdown and HTML escaped, bounded), code in fences no backtick run can close.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from rewyn_kernel.kernel.record import METADATA_KEY
from rewyn_kernel.notebooks.agent_cells import AgentMark, agent_mark, record_of, source_of

MAX_NOTEBOOK_BYTES = 256 * 1024 * 1024
MAX_SHOWN = 300
MAX_DIFF_LINES = 200
NOTE_KEY = "live_review"
"""The key (under ``rewyn_kernel``) that marks the cells the review adds, and the notebook's
summary in its metadata."""
_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>:/])")
WHAT = {
    "approved": "approved by the person, run as proposed",
    "edited": "edited by the person, then run",
    "rejected": "rejected by the person: not run",
    "expired": "not approved in time: not run",
    "pending": "still waiting for the person: not run",
    "running": "running when the notebook was saved",
    "done": "run without approval (the policy did not ask)",
    "interrupted": "interrupted",
    "withdrawn": "withdrawn: the agent stopped waiting before the person decided: not run",
}


class NotALiveNotebook(ValueError):
    """The file is not a notebook this review reads."""


def plain(text: str, limit: int = MAX_SHOWN) -> str:
    """``text`` as plain text in Markdown: one line, bounded, nothing that renders as markup."""
    line = " ".join(text.split())
    if len(line) > limit:
        line = line[: limit - 1] + "…"
    line = line.replace("&", "&amp;").replace("<", "&lt;")
    return _SPECIAL.sub(r"\\\1", line)


def fenced(code: str, language: str = "") -> str:
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{code}\n{fence}"


def read_notebook(path: Path) -> dict[str, Any]:
    if path.stat().st_size > MAX_NOTEBOOK_BYTES:
        raise NotALiveNotebook(f"{path}: over {MAX_NOTEBOOK_BYTES // 2**20} MiB")
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise NotALiveNotebook(f"{path}: not a notebook ({exc})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise NotALiveNotebook(f"{path}: not a notebook (no cells)")
    return nb


def is_review_notebook(nb: dict[str, Any]) -> bool:
    """A notebook ``review RUNLOG`` wrote (``--check`` re-runs those)."""
    ours = (nb.get("metadata") or {}).get(METADATA_KEY)
    return isinstance(ours, dict) and "review" in ours


def _note_cell(text: str, number: int) -> dict[str, Any]:
    return {
        "cell_type": "markdown",
        "id": f"rewyn-review-{number}",
        "metadata": {METADATA_KEY: {NOTE_KEY: True}},
        "source": text,
    }


def _about(mark: AgentMark, source: str, ending: str | None) -> str:
    number = f"call {mark.number} " if mark.number is not None else "call "
    parts = [f"**agent {plain(mark.name, 100)}** · {number}`{plain(mark.call, 64)}`"]
    parts.append(plain(WHAT.get(mark.state, mark.state)))
    if mark.risk:
        parts.append(f"risk {plain(mark.risk, 20)}")
    if ending and mark.state not in ("rejected", "expired", "pending", "withdrawn"):
        parts.append(f"ended: {plain(ending, 40)}")
    text = " · ".join(parts)
    asked = ("approved", "edited", "rejected", "expired", "pending", "withdrawn")
    if mark.reason and mark.state in asked:
        text += f"\n\nAsked because: {plain(mark.reason)}"
    if mark.state == "rejected":
        text += f"\n\nThe person's note: {plain(mark.note) if mark.note else '(none)'}"
    if mark.state == "edited" and mark.code is not None:
        diff = list(
            difflib.unified_diff(
                mark.code.splitlines(), source.splitlines(), "proposed", "run", lineterm=""
            )
        )
        shown = "\n".join(diff[:MAX_DIFF_LINES])
        if len(diff) > MAX_DIFF_LINES:
            shown += f"\n... {len(diff) - MAX_DIFF_LINES} more lines"
        text += "\n\nWhat the person changed:\n\n" + fenced(shown, "diff")
    return text


def review_live(source: Path, output: Path) -> tuple[dict[str, Any], list[str]]:
    """The review of the shared notebook at ``source`` (not yet written), and its summary
    lines."""
    nb = read_notebook(source)
    if is_review_notebook(nb):
        raise NotALiveNotebook(f"{source} is a review notebook already (re-run it with --check)")
    rows = []
    authors: Counter[str] = Counter()
    states: Counter[str] = Counter()
    cells: list[dict[str, Any]] = []
    for index, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict):
            continue
        metadata = cell.get("metadata")
        mark = agent_mark(metadata)
        record = record_of(metadata)
        ending = str(record.get("ending"))[:40] if record and record.get("ending") else None
        if mark is None:
            authors["person"] += 1
            who, what = "person", ""
        else:
            authors[f"agent {mark.name}"] += 1
            states[mark.state] += 1
            who, what = f"agent {plain(mark.name, 100)}", plain(WHAT.get(mark.state, mark.state))
            cells.append(_note_cell(_about(mark, source_of(cell), ending), index + 1))
        kind = plain(str(cell.get("cell_type", "?")), 16)
        rows.append(f"| {index} | {kind} | {who} | {what} | {plain(ending or '')} |")
        cells.append(copy.deepcopy(cell))
    counts = ", ".join(f"{plain(name, 110)}: {count}" for name, count in sorted(authors.items()))
    decided = ", ".join(f"{state}: {count}" for state, count in sorted(states.items()))
    header = (
        f"# Review of {plain(source.name)}\n\n"
        f"Cells by author: {counts or 'none'}.\n\n"
        f"Agent cells by outcome: {decided or 'none'}.\n\n"
        "| cell | type | written by | approval | ended |\n|---|---|---|---|---|\n" + "\n".join(rows)
    )
    review = copy.deepcopy(nb)
    review["cells"] = [_note_cell(header, 0), *cells]
    metadata = review.setdefault("metadata", {})
    ours = metadata.setdefault(METADATA_KEY, {})
    if isinstance(ours, dict):
        ours[NOTE_KEY] = {
            "source": source.name,
            "authors": dict(authors),
            "agent_cells": dict(states),
        }
    lines = [f"{name}: {count} cells" for name, count in sorted(authors.items())]
    lines += [f"agent cells {state}: {count}" for state, count in sorted(states.items())]
    return review, lines
