"""Which releases a run looks at: a union of specifiers per package, under the package's canonical name."""

from __future__ import annotations

from patchwheel.maint.upstream.selection import Selection


def test_selection_is_a_union_per_package():
    sel = Selection.parse(["demo==1.1.0", "demo>=2", "other==1"])
    assert [v for v in ("1.0.0", "1.1.0", "1.5", "2.0", "3.1") if sel.wants("demo", v)] == ["1.1.0", "2.0", "3.1"]
    assert not sel.wants("third", "1.0") and Selection.parse([]).wants("third", "1.0")


def test_selection_names_are_canonical():
    sel = Selection.parse(["Demo_Pkg==1.1.0"])
    assert sel.wants("demo-pkg", "1.1.0") and not sel.wants("demo-pkg", "1.2.0")


# --- 4. one place spawns and kills proof runs ---------------------------------------------------------------------
