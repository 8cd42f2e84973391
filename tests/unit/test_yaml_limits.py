"""YAML that expands without end is refused before it is expanded, at the alias that would."""

from __future__ import annotations

import itertools
import time

import pytest

from orchestrator.errors import ExitCode, ProfileError
from orchestrator.profile.yamldoc import MAX_DEPTH, MAX_TEXT, MAX_VALUES, parse_yaml


def _bomb(levels: int = 9) -> str:
    """The "billion laughs": each level is nine aliases of the one before (9**9 values)."""
    names = "abcdefghijklmnop"[:levels]
    lines = [f"{names[0]}: &{names[0]} [x, x, x, x, x, x, x, x, x]"]
    for before, name in itertools.pairwise(names):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{before}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def _merge_bomb() -> str:
    """The same through merge keys: each level merges the one before nine times."""
    lines = ["a: &a {k0: x, k1: x, k2: x, k3: x, k4: x, k5: x, k6: x, k7: x, k8: x}"]
    for before, name in itertools.pairwise("abcdefghi"):
        items = ", ".join(f"{{<<: *{before}, z{i}: x}}" for i in range(9))
        lines.append(f"{name}: &{name} [{items}]")
    return "\n".join(lines) + "\n"


def _refusal(text: str) -> tuple[ProfileError, float]:
    started = time.perf_counter()
    with pytest.raises(ProfileError) as caught:
        parse_yaml(text, "profiles/p.yaml")
    return caught.value, (time.perf_counter() - started) * 1000


def test_yaml_alias_bomb_is_refused_at_the_alias_before_expanding() -> None:
    text = _bomb()
    assert len(text) < 500
    error, ms = _refusal(text)
    print(f"alias bomb ({len(text)} bytes) refused in {ms:.2f} ms")  # noqa: T201 - the measured time, for the report
    assert error.exit_code == ExitCode.CONFIG
    assert error.message.startswith("profiles/p.yaml:6:")  # the first alias past the bound
    assert f"expands to more than {MAX_VALUES} values" in error.message
    assert error.key_path == "f[0]"
    assert error.hint is not None
    assert "aliases" in error.hint
    assert ms < 2000  # measured well under 100 ms; loose, timing asserts are flaky


def test_yaml_merge_key_bomb_is_refused_too() -> None:
    error, ms = _refusal(_merge_bomb())
    print(f"merge-key bomb refused in {ms:.2f} ms")  # noqa: T201 - the measured time, for the report
    assert f"expands to more than {MAX_VALUES} values" in error.message
    assert error.key_path is not None
    assert error.key_path.endswith(".<<")
    assert ms < 2000


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("a: &a [*a]\n", "profiles/p.yaml:1:8: a[0]: "),
        ("a: &a {b: *a}\n", "profiles/p.yaml:1:11: a.b: "),
        ("a: &a {<<: *a}\n", "profiles/p.yaml:1:12: a.<<: "),
        ("x: 1\nargs: &s\n  deep: [1, *s]\n", "profiles/p.yaml:3:13: args.deep[1]: "),
    ],
)
def test_yaml_recursive_alias_is_a_located_error_not_a_recursion_error(
    text: str, where: str
) -> None:
    error, ms = _refusal(text)
    print(f"recursive alias {text!r} refused in {ms:.2f} ms")  # noqa: T201 - the measured time, for the report
    assert error.message.startswith(where)
    assert "it would never end" in error.message
    assert error.hint == "an alias can only repeat a value that is complete before it"


def test_yaml_nesting_is_bounded_with_and_without_aliases() -> None:
    deep = "x: " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "\n"
    error, _ = _refusal(deep)
    assert f"nested more than {MAX_DEPTH} levels deep" in error.message
    layered = "a: &a [[[[[[[[[[1]]]]]]]]]]\n"
    for before, name in itertools.pairwise("abcdefgh"):
        layered += f"{name}: &{name} [[[[[[[[[[*{before}]]]]]]]]]]\n"
    error, _ = _refusal(layered)
    assert f"nested more than {MAX_DEPTH} levels deep" in error.message


