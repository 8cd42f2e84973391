"""``orch upgrade PROFILE --to VERSION``: what moving a profile to another SGLang release changes.

The spelling comes from the two releases' argument tables; the effective configuration and the
memory budget from SGLang's own resolution of each release (``planning.predict`` with a local
venv of each version: ``--from-sglang``/``--to-sglang``, else the venvs
``scripts/build-sglang-venv.sh`` keeps under ``$ORCH_SGLANG_VENV_CACHE``). The upgraded profile is
validated in a scratch copy of the profiles directory before anything is written; ``--write``
writes only what the upgrade changes (a key renamed in place, ``sglang:``), then the lock.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from orchestrator import render
from orchestrator.commands import lockfile, planning
from orchestrator.commands.context import Context, Launch
from orchestrator.effective import plan, upgrade, upgrade_text
from orchestrator.errors import (
    InvalidProfile,
    OrchError,
    ProfileError,
    UpgradeBlocked,
    UsageError,
)
from orchestrator.files import replace_file
from orchestrator.profile.store import ProfileStore
from orchestrator.sglang import argtable


@dataclass(frozen=True)
class Request:
    name: str
    to: str
    source_python: str | None = None
    target_python: str | None = None
    model_config: Path | None = None
    write: bool = False


def cached_venv_python(version: str) -> Path:
    """Where ``scripts/build-sglang-venv.sh VERSION`` puts the venv's python."""
    root = os.environ.get("ORCH_SGLANG_VENV_CACHE") or str(
        Path("~/.cache/orch/sglang-venvs").expanduser()
    )
    return Path(root) / version / "bin" / "python"


def run(ctx: Context, request: Request) -> upgrade.Upgrade:
    loaded = ctx.store.load(request.name)
    profile = loaded.profile
    source_version = profile.sglang_version
    if source_version is None:
        raise ProfileError(
            f"{profile.name} names no `sglang:` version: there is no release to upgrade from",
            'pin the release it runs today (sglang: "0.5.11"), then orch upgrade',
        )
    if argtable.parse_version(request.to) is None:
        raise UsageError(f"--to {request.to!r} is not a release (e.g. 0.5.23 or 0.5.10.post1)")
    if request.to == source_version:
        raise UsageError(f"{profile.name} already targets SGLang {request.to}")
    target = argtable.load_table(request.to)  # no table: the error names the command adding it
    spelled = upgrade.spelling(
        profile,
        loaded.table,
        target,
        ctx.store.written(request.name),
        argtable.available_versions(),
    )
    texts, originals = _new_texts(ctx.store, request, spelled, source_version)
    result = upgrade.Upgrade(
        profile.name, source_version, request.to, spelled, files=texts, originals=originals
    )
    if any(f.severity == upgrade.ERROR for f in spelled.findings):
        return result  # the upgraded profile would not validate: the fields come first
    with tempfile.TemporaryDirectory(prefix="orch-upgrade-") as scratch:
        moved_store = _scratch_store(ctx.store, Path(scratch), texts)
        try:
            moved_store.load(request.name)
        except InvalidProfile as exc:
            first = exc.errors[0]
            raise UpgradeBlocked(
                f"the profile upgraded to SGLang {request.to} would not validate: "
                f"{first.message}"
                + (f" (and {len(exc.errors) - 1} more)" if len(exc.errors) > 1 else ""),
                first.hint,
            ) from exc
        shared, findings = _shared_bases(ctx.store, moved_store, request.name, texts)
        result = dataclasses.replace(
            result,
            shared=shared,
            spelling=dataclasses.replace(spelled, findings=(*spelled.findings, *findings)),
        )
        moved_ctx = dataclasses.replace(ctx, store=moved_store)
        before_launch = ctx.launch(request.name, require_secrets=False)
        after_launch = moved_ctx.launch(request.name, require_secrets=False)
        result = _plans(ctx, moved_ctx, request, before_launch, after_launch, result)
    if request.write:
        result = _write(ctx, request, result, after_launch)
    return result


