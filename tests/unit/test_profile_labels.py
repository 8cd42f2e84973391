"""``labels:``: words that select a profile (``orch sync --on LABEL``): a list, inherited like
any field, each refused with its file and key path when it is not a word; they change nothing
on the host (not in the launch digest, no action in ``orch diff``)."""

from __future__ import annotations

import pytest

from orchestrator import render
from orchestrator.errors import InvalidProfile
from tests.conftest import ProfileDir

HEAD = 'sglang: "0.5.11"\nhost: gpu-1\nmodel: {path: /models/m}\n'


def test_labels_are_read_inherited_and_deduplicated(profile_dir: ProfileDir) -> None:
    profile_dir.write("base", "abstract: true\nlabels: [team-a, eu.west_1]\n")
    profile_dir.write("p", "extends: base\n" + HEAD)
    profile_dir.write("q", "extends: base\n" + HEAD + "labels: [canary, canary]\n")
    store = profile_dir.store()
    assert store.load("p").profile.labels == ("team-a", "eu.west_1")
    assert store.load("q").profile.labels == ("canary",)


@pytest.mark.parametrize(
    ("body", "where", "what"),
    [
        ("labels: team-a\n", "labels:", "expected a list of words"),
        ("labels: [ok, 'two words']\n", "labels[1]", "got 'two words'"),
        ("labels: [-x]\n", "labels[0]", "got '-x'"),
        ("labels: [3]\n", "labels[0]", "got 3"),
    ],
)
def test_a_label_that_is_not_a_word_is_refused_with_its_key_path(
    profile_dir: ProfileDir, body: str, where: str, what: str
) -> None:
    profile_dir.write("p", HEAD + body)
    with pytest.raises(InvalidProfile) as caught:
        profile_dir.store().load("p")
    (error,) = caught.value.errors
    assert error.message.startswith("profiles/p.yaml:4:")
    assert where in error.message
    assert what in error.message
    assert error.hint is not None


def test_labels_change_nothing_on_the_host(profile_dir: ProfileDir) -> None:
    profile_dir.write("p", HEAD)
    before = profile_dir.store().load("p")
    profile_dir.write("p", HEAD + "labels: [team-b]\n")
    after = profile_dir.store().load("p")
    assert render.launch_digest(render.render(before.profile, before.table)) == (
        render.launch_digest(render.render(after.profile, after.table))
    )
