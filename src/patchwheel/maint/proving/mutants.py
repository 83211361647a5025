"""Hunk-level mutation check: does some test need every hunk of every patch?

A proof test that passes on the +fixed build shows the fix works, not that every line of the patch is needed or
tested. This check reverts one hunk at a time in the fully patched files, installs that "mutant" into an
environment holding the +fixed wheels, and runs the patch's proof module. A failing test *kills* the mutant (the
hunk is needed and tested); a mutant on which everything passes *survived*: no test needs that hunk. A survivor is
either dead weight, an untested part of the fix, or a deliberate extra (a message, a guard); the last kind is
recorded in the patch message as ``Mutant-Survives: #<n> <reason>`` and reported as *justified*. A hunk whose
reverse no longer applies because a later patch rewrote its lines is judged on its file as the series up to its
own patch makes it (the line as it was when that patch was proven; the later patches' changes to that one file left
out), and the verdict says so; only a hunk that cannot be reverted there either is *entangled*.
"""

from __future__ import annotations

import io
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ...config import Project, ReleaseLine
from ...errors import PatchError
from ...gitops import git_env
from ...reporter import CONSOLE
from ...series import HUNK_HEADER, Patch, checked_series, matches
from ...wheels import fetch, rewrite
from ...wheels.apply import ApplyTree, apply_line
from ...wheels.distdir import current_wheel
from . import proofenv

PROOF_TIMEOUT = 600.0
JUDGED_OK = ("killed", "justified")
_HUNK_HEAD = re.compile(HUNK_HEADER.encode())
_NOTE = re.compile(r"^Mutant-Survives:\s*#(\d+)\s+(\S.*)\Z")


# --- splitting a patch into single-hunk diffs ---------------------------------------------------------------------


@dataclass(frozen=True)
class HunkRef:
    index: int  # 1-based across the whole patch, in file order
    path: str  # upstream-tree path
    header: str  # the @@ line, with its function context
    diff: bytes  # a git diff of this hunk alone: its file's header lines, then the hunk


def _hunk_length(lines: list[bytes], start: int) -> int:
    """Number of lines of the hunk whose @@ line is ``lines[start]``, the @@ line included."""
    m = _HUNK_HEAD.match(lines[start])
    old, new = int(m.group(2) or 1), int(m.group(4) or 1)  # type: ignore[union-attr]
    i = start + 1
    while i < len(lines) and (old or new or lines[i].startswith(b"\\")):
        tag = lines[i][:1]
        old -= tag in (b" ", b"-", b"\n")
        new -= tag in (b" ", b"+", b"\n")
        i += 1
    return i - start


def hunks(patch: Patch) -> list[HunkRef]:
    """Each hunk of ``patch`` as a diff of its own, numbered across the patch in file order."""
    raw = patch.raw
    start = re.search(rb"^diff --git ", raw, re.M)
    lines = io.BytesIO(raw[start.start() :] if start else b"").readlines()
    files = iter(patch.files)
    out: list[HunkRef] = []
    head: list[bytes] = []  # the current file's header lines: diff --git, index, new file mode, ---, +++
    in_head, path, i = False, "", 0
    while i < len(lines):
        if lines[i].startswith(b"diff --git "):
            head, path, in_head = [lines[i]], next(files).path, True
            i += 1
        elif _HUNK_HEAD.match(lines[i]):
            n = _hunk_length(lines, i)
            out.append(HunkRef(len(out) + 1, path, lines[i].decode().rstrip("\n"), b"".join(head + lines[i : i + n])))
            in_head = False
            i += n
        else:  # a header line, or what follows the last hunk (a signature), which no hunk takes
            if in_head:
                head.append(lines[i])
            i += 1
    return out


# --- mutant files ------------------------------------------------------------------------------------------------


class Entangled(Exception):
    """The hunk cannot be reverted alone in the fully patched files."""