def test_yaml_ordinary_aliases_and_merge_overrides_still_load() -> None:
    doc = parse_yaml(
        "base: &base {port: 1, bind: 0.0.0.0}\n"
        "devices: &d [0, 1]\n"
        "child:\n  <<: *base\n  port: 2\n  gpus: *d\n",
        "profiles/p.yaml",
    )
    assert doc.value["child"] == {"port": 2, "bind": "0.0.0.0", "gpus": [0, 1]}
    with pytest.raises(ProfileError, match=r"p.yaml:3:3: c.port: duplicate key 'port'"):
        parse_yaml("c:\n  port: 1\n  port: 2\n", "profiles/p.yaml")


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (".inf", ".inf"),
        ("-.inf", "-.inf"),
        (".nan", ".nan"),
        (".NaN", ".NaN"),
        ("1.0e+999", "1.0e+999"),
    ],
)
def test_yaml_non_finite_numbers_are_refused_wherever_written(value: str, shown: str) -> None:
    error, _ = _refusal(f"env:\n  X: 1\nargs:\n  mem_fraction_static: {value}\n")
    assert error.message == (
        f"profiles/p.yaml:4:24: args.mem_fraction_static: expected a finite number, got {shown}"
    )
    assert error.hint is not None
    assert "NaN and infinities" in error.hint


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("a: " + "9" * 5000 + "\n", "unreadable value 999"),
        ("a: 2024-13-45\n", "unreadable value 2024-13-45: month must be in 1..12"),
        ("a: {<<: 3}\n", "cannot merge"),
    ],
)
def test_yaml_unconstructible_scalars_are_located_errors(text: str, what: str) -> None:
    error, _ = _refusal(text)
    assert error.message.startswith("profiles/p.yaml:1:4: a: ")
    assert what in error.message


def test_yaml_anchor_errors_say_both_places() -> None:
    error, _ = _refusal("a: &x 1\nb: &x 2\n")
    assert error.message == (
        "profiles/p.yaml:2:4: YAML syntax error: found duplicate anchor; first occurrence "
        "(line 1), second occurrence"
    )
    error, _ = _refusal("a: *nope\n")
    assert error.message == "profiles/p.yaml:1:4: YAML syntax error: found undefined alias"


def test_a_long_text_repeated_by_aliases_is_refused_at_the_alias_past_the_bound() -> None:
    """One 1 MiB anchored string repeated by 90,000 aliases: a 1.8 MB file that expands to
    90 GiB of text (each copy scanned by validation: 31.6 s in `validate` before)."""
    big = "x" * (1 << 20)
    lines = ["sglang: '0.5.23'", f"description: &big {big}", "notes:", *["  - *big"] * 90_000]
    error, ms = _refusal("\n".join(lines) + "\n")
    print(f"1 MiB x 90k aliases refused in {ms:.0f} ms")  # noqa: T201 - the measured time, for the report
    assert error.exit_code == ExitCode.CONFIG
    assert f"expands to more than {MAX_TEXT >> 20} MiB of text" in error.message
    assert "alias *big repeats 1048576 characters" in error.message
    # the anchored MiB, then three aliases of it: 4 MiB, past the bound with the keys' text
    crossing = MAX_TEXT // len(big) - 2
    assert error.key_path == f"notes[{crossing}]"
    assert error.line == 4 + crossing  # the first alias is on line 4
    assert error.hint is not None
    assert "aliases" in error.hint
    assert ms < 2000


def test_text_under_the_bound_through_aliases_is_kept() -> None:
    text = "y" * 1000
    document = parse_yaml(f"a: &t {text}\nb: [*t, *t, *t]\n", "p.yaml")
    assert document.value == {"a": text, "b": [text, text, text]}
