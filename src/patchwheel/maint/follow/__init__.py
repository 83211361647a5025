"""`patchwheel follow` and `patchwheel derive`: carry a release line onto upstream's newer
releases (:mod:`.run`, :mod:`.derive`), in a scratch copy written back in one step (:mod:`.scratch`), a derive left
waiting at a conflict (:mod:`.waiting`), and what was done, for people (:mod:`.report`)."""
