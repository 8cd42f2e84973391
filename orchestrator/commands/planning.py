"""plan and lock: what SGLang will make of a launch, by SGLang's own parsing and resolution
(the probe bundle, ``remote/probe``), on the host or in a local venv of the same version; the gate
``up`` passes before launching; the reviewable lock file."""

from __future__ import annotations

import dataclasses
import json
import posixpath
import subprocess
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.commands import lockfile
from orchestrator.commands.context import Context, Launch
from orchestrator.commands.events import Planned, UpEvent, Warn
from orchestrator.effective import launch_pitfalls, plan, verify
from orchestrator.errors import PlanRefused, PreflightError, ProfileError
from orchestrator.fleet.bootstrap import local_home, run_here
from orchestrator.fleet.client import probe_bundle
from orchestrator.fleet.protocol.common import last_json_line
from orchestrator.fleet.protocol.plan import decode_plan_answer
from orchestrator.sglang import argtable
from orchestrator.sglang import config as sglang_config
from orchestrator.sglang.memory.budget import budget_for
from orchestrator.sglang.memory.shapes import MemoryAnswer, nominal_gpu


@dataclass(frozen=True)
class LocalSGLang:
    """Plan in a local venv of the same SGLang version, the GPU simulated from ``gpu.type``."""

    python: str
    model_config: Path | None = None  # the model's config.json when its path is not local


def predict(
    ctx: Context, launch: Launch, *, local: LocalSGLang | None = None, cache: bool = True
) -> plan.PlanReport:
    """What SGLang will make of the launch: its own parsing and resolution, no server.
    ``cache``: the probe may answer from its plan cache (False: ``--no-cache``, plan afresh)."""
    answer, where, model_config = ask(ctx, launch, local=local, cache=cache)
    return report_for(launch, answer, where, local=local, model_config=model_config)


def ask(
    ctx: Context,
    launch: Launch,
    *,
    local: LocalSGLang | None = None,
    candidates: tuple[tuple[str, ...], ...] = (),
    cache: bool = True,
) -> tuple[plan.PlanAnswer, str, tuple[str, dict[str, Any]] | None]:
    """The probe's answer for the launch (and for ``candidates``, other command lines of the
    same launch, in the same probe process: ``orch plan --fit``), where it was asked, and the
    model's config.json sent with a local plan."""
    profile = launch.profile
    member = launch.primary
    arguments = sglang_config.sglang_arguments(member.argv) or ()
    others = tuple(sglang_config.sglang_arguments(argv) or () for argv in candidates)
    if local is None:
        agent = ctx.agent(profile)
        use = plan.PlanCacheUse(agent.deployment.plan_cache_dir, read=cache)
        request = plan.probe_request(arguments, member.env, cache=use, candidates=others)
        return agent.plan(request), f"host {profile.host.name}", None
    gpu = profile.gpu.type
    if gpu is None:
        raise ProfileError(
            f"{profile.name}: planning with a local SGLang simulates the profile's GPU, "
            "and it names none",
            "set gpu.type (B200, H200, ...), or plan on the host without --local-sglang",
        )
    model_config = _model_config_for(ctx, launch, local)
    use = plan.PlanCacheUse(str(local_plan_cache(profile.name)), read=cache)
    request = plan.probe_request(
        arguments,
        member.env,
        simulate=gpu,
        model_config=model_config,
        cache=use,
        candidates=others,
    )
    return _run_local_probe(local.python, request), f"local {local.python}", model_config


