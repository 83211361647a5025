"""Stand-alone probes, standard library only: each runs by its file path inside another interpreter
(`patchwheel status --python`, `patchwheel diagnose --python`), so none imports the rest of patchwheel."""