def patched_files(line: ReleaseLine, series: list[Patch]) -> dict[str, bytes | None]:
    """The files the series touches (upstream-tree paths), fully patched, as ``build.build_line`` makes them."""
    by_name = rewrite.contents(rewrite.read(fetch.fetch(line.package, line.wheel)))
    return {line.upstream_path(w): d for w, d in apply_line(line, series, by_name).items()}


def mutant_files(
    line: ReleaseLine,
    series: list[Patch],
    patch_index: int,
    hunk: HunkRef,
    patched: dict[str, bytes | None] | None = None,
) -> dict[str, bytes | None]:
    """The fully patched file of ``hunk`` with that hunk alone reverted, keyed by its path in the wheel.

    ``patch_index`` is the 0-based position in ``series`` of the patch ``hunk`` belongs to; ``patched`` is
    :func:`patched_files` when the caller has it already. None as content means the file is absent (the hunk
    created it). Raises :class:`Entangled` when the reverse does not apply.
    """
    patched = patched_files(line, series) if patched is None else patched
    current = patched.get(hunk.path)
    with ApplyTree({hunk.path: current} if current is not None else {}) as tree:
        diff = tree.root.parent / "hunk.diff"
        diff.write_bytes(hunk.diff)
        res = subprocess.run(
            ["git", "apply", "--reverse", "--whitespace=nowarn", str(diff)],
            cwd=tree.root,
            env=git_env(tree.root),
            capture_output=True,
            text=True,
        )
        if res.returncode != 0:
            later = [p.name for p in series[patch_index + 1 :] if hunk.path in p.touched]
            why = f"later patch {', '.join(later)} rewrote it" if later else res.stderr.strip().splitlines()[0]
            raise Entangled(f"its reverse does not apply to the patched {hunk.path} ({why})")
        return {line.wheel_path(hunk.path): tree.read([hunk.path])[hunk.path]}  # type: ignore[dict-item]


def mutant_files_upto(
    line: ReleaseLine, series: list[Patch], patch_index: int, hunk: HunkRef
) -> dict[str, bytes | None]:
    """For a hunk a later patch rewrote: its file as ``series[: patch_index + 1]`` makes it, with the hunk reverted.
    Raises :class:`Entangled` when even that reverse does not apply."""
    upto = series[: patch_index + 1]
    return mutant_files(line, upto, patch_index, hunk, patched_files(line, upto))


# --- verdicts (pure) ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    verdict: str  # killed, survived, justified, entangled, could-not-judge
    by: str  # killed: the test and its error; otherwise why


@dataclass(frozen=True)
class Result:
    line: str
    patch: str
    hunk: HunkRef
    outcome: Outcome
    seconds: float


def _first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else ""


def judge(cases: list[dict] | None, detail: str) -> Outcome:
    """Verdict from a proof report (None: pytest wrote none; ``detail`` then says why).

    Any failed case kills the mutant. Otherwise it survived when some case passed and none errored (skipped cases,
    such as a GPU form on a CPU machine, prove nothing either way); anything else cannot be judged."""
    if cases is None:
        return Outcome("could-not-judge", detail or "no proof report")
    failed = [c for c in cases if c.get("outcome") == "failed"]
    if failed:
        error = _first_line(failed[0].get("error", ""))
        return Outcome("killed", f"{failed[0].get('test', '?')}" + (f" ({error})" if error else ""))
    counts = {k: sum(c.get("outcome") == k for c in cases) for k in ("passed", "skipped", "error")}
    tally = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    if counts["passed"] and not counts["error"]:
        return Outcome("survived", tally)
    if counts["error"]:
        bad = next(c for c in cases if c.get("outcome") == "error")
        return Outcome("could-not-judge", f"{tally}: {bad.get('test', '?')} {_first_line(bad.get('error', ''))}")
    return Outcome("could-not-judge", tally or "no test ran")


