"""The matrix as Markdown, tables of ten releases a line, and the Markdown escaping that everything showing
upstream's text uses (a proof's detail is upstream's own message, ``<class 'torch.Tensor'>`` included, and a
fragment of the watch was written by a job that ran upstream's code)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .matrix import Matrix

#: The text results and the behaviour verdicts, as one character each in the tables (the keys are the matrix's
#: vocabulary: patchwheel.matrix re-exports them).
TEXT_CODE = {"clean": "C", "offset": "O", "3-way": "3", "already-upstream": "U", "conflict": "X"}
BEHAVIOUR_CODE = {"passes": "✓", "fails": "✗", "error": "!", "n/a": "–", None: "·"}

#: Markdown punctuation that could start emphasis, a link, a code span or a table column in running text (a
#: backslash escapes each in CommonMark and GitHub's tables); ``&``, ``<``, ``>`` become HTML entities.
_MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]|~"} | {"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def md_text(text: object) -> str:
    """``text`` as one line of literal Markdown."""
    return " ".join(str(text).splitlines()).translate(_MD_SPECIAL)


def md_code(text: object) -> str:
    """``text`` as one Markdown code span: fenced by more backticks than it holds in a row (CommonMark)."""
    one_line = " ".join(str(text).splitlines())
    fence = "`" * (1 + max((len(run) for run in re.findall(r"`+", one_line)), default=0))
    pad = " " if one_line.startswith("`") or one_line.endswith("`") else ""
    return f"{fence}{pad}{one_line}{pad}{fence}"


HEADER = [
    "# Patch status against newer upstream releases",
    "",
    "Written by `nox -s upstream`; do not edit. Each cell: text result, then behaviour.",
    "",
    "Text: **C** clean, **O** offset, **3** needs a 3-way merge, **U** already upstream (reverse-applies or "
    "empty after merge), **X** conflict.  ",
    "Behaviour (the patch's proof test on the pristine release): **✓** passes, the bug is gone upstream; "
    "**✗** fails, the patch is still needed; **!** could not judge; **–** a feature (dropped by release or "
    "PR, not by a proof); **·** not judged.  ",
    "**(✓)**, **(✗)**, **(!)** inferred, not run: the nearest releases on both sides were run and agree. Proofs "
    "run where a verdict can change (the first and last release, each release where a Drop-When starts to hold "
    "or a text result changes) and bisect between run releases that disagree, so both sides of every change of "
    "verdict were run.  ",
    "**⚠** the Drop-When condition and the behaviour disagree (see the notes under the table). "
    "*(y)* marks a yanked release.",
    "",
]


def render(matrix: Matrix, per_table: int = 10) -> str:
    out = list(HEADER)
    for line in matrix.lines:
        out += [
            f"## {md_text(line.line)}",
            "",
            f"Proofs ran with {md_text(', '.join(line.companions))} and torch {md_text(matrix.torch)}.",
            "",
        ]
        heads = [md_text(r.version) + (" *(y)*" if r.yanked else "") for r in line.releases]
        keys = line.versions
        notes = []
        for start in range(0, len(keys), per_table):
            cols = keys[start : start + per_table]
            out.append("| patch | " + " | ".join(heads[start : start + per_table]) + " |")
            out.append("|---|" + "---|" * len(cols))
            for p in line.patches:
                row = []
                for v in cols:
                    cell = p.cells.get(v)
                    if cell is None:
                        row.append("")
                        continue
                    verdict = BEHAVIOUR_CODE[cell.behaviour]
                    mark = TEXT_CODE[cell.text] + " " + (f"({verdict})" if cell.inferred_from is not None else verdict)
                    if cell.flags:
                        mark += " ⚠"
                        detail = f" ({md_text(cell.behaviour_detail)})" if cell.behaviour_detail else ""
                        notes.append(f"- {md_text(p.name)} vs {md_text(v)}: {md_text(cell.flags[0])}{detail}")
                    row.append(mark)
                out.append(f"| {md_text(p.name.split('.patch')[0])} | " + " | ".join(row) + " |")
            out.append("")
        drop = [
            f"- {md_text(p.name)}: Drop-When {md_code(p.drop_when)}; Upstream-Status "
            f"{md_code(p.upstream_status)}; test {md_code(p.proof_test)}"
            for p in line.patches
        ]
        out += drop + [""] + (["Notes:", ""] + notes + [""] if notes else [])
    return "\n".join(out).rstrip() + "\n"
