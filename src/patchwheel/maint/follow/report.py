"""What `follow` and `derive` did, for people: a few lines on the terminal, and Markdown for the pull request the
watch opens.

The Markdown shows text a proof run printed (upstream's own messages): it goes through the matrix's escaping
(:func:`matrix.table.md_text`), as the matrix's Markdown does.
"""

from __future__ import annotations

from ...matrix.table import WHERE, md_code, md_text
from ..carry.outcome import Stop
from .derive import Derived
from .follow import LATEST, Followed


def summary(done: Followed) -> list[str]:
    """The closing lines of one package's follow."""
    if done.stop is not None:
        return _stopped(f"{done.package}: STOPPED on {done.line}, nothing of it written: {done.stop.why}", done.stop)
    if not done.releases:
        return []
    kept = sum(v.decision.startswith("carried") for v in done.verdicts[done.line])
    dropped = len(done.verdicts[done.line]) - kept
    parts = [
        f"{done.package}: the line {done.newest} carried onto {' -> '.join(done.releases)} in {done.seconds:.0f} s"
    ]
    parts.append(f"{kept} patch(es) kept, {dropped} dropped")
    if done.moved:
        parts.append(done.moved)
    return _closing(parts, done.retired, bool(done.runs), len(done.written))


def markdown(done: Followed) -> str:
    """The pull request's body for one package's new line, or the stop for the job's summary."""
    if done.stop is not None:
        return "\n".join(
            [
                f"## {md_text(done.package)} {md_text(done.line)}: stopped, a maintainer must judge",
                "",
                md_text(done.stop.why),
                "",
                "Nothing was written. The commands that carry it by hand:",
                "",
                "```sh",
                *[c.replace("```", "'''") for c in done.stop.commands],
                "```",
                "",
            ]
        )
    if not done.releases:
        return f"## {md_text(done.package)}: nothing newer than the line {md_text(done.newest)}\n"
    out = [
        f"## {md_text(done.package)} {md_text(done.line)}+fixed: the {md_text(done.newest)} line carried onto "
        f"{md_text(', '.join(done.releases))}",
        "",
        "Made by `nox -s follow` with nothing left to judge: every kept patch applies, and each kept fix's proof "
        "still fails on the pristine release.",
        "",
    ]
    for release, verdicts in done.verdicts.items():
        out += [
            f"### The {md_text(done.package)} {md_text(release)} verdicts",
            "",
            f"| patch | text | proof on pristine {md_text(release)} | follow |",
            "|---|---|---|---|",
        ]
        for v in verdicts:
            proof = v.behaviour + (f": {v.detail}" if v.detail and v.behaviour != "n/a" else "")
            out.append(f"| {md_text(v.patch)} | {md_text(v.text)} | {md_text(proof)} | {md_text(v.decision)} |")
        out.append("")
    out += ["### The rebase", "", *[f"- {md_text(line)}" for line in done.carried], ""]
    out += [f"### The new line proven both ways (the set `{LATEST}`)", ""]
    out += [f"- {md_text(r.name)}: {'passed' if r.ok else 'FAILED'} ({md_text(r.summary)})" for r in done.runs]
    out += ["", "### Also in this change", ""]
    if done.moved:
        out.append(f"- {md_code(done.moved)} (overlay/sets.toml)")
    for key in done.retired:
        out.append(
            f"- retired {md_code(key)}: no consumer set names it and it is not the newest line; its published "
            "wheels stay on the index"
        )
    out.append(
        f"- {md_text(WHERE)}: every line of {md_text(done.package)} judged on {md_text(', '.join(done.releases))}"
    )
    out.append(f"- {len(done.written)} file(s) of overlay/ and patches/ written")
    return "\n".join(out) + "\n"


def derived(done: Derived) -> list[str]:
    """The closing lines of a derive."""
    what = f"{done.package} {done.version}"
    if done.stop is not None:
        where = f"; the work repository waits in {done.waiting}" if done.waiting else ""
        return _stopped(f"{what}: STOPPED, nothing of the project written{where}: {done.stop.why}", done.stop)
    kept = sum(not v.decision.startswith("dropped") for v in done.verdicts)
    parts = [f"{what}+fixed derived from the line {done.source} in {done.seconds:.0f} s"]
    parts.append(f"{kept} patch(es) kept, {len(done.verdicts) - kept} dropped")
    parts.append(done.set_change)
    return _closing(parts, done.retired, bool(done.runs), len(done.written))


def _stopped(head: str, stop: Stop) -> list[str]:
    """The closing lines of a stopped follow or derive: why, and the maintainer's commands."""
    return [head, "  a maintainer takes it from here:"] + [f"    {c}" for c in stop.commands]


def _closing(parts: list[str], retired: list[str], proven: bool, written: int) -> list[str]:
    """The closing lines of a follow or derive that wrote its line: ``parts`` and what both say after them."""
    if retired:
        parts.append("retired " + ", ".join(retired))
    parts.append("proofs and guards passed both ways" if proven else "nothing to prove")
    parts.append(f"{written} file(s) written")
    return ["; ".join(parts), "next: review and commit them (git status); `nox -s build` puts the wheels into dist/"]
