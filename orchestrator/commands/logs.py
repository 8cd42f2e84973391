"""runs and logs: what a deployment's runs were, and what they printed, followed as it grows."""

from __future__ import annotations

import codecs
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from orchestrator.commands import replicas
from orchestrator.commands.context import Context
from orchestrator.commands.events import LogChunk, RunEnded
from orchestrator.commands.follow import exit_code_of
from orchestrator.errors import ExitCode, NotDeployed, UsageError
from orchestrator.fleet.protocol.runs import RunInfo
from orchestrator.model import ExitInfo, Profile, RunState
from orchestrator.remote.agent.states import EXITED, TERMINAL_STATES
from orchestrator.remote.agent.verdict import STOPPED
from orchestrator.transport import Transport

# -- runs ------------------------------------------------------------------------------------------

RECENT_RUNS = 5  # named when a --run is unknown or ambiguous


def pick_run(runs: Sequence[RunInfo], wanted: str, where: str) -> RunInfo:
    """A run by its id, a unique prefix of one (``0003``), or ``-1`` (the last), ``-2`` (the one
    before) ...; anything else is an error naming the recent runs."""
    recent = ", ".join(run.run_id for run in runs[-RECENT_RUNS:]) or "none"
    if wanted.startswith("-") and wanted[1:].isdigit() and int(wanted[1:]) >= 1:
        back = int(wanted[1:])
        if back > len(runs):
            raise NotDeployed(
                f"no run {wanted} of {where}: it has {len(runs)} run(s)", f"recent runs: {recent}"
            )
        return runs[-back]
    matches = [run for run in runs if run.run_id == wanted] or [
        run for run in runs if run.run_id.startswith(wanted)
    ]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise NotDeployed(f"no run {wanted!r} of {where}", f"recent runs: {recent}")
    named = ", ".join(run.run_id for run in matches[-RECENT_RUNS:])
    raise NotDeployed(
        f"run {wanted!r} of {where} is ambiguous: {len(matches)} runs start with it ({named})",
        "give more of the run id, or -1 for the last run, -2 for the one before",
    )


@dataclass(frozen=True)
class RunsView:
    profile: str
    host: str
    runs: tuple[RunInfo, ...]
    current: RunState | None  # state.json as recorded: the current run's live state
    now: float | None  # the host's clock when it answered (None: an older agent)
    skipped_events: int = 0  # lines of events.jsonl that are no event (too long, too deep)


def node_profile(ctx: Context, name: str, rank: int, replica: int | None = None) -> Profile:
    """``name``'s profile as rank ``rank`` runs it (0: a single server's); of replica
    ``replica`` where the profile has ``replicas:``."""
    launch = replicas.one(ctx.launch(name, require_secrets=False), replica)
    profile = launch.profile
    if not 0 <= rank < len(launch.members):
        if profile.group is None:
            raise UsageError(f"--node {rank}: {name} is a single server", "leave --node out")
        raise UsageError(
            f"--node {rank}: {name} has ranks 0-{profile.nnodes - 1}", "a rank of group.nodes"
        )
    return launch.members[rank].profile


def runs(ctx: Context, name: str, *, rank: int = 0, replica: int | None = None) -> RunsView:
    """The deployment's runs with their start, end and verdict, and the current run's live
    state: two agent commands over the SSH channel, as every other command asks (no SFTP,
    which some hosts turn off)."""
    profile = node_profile(ctx, name, rank, replica)
    agent = ctx.agent(profile)
    reply = agent.runs_reply()
    shown = profile.deployment  # NAME@I for a replica
    if not reply.runs:
        raise NotDeployed(f"{shown} has no runs on {profile.host.name}", f"orch up {name}")
    return RunsView(
        shown, profile.host.name, reply.runs, agent.status(), reply.now, reply.skipped_events
    )


# -- logs ------------------------------------------------------------------------------------------

LOG_FOLLOW_POLL_S = 0.25
READ_BYTES = 1 << 20  # per read of the transport
TAIL_BYTES_PER_LINE = 512  # the window read for -n N: N x this, from the end


def ended_exit_code(verdict: ExitInfo | None, state: str | None) -> ExitCode:
    """0 for a run stopped on request, else its crash class's code (docs/exit-codes.md)."""
    if verdict is None:
        return ExitCode.OK if state == EXITED else ExitCode.SUPERVISOR
    if verdict.cls == STOPPED:
        return ExitCode.OK
    return exit_code_of(verdict.cls)


class Unknown:
    """Not known yet (``None`` means the file does not exist)."""


UNKNOWN = Unknown()


