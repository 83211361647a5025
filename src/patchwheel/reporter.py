"""All the tool's output goes through one object, as pypa/vendoring's ``UI`` does: lines for the user (standard
output), warnings and progress (standard error), so that a library function never prints and a caller chooses
where its words go.

A :class:`Reporter` is also a plain callable (``report("text")`` is ``report.line("text")``): it serves wherever a
function takes ``log``. :data:`CONSOLE` writes to the terminal; :func:`silent` discards; :func:`collecting` keeps
the lines (a caller that reports them later, in its own words, and the tests).

Progress: releases (or hunks) done / total, elapsed and ETA, one plain line per finished step, which reads the same
in a CI log, and a live bar on a terminal when rich is installed (the maintenance extra; nox's own interpreter, where
``build``, ``lint`` and ``status`` run, has no rich). ``grow`` raises the total as a bisection plans more runs.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO


class Reporter:
    def __init__(self, out: TextIO | None = None, err: TextIO | None = None, *, quiet: bool = False) -> None:
        self._out, self._err, self.quiet = out, err, quiet

    @property
    def out(self) -> TextIO:
        return self._out or sys.stdout  # looked up when used: pytest's capsys replaces sys.stdout

    @property
    def err(self) -> TextIO:
        return self._err or sys.stderr

    def line(self, text: str) -> None:
        if not self.quiet:
            print(text, file=self.out, flush=True)

    __call__ = line

    def warn(self, text: str) -> None:
        if not self.quiet:
            print(text, file=self.err, flush=True)

    def meter(self, text: str, *, done: bool = False) -> None:
        """A figure that changes in place (bytes downloaded), on standard error; ``done`` ends its line."""
        if not self.quiet:
            print(f"\r{text}", end="\n" if done else "", file=self.err, flush=True)

    def progress(self, label: str, total: int) -> Progress:
        return Progress(label, total, None if self.quiet else self.err)


class Collecting(Reporter):
    """Keeps every line and warning in ``lines``, in order, and shows none."""

    def __init__(self) -> None:
        super().__init__(quiet=True)
        self.lines: list[str] = []

    def line(self, text: str) -> None:
        self.lines.append(text)

    __call__ = line

    def warn(self, text: str) -> None:
        self.lines.append(text)


CONSOLE = Reporter()


def silent() -> Reporter:
    return Reporter(quiet=True)


def collecting() -> Collecting:
    return Collecting()


class Progress:
    """Steps done of a total, each printed as one line (``out`` None: nothing shown)."""

    def __init__(self, label: str, total: int, out: TextIO | None) -> None:
        self.out, self.total, self.done, self.t0 = out, total, 0, time.perf_counter()
        self._lock = threading.Lock()
        self.bar: Any = None
        if out is None:
            return
        try:
            from rich import progress as rp
            from rich.console import Console
        except ImportError:
            return
        self.console = Console(file=out, highlight=False, soft_wrap=True)
        columns = (rp.TextColumn("{task.description}"), rp.BarColumn(), rp.MofNCompleteColumn())
        timing = (rp.TimeElapsedColumn(), rp.TextColumn("ETA"), rp.TimeRemainingColumn())
        self.bar = rp.Progress(
            *columns, *timing, console=self.console, transient=True, disable=not self.console.is_terminal
        )
        self.task = self.bar.add_task(label, total=total)

    def __enter__(self) -> Progress:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()

    def grow(self, n: int) -> None:
        with self._lock:
            self.total += n
            if self.bar is not None:
                self.bar.update(self.task, total=self.total)

    def step(self, what: str) -> None:
        with self._lock:
            self.done += 1
            elapsed = time.perf_counter() - self.t0
            eta = elapsed / self.done * max(0, self.total - self.done)
            line = f"[{self.done}/{self.total} {elapsed:6.1f}s, ETA {eta:5.0f}s] {what}"
            if self.out is None:
                return
            if self.bar is None:
                print(line, file=self.out, flush=True)
                return
            self.bar.update(self.task, completed=self.done)
            self.console.print(line, markup=False, highlight=False)