def report_for(
    launch: Launch,
    answer: plan.PlanAnswer,
    where: str,
    *,
    local: LocalSGLang | None = None,
    model_config: tuple[str, dict[str, Any]] | None = None,
) -> plan.PlanReport:
    """The plan report of ``launch`` from the probe's ``answer``, with its memory budget and
    its launch pitfalls."""
    profile = launch.profile
    member = launch.primary
    table = launch.table
    answered = answer.sglang_version or ""
    if answered and answered != table.version and not answer.standin:
        table = argtable.table_for(answered).table  # read the answer in the answering version
    report = plan.report(
        profile, table, answer, requested=member.requested, where=where, secrets=launch.secrets
    )
    if launch.unset_secrets:
        unset = ", ".join(launch.unset_secrets)
        report = dataclasses.replace(
            report,
            notes=(
                *report.notes,
                f"{unset} not set here: planned with a placeholder, compared as unverifiable",
            ),
        )
    if answered and answered != member.command.argtable_version and not report.standin:
        report = dataclasses.replace(
            report,
            notes=(
                *report.notes,
                f"planned with SGLang {answered}; the command line is spelled for "
                f"{member.command.argtable_version}",
            ),
        )
    if report.ok:
        gpu = profile.gpu.type
        budget, notes = budget_for(
            memory_answer(answer, local),
            report.effective,
            member.env,
            version=argtable.parse_version(answered) if answered else table.parsed_version,
            devices=tuple(profile.gpu.devices),
            nominal=nominal_gpu(gpu.name, gpu.memory_gb) if gpu is not None else None,
        )
        report = dataclasses.replace(report, budget=budget, budget_notes=notes)
    given = model_config[1] if local is not None and model_config is not None else None
    pitfalls = launch_pitfalls.plan_pitfalls(
        profile,
        table,
        report.effective if report.ok else {},
        member.env,
        config=launch_pitfalls.model_config(given, answer.memory),
        budget=report.budget,
    )
    return dataclasses.replace(report, pitfalls=pitfalls)


def memory_answer(answer: plan.PlanAnswer, local: LocalSGLang | None) -> MemoryAnswer | None:
    """The answer's memory section, the weights counted from the index beside
    ``--model-config`` where the checkpoint is not on this machine."""
    found = answer.memory
    if local is not None and found is not None and found.weights_bytes is None:
        beside = _weights_beside(local.model_config)
        if beside is not None:  # the checkpoint is elsewhere; its index was given here
            found = dataclasses.replace(
                found, weights_bytes=beside[0], weights_basis=beside[1], weights_error=None
            )
    return found


def gate(
    ctx: Context, launch: Launch, *, force: bool, replacing: bool = False, cache: bool = True
) -> Generator[UpEvent, None, plan.PlanReport]:
    """Refuse to launch what SGLang itself rejects, what would not fit in the GPUs' memory, or
    what would change a pinned field; returns the plan. ``replacing``: a running server of this
    deployment will be stopped first, so the memory it holds is not counted against the new one.
    ``cache``: as ``predict``'s."""
    profile = launch.profile
    report = predict(ctx, launch, cache=cache)
    yield Planned(report)
    problem: str | None = None
    hint = ""
    budget = report.budget
    blocking = report.blocking_pitfalls
    if blocking:
        problem = f"{blocking[0].message} [{blocking[0].kind}]"
        hint = blocking[0].hint
    elif report.error is not None:
        problem = report.refusal()
        hint = report.error.hint or "the server would fail the same way at startup"
    elif budget is not None and budget.refusal is not None and replacing:
        yield Warn(
            f"{budget.refusal}; not refused: the GPUs' free memory was measured while the "
            "server being replaced still holds it",
            f"orch plan {profile.name} once it is stopped shows the budget",
        )
    elif budget is not None and budget.refusal is not None:
        problem = budget.refusal
        hint = (budget.hints[0] + "; " if budget.hints else "") + (
            f"orch plan {profile.name} shows the budget"
        )
    else:
        pinned = report.pinned_changes(profile.pin, launch.table)
        if pinned:
            names = ", ".join(
                f"{f.field} {verify.display(f.profile)} -> {verify.display(f.effective)}"
                for f in pinned
            )
            problem = f"SGLang would change pinned field(s): {names}"
            hint = f"orch plan {profile.name} shows which SGLang step changes them"
    if problem is None:
        return report
    if not force:
        raise PlanRefused(f"{profile.name}: {problem}", f"{hint}; --force launches anyway")
    yield Warn(f"{problem} (--force: launching anyway)")
    return report


