"""The build: pinned upstream wheels + patch series -> verified +fixed wheels in dist/ (`patchwheel build`).

:mod:`.build` is the list of named steps; :mod:`.fetch` downloads sha256-verified upstream artifacts; :mod:`.apply` and
:mod:`.undo` apply a series and prove every patch present; :mod:`.rewrite`, :mod:`.zipwrite` and :mod:`.verify` make
and check the wheel; :mod:`.vendored` keeps overlay/ equal to what the build applies; :mod:`.buildno`,
:mod:`.records`, :mod:`.staging`, :mod:`.distdir` and :mod:`.index` are dist/ and what was built into it."""
