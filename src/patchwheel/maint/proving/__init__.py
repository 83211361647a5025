"""Proving: proof tests in cached environments of pristine releases (:mod:`.proofenv`, torch from
:mod:`.torchsource`), a consumer set proven both ways (:mod:`.setruns`), every hunk needed (:mod:`.mutants`),
upstream's own suite unchanged by the fixes (:mod:`.suite`)."""
