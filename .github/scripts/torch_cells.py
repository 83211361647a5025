"""The sets workflow's job matrix: every (set, torch) that ``[torch]`` of overlay/sets.toml says a set is proven on
(its floor, the suite's torch, the newest), printed as one ``cells=<json>`` line for ``$GITHUB_OUTPUT``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from patchwheel import config


def cells(root: Path) -> list[dict[str, str]]:
    project = config.load(root)
    if project.torch is None:
        raise SystemExit(f"{project.sets_file} has no [torch]: it must say which torch each set is proven on")
    return project.torch.cells(sorted(project.sets))


if __name__ == "__main__":
    print("cells=" + json.dumps(cells(Path(sys.argv[1] if len(sys.argv) > 1 else "."))))
