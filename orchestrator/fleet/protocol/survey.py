"""``survey``: one command per host, every deployment under its workdir with its state (exactly
what ``status --dir`` reports of it), the host's SGLang version and its name, read without
writing anything on the host (the bootstrap's ``--no-write``). orch sync's dry run and
``orch status --all`` read a fleet so: one round trip per host, not one per deployment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.fleet.protocol.common import Reader, Request, refused
from orchestrator.fleet.protocol.status import decode_state
from orchestrator.model import RunState

# A host with hundreds of deployment directories answers within it (each one is a status: a
# few file reads and process checks, no HTTP).
SURVEY_TIMEOUT_S = 60.0


def survey_request(workdir: str) -> Request:
    return Request(("survey", "--workdir", workdir), timeout=SURVEY_TIMEOUT_S)


@dataclass(frozen=True)
class HostSurvey:
    """One host as surveyed."""

    host: str  # the hosts.yaml name
    workdir: str  # absolute, as surveyed
    sglang_version: str | None  # importlib.metadata.version("sglang") of the host's python
    # every deployment directory under the workdir (NAME, NAME@I) -> its state, exactly what
    # ``status --dir`` reports for it
    deployments: Mapping[str, RunState]
    # a directory that looks like a deployment but could not be read (unsafe: another user's,
    # writable by others; unreadable) -> why; never read
    unreadable: Mapping[str, str] = field(default_factory=dict)
    hostname: str | None = None  # the host's own name (socket.gethostname())


def decode_survey(host: str, document: Any) -> HostSurvey:
    """The agent's ``survey`` answer; a refusal (the workdir itself is unsafe) is the
    PreflightError every command's refusal is."""
    refused(document)
    reader = Reader(document, "agent survey")
    deployments = {
        str(name): decode_state(state)
        for name, state in sorted(reader.mapping("deployments").items())
    }
    unreadable = {str(name): str(why) for name, why in sorted(reader.mapping("unreadable").items())}
    return HostSurvey(
        host=host,
        workdir=reader.text("workdir"),
        sglang_version=reader.opt_text("sglang_version"),
        deployments=deployments,
        unreadable=unreadable,
        hostname=reader.opt_text("hostname"),
    )
