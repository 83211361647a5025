"""A draft series: a new patch whose message `nox -s new` wrote as a template, and the stubs it wrote beside it.

The documented order of adding a fix (docs/adding-a-fix.md) is: write the proof, watch it fail on the pristine
release, fix, watch it pass on the +fixed build, then write the guards and the message. Proofs run on dist/, so
the build must take a series whose newest patch still has the template's ``TODO`` lines: it builds such a *draft*
for the proofs and says so in one line, under build number 0 and a tag that names it (``+fixed-0_draft_<digest>-``),
never a recorded number: no number is spent on inputs the maintainer is about to change by writing the message.

Which patches of a line are drafts: :func:`patchwheel.wheels.buildno.drafts`. A draft can never land or ship:
``nox -s lint`` (CI) refuses the template's lines and the stub files (the proof, guard and ``upstream-pr/``
stubs, each with :data:`STUB_MARK` on a line); ``bump``, refresh, new and rebase record no build number for it;
dist/'s index and its constraints and pins files leave its wheel out; and build 0 sorts below every recorded
build, so ``==X+fixed`` never installs it where a real build is.
"""

from __future__ import annotations

from pathlib import Path

#: On a line of every stub file `nox -s new` writes (a proof, a guard, upstream's test, expect.toml, proposal.md):
#: lint refuses a file that still has it.
STUB_MARK = "TODO(nox -s new)"
#: What a draft's wheel is named by instead of a recorded build: ``0_draft_<the start of the inputs digest>``.
DRAFT_TAG = "0_draft_"


def todo_lines(subject: str, message: str) -> list[str]:
    """The template's ``TODO`` lines still in a patch's message (``subject`` included)."""
    return [ln for ln in [subject, *message.splitlines()] if ln.lstrip().startswith("TODO")]


def is_draft_wheel(filename: str) -> bool:
    """Whether a wheel's file name is a draft build's (its build tag starts with :data:`DRAFT_TAG`)."""
    parts = filename.split("-")
    return len(parts) == 6 and parts[2].startswith(DRAFT_TAG)


def stub_files(root: Path, files: list[str]) -> list[str]:
    """The files (paths under ``root``) that are still a stub `nox -s new` wrote: one of their lines has
    :data:`STUB_MARK`."""
    out = []
    for rel in files:
        path = root / rel
        try:
            if path.is_file() and STUB_MARK in path.read_text(errors="replace"):
                out.append(rel)
        except OSError:
            continue
    return out
