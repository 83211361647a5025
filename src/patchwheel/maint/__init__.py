"""Maintenance: the tools that keep the patch series right, above the build (which they call) and below the
command line. A package per verb, each module named for its job (no two share a file name); what several verbs
share stands beside them:

- :mod:`.workrepo`: the work repository every tool here starts from (a release's files as the base commit, the
  series as commits, a branch with another release's files);
- ``upstream/``: which patches still apply to newer releases (by text) and which upstream fixed (by behaviour),
  recorded in the matrix; the watch spreads that over CI workers (`patchwheel matrix`, `patchwheel watch`);
- ``follow/``: a line carried onto upstream's newer releases, in a scratch copy written back in one step
  (`patchwheel follow`, `patchwheel derive`);
- :mod:`.lintall`: the one lint, everything `patchwheel lint` checks (follow and derive ask it of what they write);
- :mod:`.rebase`: a new release line; :mod:`.refresh`: a patch regenerated from its edited vendored module, and a
  new patch from edits, with the stubs of every file the later steps need (:mod:`.stubs`) (`patchwheel rebase`,
  `refresh`, `new`);
- ``export/``: a patch as an upstream pull request, with upstream's style and upstream's own test
  (`patchwheel export`);
- ``proving/``: proofs in cached environments of pristine releases, a consumer set proven both ways (`patchwheel
  prove`, which the nox prove sessions run, a chain each), every hunk
  needed (`patchwheel mutants`), upstream's own suite unchanged (`patchwheel upstream-suite`).
"""