def write_lock(
    ctx: Context, launch: Launch, *, local: LocalSGLang | None = None, cache: bool = True
) -> tuple[Path, dict[str, Any], plan.PlanReport]:
    name = launch.profile.name
    report = predict(ctx, launch, local=local, cache=cache)
    if report.error is not None:
        raise PlanRefused(
            f"{name}: cannot lock a plan SGLang rejects: {report.error.kind}: "
            f"{report.error.message}",
            report.error.hint or f"orch plan {name} shows the details",
        )
    document = plan.lock_document(launch.profile, report, launch.digest, launch.profile.gpu.type)
    return lockfile.write_lock(ctx.store.root, name, document), document, report


def local_plan_cache(profile: str) -> Path:
    """Where a local plan's probe keeps its answers: ``$XDG_CACHE_HOME/orch/plan-cache/<profile>``
    (``~/.cache``), beside the bundles (``local_home``)."""
    return local_home().parent / "plan-cache" / profile


def _model_config_for(
    ctx: Context, launch: Launch, local: LocalSGLang
) -> tuple[str, dict[str, Any]] | None:
    """SGLang reads the model's config.json during resolution: find one for a local plan."""
    profile = launch.profile
    path = profile.model.path
    if local.model_config is not None:
        source = local.model_config
    elif Path(path).is_dir():
        return None  # SGLang reads it where it is
    elif not path.startswith(("/", "~", ".")):
        return None  # a Hub id: SGLang asks the Hub (needs network where it runs)
    elif profile.host.is_local:
        raise PreflightError(
            f"model path {path} does not exist on this machine",
            "give its config.json with --model-config FILE",
        )
    else:
        transport = ctx.transport(profile.host)
        try:
            data = transport.read(posixpath.join(path, "config.json"))
        except FileNotFoundError as exc:
            raise PreflightError(
                f"{path}/config.json not found on {profile.host.name}",
                "give the model's config.json with --model-config FILE",
            ) from exc
        return path, _json_object(data.decode("utf-8", "replace"), f"{path}/config.json")
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"--model-config {source}: {exc.strerror or exc}") from exc
    return path, _json_object(text, str(source))


def _weights_beside(config: Path | None) -> tuple[int, str] | None:
    """The checkpoint's size from the ``model.safetensors.index.json`` beside a local copy of
    its config.json (``--model-config``): how a plan away from the host counts the weights."""
    if config is None:
        return None
    index = config.parent / "model.safetensors.index.json"
    try:
        document = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    metadata = document.get("metadata") if isinstance(document, dict) else None
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    if isinstance(total, bool) or not isinstance(total, int) or total <= 0:
        return None
    return total, f"{index.name} total_size, beside --model-config"


def _json_object(text: str, where: str) -> dict[str, Any]:
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ProfileError(f"{where}: not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise ProfileError(f"{where}: expected a JSON object")
    return document


def _run_local_probe(python: str, request: dict[str, Any]) -> plan.PlanAnswer:
    """The probe bundle run with a local python, through the bootstrap as on a host; the
    request (it may hold tokens) on its stdin, no file."""
    stdin = json.dumps(request).encode()
    try:
        done = run_here(python, probe_bundle(), ("-",), home=local_home(), stdin=stdin, timeout=600)
    except FileNotFoundError as exc:
        raise PreflightError(
            f"--local-sglang {python}: no such interpreter",
            "scripts/build-sglang-venv.sh VERSION builds one (prints its path)",
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise PreflightError(f"planning with {python} took over 600 s") from exc
    answer = last_json_line(done.stdout, done.stderr, done.returncode, f"{python} probe")
    return decode_plan_answer(answer)
