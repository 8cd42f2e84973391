"""The memory budget as text: the plan's section, one bar per GPU, plain letters off a terminal."""

from __future__ import annotations

import pytest

from orchestrator.cli.show import budget as show_budget
from orchestrator.sglang.memory.budget import Budget, plan_budget
from orchestrator.sglang.memory.rules import BudgetInputs
from orchestrator.sglang.memory.shapes import GIB, GpuMemory, ModelMemory

pytestmark = pytest.mark.unit

MODEL = ModelMemory(
    basis="test",
    architecture="T",
    context_len=8192,
    attention_tp=2,
    full_attention_layers=16,
    kv_cell_bytes=32 * 1024,
    kv_dtype="bfloat16",
    hybrid=True,
    mamba_layers=48,
    mamba_slot_bytes=GIB // 8,
    weights_bytes=80 * GIB,
    weights_basis="index",
)
INPUTS = BudgetInputs(
    mem_fraction_static=0.9,
    tp_size=2,
    max_running_requests=48,
    extra_buffer=True,
    context_len=8192,
    cuda_graph_max_bs=256,
)


def _budget() -> Budget:
    gpus = (
        GpuMemory("NVIDIA H200", 141 * GIB, 140 * GIB, "NVML on box", 0),
        GpuMemory("NVIDIA H200", 141 * GIB, 100 * GIB, "NVML on box", 1),
    )
    return plan_budget(MODEL, gpus, INPUTS, version=(0, 5, 23))


def test_each_gpu_gets_its_bar_and_the_tightest_sizes_the_pools() -> None:
    budget = _budget()
    lines = show_budget.budget_lines(budget, ())
    bars = [line for line in lines if line.lstrip().startswith(("GPU0", "GPU1"))]
    assert len(bars) == 2
    # GPU1 has 40 GiB taken by others: more of its bar is "o", and every bar is as wide
    assert bars[1].count("o") > bars[0].count("o")
    assert len(bars[0].split("[", 1)[1]) == len(bars[1].split("[", 1)[1])
    assert budget.free_gib == pytest.approx(100)
    assert not any("\x1b[" in line for line in lines)


def test_a_terminal_gets_colours_and_the_legend_names_every_part() -> None:
    texts = show_budget.budget_texts(_budget(), (), tty=True)
    colours = [text.text for text in texts if text.control]
    assert "\x1b[34m" in colours  # orch's own control texts, written as they are
    assert not any("\x1b" in text.text for text in texts if not text.control)
    plain = show_budget.budget_texts(_budget(), (), tty=False)
    assert not any(text.control for text in plain)
    lines = "".join(text.text for text in plain).splitlines()
    assert lines == show_budget.budget_lines(_budget(), ())
    legend = next(line for line in lines if "W weights" in line)
    assert "K KV pool" in legend
    assert "M mamba state pool" in legend


def test_no_budget_says_why() -> None:
    assert show_budget.budget_lines(None, ("no memory budget: no GPU memory known",)) == [
        "memory: no memory budget: no GPU memory known"
    ]
