"""The generated SGLang argument tables and the facts orch keeps beside them."""

from __future__ import annotations

import pytest

from orchestrator import argtable
from orchestrator.argtable import BadValue, parse_version
from orchestrator.errors import ArgTableError


def test_tables_ship_for_the_incident_version_and_a_current_one() -> None:
    versions = argtable.available_versions()
    assert {"0.5.11", "0.5.23"} <= set(versions)
    assert list(versions) == sorted(versions, key=lambda v: parse_version(v) or ())


@pytest.mark.parametrize("version", argtable.available_versions())
def test_table_loads_with_options_and_fields(version: str) -> None:
    table = argtable.load_table(version)
    assert table.version == version
    assert len(table.options) > 150  # 0.4.10.post2: 185; 0.5.23: 531
    assert "model_path" in table.fields
    assert "port" in table.fields
    assert table.by_dest["port"].type == "int"


@pytest.mark.parametrize("rename", argtable.RENAMES, ids=lambda r: r.old)
def test_renames_agree_with_the_generated_tables(rename: argtable.Rename) -> None:
    """Every shipped table on either side of a rename shows it: the old name is a real
    option before, a deprecated alias of the new field while the alias lives, gone after."""
    for version in argtable.available_versions():
        table = argtable.load_table(version)
        parsed = table.parsed_version
        old_flag = argtable.natural_flag(rename.old)
        if parsed < rename.renamed_in:  # the old field may be younger than the oldest table
            assert argtable.natural_flag(rename.new) not in table.by_flag, version
            if version == _release_before(rename.renamed_in):
                assert rename.old in table.by_dest, version
        elif rename.removed_in is None or parsed < rename.removed_in:
            alias = table.by_flag[old_flag]
            assert alias.deprecated, version
            assert alias.dest == rename.new, version
        else:
            assert old_flag not in table.by_flag, version
            assert rename.new in table.by_dest, version


def _release_before(version: tuple[int, ...]) -> str:
    return [v for v in argtable.available_versions() if (parse_version(v) or ()) < version][-1]


def test_spell_follows_renames_both_ways() -> None:
    old, new = argtable.load_table("0.5.11"), argtable.load_table("0.5.23")
    assert argtable.spell(new, "mamba_scheduler_strategy").flag == "--mamba-radix-cache-strategy"  # type: ignore[union-attr]
    assert argtable.spell(old, "mamba_radix_cache_strategy").flag == "--mamba-scheduler-strategy"  # type: ignore[union-attr]
    assert argtable.spell(old, "mamba_scheduler_strategy").rename is None  # type: ignore[union-attr]


def test_spell_finds_fields_whose_argparse_dest_differs() -> None:
    """0.5.11: field tp_size, argparse dest tensor_parallel_size, flags --tp-size and
    --tensor-parallel-size. The profile's spelling is kept."""
    old = argtable.load_table("0.5.11")
    spelling = argtable.spell(old, "tp_size")
    assert spelling is not None
    assert spelling.dest == "tensor_parallel_size"
    assert spelling.flag == "--tp-size"
    assert argtable.spell(old, "no_such_field") is None


def _option(version: str, name: str) -> argtable.ArgOption:
    option = argtable.load_table(version).option_for_name(name)
    assert option is not None
    return option


@pytest.mark.parametrize(
    ("name", "value", "tokens"),
    [
        ("trust_remote_code", True, ("--trust-remote-code",)),
        ("trust_remote_code", False, ()),
        ("port", 30000, ("--port", "30000")),
        ("port", "30000", ("--port", "30000")),
        ("mem_fraction_static", 0.92, ("--mem-fraction-static", "0.92")),
        ("mem_fraction_static", 1, ("--mem-fraction-static", "1")),
        ("context_length", "128k", ("--context-length", "128k")),
        ("cuda_graph_bs", (1, 2), ("--cuda-graph-bs", "1", "2")),
        ("cuda_graph_bs", 8, ("--cuda-graph-bs", "8")),
        ("tokenizer_path", "-x", ("--tokenizer-path=-x",)),
        ("tokenizer_path", "a b", ("--tokenizer-path", "a b")),
        (
            "mamba_scheduler_strategy",
            "extra_buffer",
            ("--mamba-scheduler-strategy", "extra_buffer"),
        ),
    ],
)
def test_arg_tokens_grammar(name: str, value: object, tokens: tuple[str, ...]) -> None:
    assert argtable.arg_tokens(_option("0.5.11", name), value) == tokens


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("port", True, "expected an integer, got true"),
        ("port", 1.5, "expected an integer, got 1.5"),
        ("trust_remote_code", "yes", "expected true or false"),
        ("cuda_graph_bs", [], "expected at least one value"),
        ("lora_paths", ["-3x"], "starts with '-'"),
        ("context_length", "1.5Ki", "expected an integer, optionally with a suffix"),
        ("mamba_scheduler_strategy", "lazy", "expected one of auto, no_buffer, extra_buffer"),
    ],
)
def test_arg_tokens_rejects(name: str, value: object, expected: str) -> None:
    with pytest.raises(BadValue) as caught:
        argtable.arg_tokens(_option("0.5.11", name), value)
    assert expected in caught.value.expected


def test_a_release_without_a_table_is_not_exact_and_cannot_be_loaded() -> None:
    choice = argtable.table_for("0.5.99")
    assert not choice.exact  # callers refuse it (validate, preflight) or say it (import)
    assert argtable.table_for("0.5.23").exact
    with pytest.raises(ArgTableError) as caught:
        argtable.load_table("0.5.99")
    assert 'make argtables VERSIONS="0.5.99"' in (caught.value.hint or "")
