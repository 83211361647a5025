"""`patchwheel matrix` and the watch: every patch against newer upstream releases, by text
(:mod:`.textcheck`) and by behaviour, on the releases a run looks at (:mod:`.selection`, :mod:`.bisection`), recorded
in the matrix (:mod:`.matrixrun`), spread over CI workers (:mod:`.watch`)."""
