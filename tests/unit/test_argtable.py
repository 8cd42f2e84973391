"""The generated SGLang argument tables and the facts orch keeps beside them."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import ArgTableError
from orchestrator.sglang import argtable, argtable_changes, argtable_pack
from orchestrator.sglang.argtable import ArgOption, ArgTable, BadValue, parse_version
from tests.conftest import REPO


def test_tables_ship_for_the_incident_version_and_a_current_one() -> None:
    versions = argtable.available_versions()
    assert {"0.5.11", "0.5.23"} <= set(versions)
    assert list(versions) == sorted(versions, key=lambda v: parse_version(v) or ())


@pytest.mark.parametrize("version", argtable.available_versions())
def test_table_loads_with_options_and_fields(version: str) -> None:
    table = argtable.load_table(version)
    assert table.version == version
    assert len(table.options) > 100  # 0.4.5: 117; 0.5.23: 531
    assert "model_path" in table.fields
    assert "port" in table.fields
    assert table.by_dest["port"].type == "int"


@pytest.mark.parametrize("rename", argtable.RENAMES, ids=lambda r: r.old)
def test_renames_agree_with_the_generated_tables(rename: argtable.Rename) -> None:
    """Every shipped table on either side of a rename shows it: the old name is a real
    option before, a spelling of the new field while the alias lives (SGLang marks most of
    them deprecated, not all), gone after (the new field may go with it: 0.5.20 removed the DSA
    context-parallel mode it had renamed in 0.5.13)."""
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
            assert alias.dest == rename.new, version
        else:
            assert old_flag not in table.by_flag, version


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


# -- the pack and the release check ---------------------------------------------------------


def test_the_shipped_pack_is_exactly_what_the_builder_writes() -> None:
    """No hand edits: the files are what argtable_pack writes for the releases they hold, and
    every release reads back whole."""
    directory = Path(argtable_pack.__file__).parent / "argtables"
    documents = argtable_pack.read_documents(directory)
    assert set(documents) == set(argtable.available_versions())
    for name, text in argtable_pack.pack_files(documents).items():
        assert (directory / name).read_text(encoding="utf-8") == text, name


def test_loading_one_release_parses_only_its_own_records() -> None:
    pack = argtable_pack.Pack(Path(argtable_pack.__file__).parent / "argtables")
    document = pack.document("0.5.11")
    assert 0 < len(pack._parsed_options) <= len(document["options"])
    assert len(pack._options) > 2 * len(document["options"])  # the other releases' stay text


def test_runs_keep_order_and_round_trip() -> None:
    for indices in ([], [0], [0, 1, 2, 7, 9, 10], [5, 3, 4, 1], [2, 2]):
        assert argtable_pack._indices(argtable_pack._runs(indices)) == indices
    assert argtable_pack._runs([0, 1, 2, 7, 9, 10]) == "0-2,7,9-10"


def _table(version: str, *options: ArgOption, fields: dict[str, object] | None = None) -> ArgTable:
    return ArgTable(
        version, options, fields if fields is not None else {o.dest: o.default for o in options}
    )


def _store(dest: str, help: str, *flags: str, type: str = "int", default: object = 1) -> ArgOption:
    return ArgOption(
        dest,
        flags or (argtable.natural_flag(dest),),
        "store",
        type,
        None,
        None,
        None,
        default,
        False,
        help,
    )


def test_a_rename_is_seen_by_help_text_and_type_or_by_a_flag_that_moved() -> None:
    old = _table(
        "0.9.0",
        _store("max_micro_batch_size", "The maximum micro batch size."),
        _store("keep", "Stays."),
    )
    new = _table(
        "0.9.1",
        _store("pp_max_micro_batch_size", "The maximum micro batch size."),
        _store("keep", "Stays."),
    )
    [seen] = argtable_changes.seen_renames(old, new)
    assert (seen.old, seen.new, seen.version) == (
        "max_micro_batch_size",
        "pp_max_micro_batch_size",
        "0.9.1",
    )
    other_type = _table(
        "0.9.1",
        _store("pp_max_micro_batch_size", "The maximum micro batch size.", type="str"),
        _store("keep", "Stays."),
    )
    assert argtable_changes.seen_renames(old, other_type) == []  # a removal and an addition
    alias = _store("mamba_radix_cache_strategy", "Deprecated alias.", "--mamba-scheduler-strategy")
    moved = _table(
        "0.9.1", _store("mamba_radix_cache_strategy", "New help."), alias, _store("keep", "Stays.")
    )
    was = _table("0.9.0", _store("mamba_scheduler_strategy", "Old help."), _store("keep", "Stays."))
    [seen] = argtable_changes.seen_renames(was, moved)
    assert (seen.old, seen.new) == ("mamba_scheduler_strategy", "mamba_radix_cache_strategy")


def test_the_rename_map_agrees_with_every_shipped_release() -> None:
    """What `make sglang-release-check` fails on: a rename the tables show that RENAMES misses
    (orch would render a flag the release no longer has), or a release stated wrongly."""
    assert argtable_changes.rename_problems(argtable.available_versions()) == []


def test_the_release_check_fails_when_the_map_misses_a_rename(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kept = tuple(r for r in argtable.RENAMES if r.old != "mamba_scheduler_strategy")
    monkeypatch.setattr(argtable_changes, "RENAMES", kept)
    problems = argtable_changes.rename_problems(argtable.available_versions())
    assert problems == [
        "SGLang 0.5.14 renamed mamba_scheduler_strategy -> mamba_radix_cache_strategy "
        "(--mamba-scheduler-strategy stores into mamba_radix_cache_strategy in 0.5.14), and "
        "argtable.RENAMES misses it: add Rename('mamba_scheduler_strategy', "
        "'mamba_radix_cache_strategy', (0, 5, 14), <removed_in>)"
    ]


def test_docs_sglang_versions_is_the_report_of_the_shipped_tables() -> None:
    text, _ = argtable_changes.release_report(argtable.available_versions())
    assert (REPO / "docs" / "sglang-versions.md").read_text(encoding="utf-8") == text, (
        "run python scripts/argtables.py report"
    )