def _new_texts(
    store: ProfileStore,
    request: Request,
    spelled: upgrade.Spelling,
    source_version: str,
) -> tuple[dict[str, str], dict[str, str]]:
    """Each file the upgrade changes -> its new text, and its text now (displayed names)."""
    own = store.display(store.path_of(request.name))
    changed: dict[str, str] = {}
    originals: dict[str, str] = {}
    sources = {e.source for e in spelled.respellings} | {e.source for e in spelled.replacings}
    for display in sources | {own}:
        original = _path(store, display).read_text(encoding="utf-8")
        edits = [edit for edit in spelled.respellings if edit.source == display]
        replacings = [edit for edit in spelled.replacings if edit.source == display]
        try:
            text = upgrade_text.respell_text(original, edits, replacings)
        except upgrade_text.EditError as exc:
            hint = "run orch upgrade again"
            if replacings:
                hint = "; ".join(f"{r.key_path}: write {r.written} by hand" for r in replacings) + (
                    ", then orch upgrade again"
                )
            raise ProfileError(f"{display}: {exc}", hint) from exc
        if display == own:
            text = upgrade_text.set_version_text(text, request.to)
        if text != original:
            changed[display] = text
            originals[display] = original
    for display in _inheriting_the_version(store, request.name, own):
        original = _path(store, display).read_text(encoding="utf-8")
        # a profile that inherits `sglang:` from this one stays on its release, now said
        changed[display] = upgrade_text.set_version_text(original, source_version)
        originals[display] = original
    return changed, originals


def _path(store: ProfileStore, display: str) -> Path:
    """The file behind a displayed name: every profile lives in the one directory."""
    return store.root / Path(display).name


def _inheriting_the_version(store: ProfileStore, name: str, own: str) -> list[str]:
    """The other profiles (displayed names) whose `sglang:` is the one written in ``name``'s
    file."""
    found: list[str] = []
    for other in store.names():
        if other == name:
            continue
        try:
            where = store.written(other).get(("sglang",))
        except OrchError:
            continue
        if where is not None and where.source == own:
            found.append(store.display(store.path_of(other)))
    return found


def _scratch_store(store: ProfileStore, scratch: Path, texts: dict[str, str]) -> ProfileStore:
    """A copy of the profiles directory with the upgrade applied (lock files left out: the
    target's lock is what this computes)."""
    for path in store.root.iterdir():
        if path.is_file() and (path.suffix in (".yaml", ".yml") or path.name == "known_hosts"):
            shutil.copyfile(path, scratch / path.name)
    for display, text in texts.items():
        (scratch / Path(display).name).write_text(text, encoding="utf-8")
    return ProfileStore(scratch, display_root=scratch, local_python=store.local_python)


def _shared_bases(
    store: ProfileStore, moved: ProfileStore, name: str, texts: dict[str, str]
) -> tuple[tuple[str, ...], tuple[upgrade.Finding, ...]]:
    """The other profiles built on a file the upgrade edits: their launches must not change
    (a renamed key is spelled for each profile's own release, so they do not)."""
    shared: list[str] = []
    findings: list[upgrade.Finding] = []
    for other in store.names():
        if other == name:
            continue
        try:
            sources = {where.source for where in store.written(other).values()}
            if not sources & set(texts):
                continue
            before = store.load(other)
        except OrchError:
            continue  # invalid already: validate says so
        try:
            after = moved.load(other)
        except OrchError:
            # a switch replaced by a value its own release lacks
            findings.append(
                upgrade.Finding(
                    upgrade.ERROR,
                    "extends",
                    f"{other} is built on a file this upgrade edits, and would no longer "
                    "validate on its own release",
                    f"upgrade {other} too, or move the edited key into {name}'s own file",
                )
            )
            continue
        if before.profile.abstract:
            shared.append(other)
            continue
        old = render.launch_digest(*render.render_members(before.profile, before.table))
        new = render.launch_digest(*render.render_members(after.profile, after.table))
        if old == new:
            shared.append(other)
        else:
            findings.append(
                upgrade.Finding(
                    upgrade.ERROR,
                    "extends",
                    f"{other} is built on a file this upgrade edits, and its launch would change",
                    f"upgrade {other} too, or move the renamed key into {name}'s own file",
                )
            )
    return tuple(shared), tuple(findings)


