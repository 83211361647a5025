"""What a door (`rebase`, `derive`, `follow`) did: the verdicts of the one policy, a stop, and the record both
`follow` and `derive` keep, its fields written once (:class:`Carried`)."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field

from ..proving.setruns import Run


@dataclass
class Verdict:
    """One patch of the source line judged on another release, and what the one policy does with it."""

    patch: str
    text: str
    behaviour: str  # passes / fails / error / n/a
    detail: str
    decision: str = ""


@dataclass
class Stop:
    """Stopped, a maintainer takes it from here: why, and the commands they run."""

    why: str
    commands: list[str]

    def named_in(self, scratch: str, root: str) -> None:
        """What it says names the project's files (``root``), never the scratch copy's (``scratch``)."""
        if scratch:
            self.why = self.why.replace(scratch, root)
            self.commands = [c.replace(scratch, root) for c in self.commands]


@dataclass
class Carried:
    """What a door that writes a line into the project did (``follow``: :class:`follow.Followed`, ``derive``:
    :class:`derive.Derived`), or why it stopped (then nothing of the project was written but a work folder)."""

    package: str
    _: KW_ONLY
    carried: list[str] = field(default_factory=list)  # the carry engine's lines
    retired: list[str] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    stop: Stop | None = None
    seconds: float = 0.0