def survival_notes(patch: Patch) -> dict[int, str]:
    """``Mutant-Survives: #<n> <reason>`` lines of the message: hunk number -> reason."""
    notes = {}
    for text in patch.message.splitlines():
        if text.startswith("Mutant-Survives:"):
            m = _NOTE.match(text.strip())
            if not m:
                raise PatchError(
                    f"{patch.name}: {text.strip()!r} is not 'Mutant-Survives: #<n> <reason>'",
                    "name the hunk as #n (its number in this check's table) and say why no test needs it",
                )
            notes[int(m.group(1))] = m.group(2).strip()
    return notes


def justify(outcome: Outcome, note: str | None) -> Outcome:
    """A survivor with a ``Mutant-Survives`` note is justified; every other outcome stays as it is."""
    return Outcome("justified", note) if outcome.verdict == "survived" and note else outcome


def stale_notes(patch: Patch, notes: dict[int, str], results: list[Result]) -> list[str]:
    """Warnings for notes on hunks that were killed or do not exist."""
    by_index = {r.hunk.index: r for r in results}
    out = []
    for n in sorted(notes):
        r = by_index.get(n)
        if r is None:
            out.append(
                f"{patch.name}: Mutant-Survives names hunk #{n}, which the patch does not have "
                f"(it has {len(results)}): renumber or remove the note"
            )
        elif r.outcome.verdict == "killed":
            out.append(
                f"{patch.name}: hunk #{n} is killed by {r.outcome.by}, yet carries 'Mutant-Survives: "
                f"#{n}': remove the stale note"
            )
    return out


def exit_code(results: list[Result]) -> int:
    return 0 if all(r.outcome.verdict in JUDGED_OK for r in results) else 1


def _cell(text: str, width: int = 100) -> str:
    text = " ".join(text.split())
    text = text if len(text) <= width else text[: width - 1] + "…"
    return text.replace("|", "\\|")


def describe(r: Result) -> str:
    o = r.outcome
    return f"{r.line} {r.patch} hunk #{r.hunk.index} ({r.hunk.path} {r.hunk.header}): " + (
        f"killed by {o.by}" if o.verdict == "killed" else f"{o.verdict} ({o.by})"
    )


def markdown(results: list[Result]) -> str:
    rows = ["| line | patch | hunk | file | verdict | by | seconds |", "|---|---|---|---|---|---|---:|"]
    rows += [
        f"| {r.line} | {r.patch} | #{r.hunk.index} {_cell(r.hunk.header, 60)} | {r.hunk.path} | "
        f"{r.outcome.verdict} | {_cell(r.outcome.by)} | {r.seconds:.1f} |"
        for r in results
    ]
    return "\n".join(rows) + "\n"


def summary(results: list[Result], seconds: float) -> str:
    count = {v: sum(r.outcome.verdict == v for r in results) for v in ("killed", "justified", "survived")}
    other = len(results) - sum(count.values())
    return (
        f"{len(results)} hunks: {count['killed']} killed, {count['justified']} justified, "
        f"{count['survived']} survived, {other} entangled/could-not-judge in {seconds:.0f} s"
    )


# --- the +fixed wheels and site-packages (I/O; environments and proof runs are proofenv's) ---------------------


def dist_wheel(project: Project, line: ReleaseLine) -> Path:
    """The line's +fixed wheel in ``<root>/dist``, checked to carry the line's current patches."""
    hint = "run `nox -s build` first: the check installs the wheels in dist/"
    return current_wheel(line, project.dist, hint)


# --- the command ------------------------------------------------------------------------------------------------


