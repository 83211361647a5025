"""Which releases to run a line's proofs on, so that every cell of its matrix row is judged within a bound.

A release's proof run judges every patch of the line at once (one environment, one run per proof module), so the
plan is a set of releases. It starts from the **probes**, the releases where a verdict can change: the first and
the last release looked at, every release where a patch's Drop-When condition starts to hold, and every release
where its text result changes (upstream touched the patched code there): ``LineMatrix.probes``. Between two run
releases whose verdicts differ for some patch, the release halfway between is run next, until the two sides of
every change are adjacent: a transition is always confirmed by runs on both of its sides (so a probe needs no run
of the release before it: where the verdict changes there, the bisection runs that release). A release left
between two run releases that agree for a patch takes their verdict as **inferred** (the matrix's
``LineMatrix.reinfer`` writes them, the same rule after a merge): it is marked so, never shown as run.

Pure bookkeeping, no I/O: the matrix check feeds it verdicts as runs finish and asks what to run next, so both
workers stay busy while the bisection goes on.
"""

from __future__ import annotations

from collections.abc import Iterable


class Plan:
    """The bisection of one line. ``versions``: its releases, oldest first; ``rows``: the patches judged by a proof
    (features are not); ``probes``: releases that must run whatever the verdicts."""

    def __init__(self, versions: list[str], rows: list[str], probes: Iterable[str]) -> None:
        self.versions, self.rows = list(versions), list(rows)
        wanted = set(probes) | ({self.versions[0], self.versions[-1]} if self.versions else set())
        self.probes = [v for v in self.versions if v in wanted]
        self.verdicts: dict[str, dict[str, str]] = {}  # release -> patch -> verdict, for the releases run

    def record(self, version: str, verdicts: dict[str, str]) -> None:
        self.verdicts[version] = {row: verdicts[row] for row in self.rows}

    def next(self, busy: Iterable[str] = ()) -> list[str]:
        """The releases to run now, most useful first: the probes not yet run, then the midpoints of the open
        intervals (run releases that disagree for some patch, with releases between them). An interval holding a
        release that is running or still to be probed waits for it. Empty when the plan is complete (nothing
        running) or when everything left waits for a running release."""
        busy = set(busy)
        if not self.rows:
            return []
        pending = busy | {v for v in self.probes if v not in self.verdicts}
        out = [v for v in self.probes if v not in self.verdicts and v not in busy]
        run = [i for i, v in enumerate(self.versions) if v in self.verdicts]
        for a, b in zip(run, run[1:], strict=False):
            if b - a < 2 or any(self.versions[i] in pending for i in range(a + 1, b)):
                continue
            left, right = self.verdicts[self.versions[a]], self.verdicts[self.versions[b]]
            if any(left[row] != right[row] for row in self.rows):
                mid = self.versions[(a + b) // 2]
                if mid not in out:
                    out.append(mid)
        return out
