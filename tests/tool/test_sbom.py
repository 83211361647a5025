"""The SBOM's mapping of the patch trailers to CycloneDX (pure functions; the SBOM of each real wheel is checked
against the schema and CycloneDX's model in test_real_build.py, the installed one against `status` in
test_status.py)."""

from __future__ import annotations

import pytest

from patchwheel.wheels import sbom


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        ("Pending", "unofficial"),
        ("Submitted https://github.com/huggingface/transformers/pull/1", "unofficial"),
        ("Partial-Fix-In 4.57.1 tests/proof/test_t3.py::test_x", "unofficial"),
        ("Backport https://github.com/huggingface/accelerate/pull/3908", "backport"),
        ("Fixed-In 4.51.1", "backport"),
        ("Fix-Proposed-In https://github.com/huggingface/accelerate/pull/4250", "cherry-pick"),
        (None, "unofficial"),
    ],
)
def test_a_patch_is_classed_by_its_upstream_status(status, kind):
    assert sbom.patch_type(status) == kind


def test_resolves_names_each_issue_with_the_pull_request_among_its_references():
    entry = {
        "subject": "Fix it",
        "upstream_status": "Fix-Proposed-In https://github.com/huggingface/accelerate/pull/4250",
        "upstream_issue": "https://github.com/huggingface/accelerate/issues/4249, huggingface/trl#2338, a mailing list",
    }
    assert sbom.resolves(entry) == [
        {
            "type": "defect",
            "id": "huggingface/accelerate#4249",
            "description": "Fix it",
            "source": {"name": "GitHub", "url": "https://github.com/huggingface/accelerate"},
            "references": [
                "https://github.com/huggingface/accelerate/issues/4249",
                "https://github.com/huggingface/accelerate/pull/4250",
            ],
        },
        {
            "type": "defect",
            "id": "huggingface/trl#2338",
            "description": "Fix it",
            "source": {"name": "GitHub", "url": "https://github.com/huggingface/trl"},
            "references": [
                "https://github.com/huggingface/trl/issues/2338",
                "https://github.com/huggingface/accelerate/pull/4250",
            ],
        },
        {"type": "defect", "id": "a mailing list", "description": "Fix it"},
    ]
    assert sbom.resolves({**entry, "feature_test": "tests/proof/x.py"})[0]["type"] == "enhancement"
    short = {"subject": "x", "upstream_status": "Backport huggingface/accelerate#3908", "upstream_issue": "o/r#1"}
    assert sbom.resolves(short)[0]["references"] == [
        "https://github.com/o/r/issues/1",
        "https://github.com/huggingface/accelerate/issues/3908",  # a link, whichever form the trailer used
    ]
    alone = {"subject": "x", "upstream_status": "Backport https://github.com/o/r/pull/7", "upstream_issue": None}
    assert sbom.resolves(alone) == [
        {
            "type": "defect",
            "id": "o/r#7",
            "description": "x",
            "source": {"name": "GitHub", "url": "https://github.com/o/r"},
            "references": ["https://github.com/o/r/pull/7"],
        }
    ]


def test_purls_and_the_pypi_file_url_follow_from_the_names():
    assert sbom.purl("Foo_Bar", "1.0.0+fixed") == "pkg:pypi/foo-bar@1.0.0%2Bfixed"
    assert sbom.purl("zope.interface", "7.0") == "pkg:pypi/zope.interface@7.0", "purl-spec maps '_' only"
    assert (
        sbom.purl("transformers", "4.57.6", file_name="transformers-4.57.6-py3-none-any.whl")
        == "pkg:pypi/transformers@4.57.6?file_name=transformers-4.57.6-py3-none-any.whl"
    )
    assert (
        sbom.pypi_file_url("transformers-4.57.6-py3-none-any.whl")
        == "https://files.pythonhosted.org/packages/py3/t/transformers/transformers-4.57.6-py3-none-any.whl"
    )