def check_line(project: Project, line: ReleaseLine, series: list[Patch], record, log, only=None) -> list[str]:
    """Judge every hunk of one release line (``only``: one patch's), handing each :class:`Result` to ``record``."""
    own = dist_wheel(project, line)
    others = [dist_wheel(project, project.lines[pkg][-1]) for pkg in project.packages() if pkg != line.package]
    env = proofenv.fixed_env(project.cache, [own] + others)
    site, python = proofenv._site(env), env / "bin" / "python"
    patched = patched_files(line, series)
    if repaired := proofenv.restore_from_wheel(
        site, own, sorted(w for p in patched if (w := line.wheel_path(p)) is not None)
    ):
        log(f"{line.key}: restored {', '.join(repaired)} in {env} (left mutated by an interrupted run)")
    baselines: dict[str, Outcome] = {}

    def prove(proof: str) -> proofenv.ProofRun:
        """Regression guards included: a mutant that breaks one is killed."""
        return proofenv.run_report(python, project.root, proof, timeout=PROOF_TIMEOUT, guards=True)

    def baseline(proof: str) -> Outcome:
        if proof not in baselines:
            ran = prove(proof)
            baselines[proof] = judge(ran.cases, ran.detail)
            log(
                f"{line.key}: baseline {proof}: {baselines[proof].verdict} ({baselines[proof].by}, {ran.seconds:.1f} s)"
            )
        return baselines[proof]

    def outcome(i: int, hunk: HunkRef, proof: str) -> tuple[Outcome, float]:
        if not proof:
            return Outcome("could-not-judge", "the patch names no Proof-Test or Feature-Test"), 0.0
        if (base := baseline(proof)).verdict != "survived":
            return Outcome("could-not-judge", f"baseline fails: {base.verdict}: {base.by}"), 0.0
        note = ""
        try:
            files = mutant_files(line, series, i, hunk, patched)
        except Entangled as exc:
            try:
                files = mutant_files_upto(line, series, i, hunk)
            except Entangled:
                return Outcome("entangled", str(exc)), 0.0
            later = [p.name for p in series[i + 1 :] if hunk.path in p.touched]
            note = f"[{hunk.path} as of {series[i].name}: {', '.join(later)} rewrote these lines] "
        with proofenv.installed_over(site, files):
            ran = prove(proof)
        found = judge(ran.cases, ran.detail)
        return Outcome(found.verdict, note + found.by), ran.seconds

    warnings: list[str] = []
    for i, patch in enumerate(series):
        if only not in (None, patch):
            continue
        notes, proof = survival_notes(patch), patch.test_module
        done = []
        for hunk in hunks(patch):
            found, seconds = outcome(i, hunk, proof)
            done.append(record(Result(line.key, patch.name, hunk, justify(found, notes.get(hunk.index)), seconds)))
        warnings += stale_notes(patch, notes, done)
    return warnings


def run(
    project: Project, lines_selected: list[str], out: Path | None, log=CONSOLE.warn, report=CONSOLE, patch=None
) -> list[Result]:
    """Judge every hunk of every patch of the selected release lines (default: all; ``patch``: only the patch it
    names, in each line); report the table (and to ``out``). :func:`exit_code` says whether the check passed."""
    t0 = time.perf_counter()
    plan = [(line, checked_series(line)) for line in project.select(lines_selected)]
    chosen = {line.key: next((p for p in series if matches(p, patch)), None) for line, series in plan} if patch else {}
    if patch and not (plan := [(line, series) for line, series in plan if chosen[line.key]]):
        raise PatchError(
            f"no patch {patch!r} in the lines selected", "e.g. nox -s mutants -- accelerate==1.15.0 --patch <its slug>"
        )
    total = sum(len(hunks(p)) for line, series in plan for p in series if chosen.get(line.key) in (None, p))
    results: list[Result] = []

    def record(r: Result) -> Result:
        results.append(r)
        log(f"[{len(results)}/{total} {time.perf_counter() - t0:.1f}s] {describe(r)}")
        return r

    warnings = [w for line, ps in plan for w in check_line(project, line, ps, record, log, chosen.get(line.key))]
    text = markdown(results) + "\n" + summary(results, time.perf_counter() - t0) + "\n"
    text += "".join(f"warning: {w}\n" for w in warnings)
    report(text.rstrip("\n"))
    if out is not None:
        out.write_text(text)
    return results