class LogTail:
    """One run's ``server.log``, read from an offset: only what is shown, whatever its size.

    The agent rotates the log to ``server.log.1`` at a size cap (``LogSink``). A rotation shows
    as the file shrinking below the offset, or as ``server.log.1`` changing (its size is the
    identity the transport shows): the rest of ``server.log.1`` is read from the offset, then
    the new file from 0, so no line is lost. One rotation between two reads is assumed (the cap
    is 256 MiB). Bytes are decoded incrementally: a character cut by a read or by the rotation
    is whole when shown."""

    def __init__(
        self,
        transport: Transport,
        path: str,
        *,
        offset: int = 0,
        rotated_size: int | Unknown | None = UNKNOWN,
    ) -> None:
        """From ``offset``; ``rotated_size``: server.log.1's size when already known (the
        agent's ``tail`` says it), else asked."""
        self.transport = transport
        self.path = path
        self.rotated_path = f"{path}.1"
        self.offset = offset
        self._rotated_size = (
            transport.size(self.rotated_path) if isinstance(rotated_size, Unknown) else rotated_size
        )
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def last_lines(self, lines: int) -> str | None:
        """The last ``lines`` (from ``server.log.1`` too when the file holds fewer); later reads
        go on from the end. None when the run has no log."""
        size = self.transport.size(self.path)
        if size is None:
            return None
        self.offset = size
        if lines <= 0:
            return ""
        window = lines * TAIL_BYTES_PER_LINE
        text = self._window(self.path, size, window)
        if size < window and self._rotated_size and text.count("\n") < lines:
            text = self._window(self.rotated_path, self._rotated_size, window - size) + text
        return "".join(text.splitlines(keepends=True)[-lines:])

    def read_new(self) -> Iterator[str]:
        """What was written since the last read, across a rotation, in pieces of READ_BYTES."""
        rotated = self.transport.size(self.rotated_path)
        size = self.transport.size(self.path)
        shrunk = size is not None and size < self.offset
        if shrunk or (rotated is not None and rotated != self._rotated_size):
            # the file read so far is server.log.1 now (asked again: it may have rotated
            # between the two questions): its rest, then the new file from its start
            rotated = self.transport.size(self.rotated_path)
            if rotated is not None:
                yield from self._pieces(self.rotated_path, rotated)
            self.offset = 0
            self._rotated_size = rotated
        if size is not None:
            yield from self._pieces(self.path, size)

    def flush(self) -> str:
        """The end of the log: an incomplete character left by the last read."""
        return self._decoder.decode(b"", final=True)

    def _pieces(self, path: str, end: int) -> Iterator[str]:
        while self.offset < end:
            try:
                data = self.transport.read(path, self.offset, min(end - self.offset, READ_BYTES))
            except FileNotFoundError:
                return
            if not data:
                return
            self.offset += len(data)
            yield self._decoder.decode(data)

    def _window(self, path: str, size: int, window: int) -> str:
        """The lines in the last ``window`` bytes of ``path`` (a line cut at the start left out)."""
        start = max(size - window, 0)
        parts = []
        offset = start
        try:
            while offset < size:
                data = self.transport.read(path, offset, min(size - offset, READ_BYTES))
                if not data:
                    break
                parts.append(data)
                offset += len(data)
        except FileNotFoundError:
            return ""
        text = b"".join(parts).decode("utf-8", "replace")
        if start > 0:
            text = text.split("\n", 1)[1] if "\n" in text else ""
        return text


def logs(
    ctx: Context,
    name: str,
    *,
    run: str | None,
    follow_log: bool,
    lines: int,
    rank: int = 0,
    replica: int | None = None,
) -> Iterator[LogChunk | RunEnded]:
    """The last ``lines`` of a run's log (``run``: see ``pick_run``; default the current run);
    then (``follow_log``) what is appended to it, and when the run ends, the deployment's next
    run from its start, until the deployment ends (RunEnded without ``next_run``). Reads only
    what it shows, from offsets; state.json is read when the log is idle. ``rank``: the node
    of a launch group whose log it is; ``replica``: the replica's, for a profile with them."""
    profile = node_profile(ctx, name, rank, replica)
    agent = ctx.agent(profile)
    where = f"{profile.deployment} on {profile.host.name}"
    # The last lines come from the host in one command (the current run, else the newest).
    picked = pick_run(agent.runs(), run, where).run_id if run is not None else None
    reply = agent.tail(lines, TAIL_BYTES_PER_LINE, picked)
    if not reply.ok or reply.run_id is None or reply.log is None or reply.size is None:
        if reply.reason in ("no runs", "not deployed"):
            raise NotDeployed(
                f"{profile.deployment} has no runs on {profile.host.name}", f"orch up {name}"
            )
        recent = ", ".join(run.run_id for run in agent.runs()[-RECENT_RUNS:])
        raise NotDeployed(
            f"no log for run {reply.run_id or picked} of {name}", f"recent runs: {recent or 'none'}"
        )
    run_id, path = reply.run_id, reply.log
    tail = LogTail(agent.transport, path, offset=reply.size, rotated_size=reply.rotated_size)
    yield LogChunk(reply.data.decode("utf-8", "replace"), run_id, path)
    while follow_log:
        shown = False
        for piece in tail.read_new():
            shown = True
            yield LogChunk(piece, run_id, path)
        if shown:
            continue
        current = agent.read_state()
        ongoing = (
            current is None
            or current.run_id is None
            or (current.run_id == run_id and current.state not in TERMINAL_STATES)
        )
        if ongoing or current is None:
            ctx.sleep(LOG_FOLLOW_POLL_S)
            continue
        # The run ended, its log complete: the agent drains a run's output before it starts
        # another or ends.
        rest = "".join(tail.read_new()) + tail.flush()
        if rest:
            yield LogChunk(rest, run_id, path)
        if current.run_id == run_id:
            ended = current.last_exit
            verdict = ended if ended is not None and ended.run_id == run_id else None
            code = ended_exit_code(verdict, current.state)
            yield RunEnded(run_id, verdict, None, current.state, current.message, code)
            return
        known = agent.runs()
        ids = [known_run.run_id for known_run in known]
        position = ids.index(run_id) if run_id in ids else -1
        later = known[position + 1 :] if position >= 0 else [r for r in known if r.run_id > run_id]
        if not later:  # the state names a run not listed yet
            ctx.sleep(LOG_FOLLOW_POLL_S)
            continue
        verdict = known[position].exit if position >= 0 else None
        yield RunEnded(run_id, verdict, later[0].run_id)
        run_id = later[0].run_id
        path = agent.deployment.run_log(run_id)
        tail = LogTail(agent.transport, path)
