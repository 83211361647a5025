"""Maintenance: the tools that keep the patch series right, next to the build pipeline one level up.

- :mod:`.workrepo`: the work repository every tool here starts from (a release's files as the base commit, the
  series as commits, a branch with another release's files);
- :mod:`.textcheck` and :mod:`.upstream`: which patches still apply to newer releases, and which upstream fixed
  (by behaviour, :mod:`.proofenv`);
- :mod:`.rebase`: a new release line; :mod:`.refresh`: a patch regenerated from its edited vendored module, and
  a new patch from edits;
- :mod:`.export`: a patch as an upstream pull request; :mod:`.mutants` and :mod:`.upstream_suite`: is every hunk
  needed, and do upstream's own tests still pass.
"""