def _python_for(given: str | None, version: str) -> tuple[str | None, str]:
    if given is not None:
        return given, f"SGLang {version} with {given}"
    cached = cached_venv_python(version)
    if cached.is_file():
        return str(cached), f"SGLang {version} with {cached} (the venv cache)"
    return None, (
        f"no SGLang {version} here to plan with: scripts/build-sglang-venv.sh {version} builds "
        f"a CPU venv (~2 GB, a few minutes), or give its python with --from-sglang/--to-sglang"
    )


def _plans(
    ctx: Context,
    moved_ctx: Context,
    request: Request,
    before_launch: Launch,
    after_launch: Launch,
    result: upgrade.Upgrade,
) -> upgrade.Upgrade:
    source_python, source_note = _python_for(request.source_python, result.source_version)
    target_python, target_note = _python_for(request.target_python, result.target_version)
    notes = [source_note, target_note]
    if before_launch.profile.gpu.type is None:
        notes.append("no gpu.type: the plans simulate the profile's GPU, so none ran")
        return dataclasses.replace(result, plan_notes=tuple(notes))
    elsewhere = _model_config_elsewhere(before_launch, request)
    if elsewhere is not None:  # upgrade plans here and never reaches a host
        notes.append(elsewhere)
        return dataclasses.replace(result, plan_notes=tuple(notes))
    before = after = None
    if source_python is not None:
        before = planning.predict(
            ctx, before_launch, local=planning.LocalSGLang(source_python, request.model_config)
        )
        if before.error is not None:
            notes.append(f"today's profile: {before.refusal()}")
    if target_python is not None:
        after = planning.predict(
            moved_ctx,
            after_launch,
            local=planning.LocalSGLang(target_python, request.model_config),
        )
    result = dataclasses.replace(result, plan_notes=tuple(notes))
    if after is not None and after.error is not None:
        return dataclasses.replace(result, refused=after.refusal())
    memory = upgrade.memory_rows(
        before.budget if before is not None else None, after.budget if after is not None else None
    )
    effective = None
    if before is not None and after is not None and before.error is None:
        effective = upgrade.effective(before, after, after_launch.profile.pin)
    return dataclasses.replace(result, effective=effective, memory=memory, target_plan=after)


def _model_config_elsewhere(launch: Launch, request: Request) -> str | None:
    """Why the plans cannot run here: SGLang reads the model's config.json while it resolves,
    and the profile's model directory is on its host (not this machine), with no
    --model-config given. None when there is one to read (or a Hub id, which SGLang asks)."""
    profile = launch.profile
    path = profile.model.path
    if request.model_config is not None or Path(path).expanduser().is_dir():
        return None
    if not path.startswith(("/", "~", ".")):
        return None
    return (
        f"the model's config.json is on {profile.host.name} ({path}), not here: give "
        "--model-config FILE (e.g. standin/models/Qwen3.6-27B/config.json) to plan both "
        "releases; the spelling above needs neither"
    )


def _write(
    ctx: Context,
    request: Request,
    result: upgrade.Upgrade,
    after_launch: Launch,
) -> upgrade.Upgrade:
    if result.blocked:
        return result  # the caller says nothing was written
    lock = lockfile.read_lock(ctx.store.root, request.name)
    target_plan = result.target_plan
    if lock is not None and target_plan is None:
        raise UpgradeBlocked(
            f"{request.name} has a lock file, and the upgrade cannot refresh it without "
            f"SGLang {request.to}'s plan: nothing written",
            f"give --to-sglang PYTHON (a venv of SGLang {request.to}), or "
            f"scripts/build-sglang-venv.sh {request.to}",
        )
    written = []
    for display, text in result.files.items():
        path = _path(ctx.store, display)
        replace_file(path, text, hint=f"make {display} a regular file of yours, then --write again")
        written.append(display)
    note = "no lock file: none written"
    if lock is not None and target_plan is not None:
        document = plan.lock_document(
            after_launch.profile, target_plan, after_launch.digest, after_launch.profile.gpu.type
        )
        path = lockfile.write_lock(ctx.store.root, request.name, document)
        note = f"{ctx.store.display(path)} refreshed with SGLang {request.to}'s plan"
    return dataclasses.replace(result, written=tuple(written), lock=note)
