"""`patchwheel export`: one patch as what a contributor sends upstream (:mod:`.exportfolder`): the commit
(:mod:`.commit`), the upstream-pr/ folder it is made from (:mod:`.submission`), upstream's style (:mod:`.style`) and
upstream's own test of the fix (:mod:`.upstream_test`, with its pytest plugin :mod:`.upstream_outcomes`)."""
