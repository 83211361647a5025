"""`patchwheel follow` and `patchwheel derive`, two doors of the carry engine (:mod:`..carry`): carry a release
line onto upstream's newer releases (:mod:`.follow`), or make a line for any release users run (:mod:`.derive`),
and what was done, for people (:mod:`.report`)."""
