"""The carry engine behind every door that carries a release line onto another upstream release (`rebase`,
`derive`, `follow`): the one policy (:mod:`.policy`), the carry by text in a work repository (:mod:`.engine`) and
its work folder with ``--continue``/``--abort`` (:mod:`.workfolder`), the scratch copy written back in one step
(:mod:`.scratch`), the steps after a line is written (:mod:`.steps`), and what a door did (:mod:`.outcome`)."""
