"""orch diff-effective --url: a server asked over HTTP from this machine, without SSH, as behind
``kubectl port-forward``. The servers are orch's SGLang stand-in (NOT SGLang) started by hand;
the profiles' host is an SSH address where nothing listens, so any attempt to use SSH fails."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from orchestrator.commands.by_url import observe_url
from orchestrator.errors import ConnectError, ExitCode
from tests.conftest import CAPTURES
from tests.e2e.conftest import MODEL, STANDIN, Workspace, add_host, free_port

KEY = "sk-url-0123456789abcdef"
INCIDENT_ARGS = {"mamba_scheduler_strategy": "extra_buffer", "context_length": 8192}
INCIDENT_SPEC = """\
spec_decode:
  algorithm: EAGLE
  num_steps: 3
  eagle_topk: 1
  num_draft_tokens: {draft}
"""
SPEC_FLAGS = (
    "--speculative-algorithm",
    "EAGLE",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
)

Start = Callable[..., str]


@pytest.fixture
def by_hand() -> Iterator[Start]:
    """Starts stand-in servers the way someone does by hand; returns each one's base URL."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*flags: str, version: str = "0.5.23", env: dict[str, str] | None = None) -> str:
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "sglang.launch_server",
            "--model-path",
            str(MODEL),
            "--served-model-name",
            "qwen-test",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--skip-server-warmup",
            *flags,
        ]
        env = {
            **os.environ,
            "PYTHONPATH": str(STANDIN),
            "ORCH_STANDIN_VERSION": version,
            "ORCH_STANDIN_LOAD_S": "0.2",
            **(env or {}),
        }
        server = subprocess.Popen(
            argv,
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        started.append(server)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            assert server.poll() is None, f"the stand-in exited with {server.returncode}"
            try:
                with urllib.request.urlopen(url + "/health", timeout=1) as answer:  # noqa: S310
                    if answer.status == 200:
                        return url
            except OSError:
                pass
            assert time.monotonic() < deadline, "the hand-started stand-in never became healthy"
            time.sleep(0.1)

    yield start
    for server in started:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


@pytest.fixture
def far(local_workspace: Workspace) -> Workspace:
    """The workspace with host ``far``: an SSH address where nothing listens."""
    add_host(
        local_workspace,
        "far",
        address="127.0.0.1",
        port=free_port(),
        user="nobody",
        workdir="/srv/orch",
    )
    return local_workspace


def incident(space: Workspace, name: str, url: str, *, args: dict[str, Any] | None = None) -> str:
    """The incident's profile on ``far``, for the server at ``url`` (its port)."""
    return space.profile(
        name,
        INCIDENT_SPEC.format(draft=4),
        host="far",
        port=port_of(url),
        args={**INCIDENT_ARGS, **(args or {})},
    )


def port_of(url: str) -> int:
    return int(url.rpartition(":")[2])


def rows(outcome_json: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["field"]: row for row in outcome_json["fields"]}


def incident_flags(*, mamba: bool = True, draft: int = 4) -> tuple[str, ...]:
    mamba_flags = ("--mamba-radix-cache-strategy", "extra_buffer") if mamba else ()
    return (
        *SPEC_FLAGS,
        "--speculative-num-draft-tokens",
        str(draft),
        *mamba_flags,
        "--context-length",
        "8192",
    )


def test_url_compares_a_hand_started_server_without_ssh(far: Workspace, by_hand: Start) -> None:
    url = by_hand(*incident_flags())
    name = incident(far, "pod", url)
    plain = far.orch("diff-effective", name)
    assert plain.code == ExitCode.CONNECT, plain.err  # the profile's host: nothing there

    outcome = far.orch("diff-effective", name, "--json", "--url", url)
    assert outcome.code == ExitCode.OK, outcome.out + outcome.err
    report = outcome.json()
    assert (report["found_by"], report["pid"]) == ("url", None)
    assert report["resolved_source"] == "/server_info"
    assert report["env"] == []  # no process environment to read through a URL
    fields = rows(report)
    assert {row["verdict"] for row in fields.values()} == {"ok"}
    mamba = fields["mamba_radix_cache_strategy"]
    assert (mamba["requested_as"], mamba["resolved"]) == (
        "mamba_scheduler_strategy",
        "extra_buffer",
    )
    assert mamba["launch_command"] == "extra_buffer"  # SGLang 0.5.20+ says what it was given
    assert mamba["received_present"] is False

    text = far.orch("diff-effective", name, "--url", url + "/")
    assert text.code == ExitCode.OK
    assert "asked by --url" in text.out
    assert f"asked {url}/server_info from this machine" in text.out
    assert "no drift" in text.out


def test_url_finds_the_incidents_dropped_flag_in_launch_command(
    far: Workspace, by_hand: Start
) -> None:
    url = by_hand(*incident_flags(mamba=False))  # the heredoc lost the flag
    name = incident(far, "dropped", url)
    outcome = far.orch("diff-effective", name, "--json", "--url", url)
    assert outcome.code == ExitCode.DRIFT, outcome.out + outcome.err
    fields = rows(outcome.json())
    mamba = fields["mamba_radix_cache_strategy"]
    assert mamba["verdict"] == "not-received"
    assert mamba["why"] == "SGLang's launch_command lacks it"
    drifted = {field for field, row in fields.items() if row["verdict"] != "ok"}
    assert drifted == {"mamba_radix_cache_strategy"}


def test_url_on_a_release_without_launch_command_shows_the_override(
    far: Workspace, by_hand: Start
) -> None:
    # 0.5.11 refuses EAGLE on this model without extra_buffer and spec v2 (the incident's error)
    spec_v2 = {"SGLANG_ENABLE_SPEC_V2": "1"}
    url = by_hand(
        *incident_flags(draft=8, mamba=False),
        "--mamba-scheduler-strategy",
        "extra_buffer",
        version="0.5.11",
        env=spec_v2,
    )
    name = far.profile(
        "old",
        INCIDENT_SPEC.format(draft=8),
        host="far",
        version="0.5.11",
        port=port_of(url),
        args=INCIDENT_ARGS,
        env=spec_v2,
    )
    outcome = far.orch("diff-effective", name, "--json", "--url", url)
    assert outcome.code == ExitCode.DRIFT, outcome.out + outcome.err
    document = outcome.json()
    assert document["sglang_version"] == "0.5.11"
    fields = rows(document)
    draft = fields["speculative_num_draft_tokens"]
    assert (draft["profile"], draft["resolved"], draft["verdict"]) == (8, 4, "overridden")
    assert draft["launch_command"] is None
    assert fields["mamba_scheduler_strategy"]["verdict"] == "ok"
    assert any("does not report its launch_command" in note for note in document["notes"])


def test_url_sends_the_profiles_api_key_and_never_shows_it(
    far: Workspace, by_hand: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = by_hand(*incident_flags(), "--api-key", KEY)
    with pytest.raises(urllib.error.HTTPError) as refused:  # the stand-in guards it as SGLang does
        urllib.request.urlopen(url + "/server_info", timeout=5)  # noqa: S310
    assert refused.value.code == 401
    name = incident(far, "keyed", url, args={"api_key": {"from_env": "URL_KEY"}})

    unset = far.orch("diff-effective", name, "--url", url)
    assert unset.code == ExitCode.AUTH, unset.out + unset.err
    assert "HTTP 401" in unset.err
    assert "args.api_key (from_env URL_KEY) is not set here" in unset.err

    monkeypatch.setenv("URL_KEY", "sk-not-the-servers")
    wrong = far.orch("diff-effective", name, "--url", url)
    assert wrong.code == ExitCode.AUTH
    assert "the key from args.api_key (from_env URL_KEY) was refused" in wrong.err

    monkeypatch.setenv("URL_KEY", KEY)
    outcome = far.orch("diff-effective", name, "--json", "--url", url)
    assert outcome.code == ExitCode.OK, outcome.out + outcome.err
    assert rows(outcome.json())["api_key"]["profile"] == "<secret>"
    shown = "".join(o.out + o.err for o in (unset, wrong, outcome))
    assert KEY not in shown
    assert "sk-not-the-servers" not in shown


class _Answers(BaseHTTPRequestHandler):
    """Not SGLang: answers every path with ``routes[path]`` (status, body), else 404."""

    routes: ClassVar[dict[str, tuple[int, Any]]]
    seen: ClassVar[list[tuple[str, str | None]]]  # (path, its Authorization header) per request

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization")))
        status, body = self.routes.get(self.path, (404, {"detail": "Not Found"}))
        data = json.dumps(body).encode()
        self.send_response(status)
        if status in (301, 302, 307, 308):
            self.send_header("location", body)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


Serve = Callable[..., str]


@pytest.fixture
def other_server() -> Iterator[Serve]:
    servers: list[ThreadingHTTPServer] = []

    def serve(routes: dict[str, tuple[int, Any]], seen: list[Any] | None = None) -> str:
        handler = type(
            "Routes", (_Answers,), {"routes": routes, "seen": [] if seen is None else seen}
        )
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


def test_url_that_is_not_sglangs_server_info_is_a_distinct_error(
    far: Workspace, other_server: Serve
) -> None:
    worker = other_server({"/health": (200, None)})  # like a group's rank >= 1
    name = incident(far, "elsewhere", worker)
    outcome = far.orch("diff-effective", name, "--url", worker)
    assert outcome.code == ExitCode.NOT_RESOLVED, outcome.err
    assert "answers neither /server_info nor /get_server_info" in outcome.err
    assert "point --url at rank 0" in outcome.err

    router = other_server({"/server_info": (200, {"workers": []})})
    outcome = far.orch("diff-effective", name, "--url", router)
    assert outcome.code == ExitCode.NOT_RESOLVED, outcome.err
    assert "not SGLang's server_info: it names no SGLang version" in outcome.err


def test_url_where_nothing_answers_is_a_connect_error(far: Workspace) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    name = incident(far, "gone", url)
    outcome = far.orch("diff-effective", name, "--url", url)
    assert outcome.code == ExitCode.CONNECT, outcome.err
    assert "cannot reach" in outcome.err
    assert "kubectl port-forward" in outcome.err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--url", "http://127.0.0.1:1", "--pid", "1"], "give one or the other"),
        (["--url", "ftp://127.0.0.1:1"], "expected http://HOST:PORT"),
        (["--url", "127.0.0.1:30000"], "expected http://HOST:PORT"),
        (["--url", "http://admin:hunter2pw@127.0.0.1:1"], "credentials in a URL are not sent"),
        (["--url", "http://127.0.0.1:1/?x=1"], "without ?query"),
        (["--url", "http://127.0.0.1:99999"], "--url http://127.0.0.1:99999"),
        (["--node", "1"], "--node 1: local-one has rank(s) 0-0"),
    ],
)
def test_url_usage_errors_change_nothing_and_hide_credentials(
    far: Workspace, argv: list[str], said: str
) -> None:
    name = far.profile("local-one")  # its own host: a usage error must come before any contact
    outcome = far.orch("diff-effective", name, *argv)
    assert outcome.code == ExitCode.USAGE, outcome.err
    assert said in outcome.err
    assert "hunter2pw" not in outcome.out + outcome.err
    assert not far.deployment_dir(name).exists()


# -- a server that misbehaves (issue 26): each would fool or hang orch before -------------------

SERVER_INFO_0523 = CAPTURES / "server_info-payload-0523-offline.json"


class _Misbehaves(BaseHTTPRequestHandler):
    """Not SGLang: every GET runs ``behave(handler)``; what it managed to send is counted."""

    behave: ClassVar[Callable[[BaseHTTPRequestHandler], None]]
    sent: ClassVar[list[int]]
    paths: ClassVar[list[str]]

    def do_GET(self) -> None:
        self.paths.append(self.path)
        with contextlib.suppress(OSError):
            self.behave()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class Misbehaving:
    url: str
    sent: list[int]  # bytes of body sent per request
    paths: list[str]


@pytest.fixture
def misbehaving() -> Iterator[Callable[[Callable[[Any], None]], Misbehaving]]:
    servers: list[ThreadingHTTPServer] = []

    def serve(behave: Callable[[Any], None]) -> Misbehaving:
        sent: list[int] = []
        paths: list[str] = []
        handler = type(
            "Misbehaving",
            (_Misbehaves,),
            {"behave": behave, "sent": sent, "paths": paths},
        )
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return Misbehaving(f"http://127.0.0.1:{server.server_address[1]}", sent, paths)

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


def _json(handler: Any, document: Any, status: int = 200) -> None:
    data = json.dumps(document).encode()
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def test_url_refuses_json_that_only_echoes_model_path(
    far: Workspace, misbehaving: Callable[..., Misbehaving]
) -> None:
    # a cache or proxy in front that answers for the model: not SGLang's server_info
    proxy = misbehaving(lambda h: _json(h, {"model_path": str(MODEL), "version": "0.5.23"}))
    name = incident(far, "proxied", proxy.url)
    outcome = far.orch("diff-effective", name, "--url", proxy.url)
    assert outcome.code == ExitCode.NOT_RESOLVED, outcome.out + outcome.err
    assert "not SGLang's server_info" in outcome.err
    assert "1 of SGLang 0.5.23's 543 ServerArgs fields" in outcome.err
    assert "no drift" not in outcome.out

    no_version = {**json.loads(SERVER_INFO_0523.read_text()), "version": None}
    unversioned = misbehaving(lambda h: _json(h, no_version))
    outcome = far.orch(
        "diff-effective", incident(far, "nover", unversioned.url), "--url", unversioned.url
    )
    assert outcome.code == ExitCode.NOT_RESOLVED, outcome.out + outcome.err
    assert "no SGLang version" in outcome.err


def test_url_accepts_sglangs_own_server_info(
    far: Workspace, misbehaving: Callable[..., Misbehaving]
) -> None:
    real = json.loads(SERVER_INFO_0523.read_text())  # SGLang 0.5.23's body, rebuilt offline
    server = misbehaving(lambda h: _json(h, real))
    name = far.profile("real", host="far", port=port_of(server.url), args={"tp_size": 1})
    outcome = far.orch("diff-effective", name, "--json", "--url", server.url)
    assert outcome.code in (ExitCode.OK, ExitCode.DRIFT), outcome.err
    assert outcome.json()["resolved_source"] == "/server_info"


def test_url_reads_at_most_the_cap_of_a_huge_body(
    far: Workspace, misbehaving: Callable[..., Misbehaving]
) -> None:
    def flood(handler: Any) -> None:
        handler.send_response(200)
        handler.send_header("content-type", "application/json")
        handler.end_headers()  # no length: the body ends when the connection does
        handler.sent.append(0)
        chunk = b"[" * (1 << 16)
        for _ in range(1024):  # 64 MiB, unless the reader hangs up first
            handler.wfile.write(chunk)
            handler.sent[-1] += len(chunk)

    server = misbehaving(flood)
    name = incident(far, "flood", server.url)
    started = time.monotonic()
    outcome = far.orch("diff-effective", name, "--url", server.url)
    assert outcome.code == ExitCode.NOT_RESOLVED, outcome.err
    assert f"{server.url}/server_info answered more than 4 MiB" in outcome.err
    assert time.monotonic() - started < 10
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and len(server.paths) != len(server.sent):
        time.sleep(0.05)
    assert server.sent[0] < 32 << 20  # orch hung up long before the end


def test_url_refuses_a_declared_length_over_the_cap_without_reading_it(
    far: Workspace, misbehaving: Callable[..., Misbehaving]
) -> None:
    def huge(handler: Any) -> None:
        handler.send_response(200)
        handler.send_header("content-length", str(1_500_000_000))
        handler.end_headers()
        handler.wfile.write(b"{")

    server = misbehaving(huge)
    outcome = far.orch("diff-effective", incident(far, "huge", server.url), "--url", server.url)
    assert outcome.code == ExitCode.NOT_RESOLVED, outcome.err
    assert "1500000000 bytes, more than 4 MiB" in outcome.err


@pytest.mark.parametrize("where", ["body", "headers"])
def test_url_has_one_deadline_for_the_whole_request(
    misbehaving: Callable[..., Misbehaving], where: str
) -> None:
    """A byte every 0.3 s never trips a per-read timeout: only a deadline for the whole
    request ends it (before, a byte every 5 s held diff-effective for as long as it dripped)."""

    def drip(handler: Any) -> None:
        if where == "body":
            handler.send_response(200)
            handler.send_header("content-length", "100000")
            handler.end_headers()
            handler.wfile.flush()
            text = b" " * 100000
        else:
            text = b"HTTP/1.1 200 OK\r\n" + b"x-drip: " + b"." * 100000
        for byte in text[:20]:  # for 6 s, then it hangs up
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()
            time.sleep(0.3)

    server = misbehaving(drip)
    started = time.monotonic()
    with pytest.raises(ConnectError) as failed:
        observe_url(server.url, api_key=(None, "args.api_key"), timeout_s=1.5)
    took = time.monotonic() - started
    assert 1.4 < took < 3.0, took
    assert f"{server.url}/server_info: no whole answer within 1.5 s" in failed.value.message


def test_url_refuses_a_redirect_to_another_server_and_sends_it_nothing(
    far: Workspace, other_server: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, str | None]] = []
    elsewhere = other_server({"/server_info": (200, {"model_path": "x"})}, seen)
    redirecting = other_server({"/server_info": (302, elsewhere + "/server_info")}, seen)
    monkeypatch.setenv("URL_KEY", KEY)
    name = incident(far, "redirected", redirecting, args={"api_key": {"from_env": "URL_KEY"}})
    outcome = far.orch("diff-effective", name, "--url", redirecting)
    assert outcome.code == ExitCode.NOT_RESOLVED, outcome.err
    assert (
        f"{redirecting}/server_info redirects (HTTP 302) to {elsewhere}/server_info, another "
        "server: not followed"
    ) in outcome.err
    assert seen == [("/server_info", f"Bearer {KEY}")]  # the other server was never asked
    assert KEY not in outcome.out + outcome.err


def test_url_follows_a_redirect_on_the_same_server_and_says_so(
    far: Workspace, misbehaving: Callable[..., Misbehaving]
) -> None:
    real = json.loads(SERVER_INFO_0523.read_text())

    def moved(handler: Any) -> None:
        if handler.path == "/server_info":
            handler.send_response(307)
            handler.send_header("location", "/sglang/server_info")
            handler.send_header("content-length", "0")
            handler.end_headers()
        else:
            _json(handler, real)

    server = misbehaving(moved)
    name = far.profile("moved", host="far", port=port_of(server.url), args={"tp_size": 1})
    outcome = far.orch("diff-effective", name, "--json", "--url", server.url)
    assert outcome.code in (ExitCode.OK, ExitCode.DRIFT), outcome.err
    assert server.paths == ["/server_info", "/sglang/server_info"]
    said = f"{server.url}/server_info redirected (HTTP 307) to /sglang/server_info: followed"
    assert any(note.startswith(said) for note in outcome.json()["notes"])


def test_url_refuses_a_deeply_nested_body(
    far: Workspace, misbehaving: Callable[..., Misbehaving]
) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000  # RecursionError, exit 70, before

    def nested(handler: Any) -> None:
        handler.send_response(200)
        handler.send_header("content-length", str(len(deep)))
        handler.end_headers()
        handler.wfile.write(deep)

    server = misbehaving(nested)
    outcome = far.orch("diff-effective", incident(far, "deep", server.url), "--url", server.url)
    assert outcome.code == ExitCode.NOT_RESOLVED, outcome.err
    assert "nested more than 32 levels deep" in outcome.err
    assert "internal error" not in outcome.err


@pytest.mark.parametrize(
    ("lock", "got"),
    [
        ("[]", "a list"),
        ('"orch.lock/1"', "a str"),
        ('{"format": "orch.lock/1", "sglang": "0.5.23", "effective": [1]}', "effective: a list"),
        ('{"format": "orch.lock/1", "sglang": 523, "effective": {}}', "sglang: an int"),
        ('{"sglang": "0.5.23", "effective": {}}', "format: missing"),
    ],
)
def test_a_lock_of_the_wrong_shape_is_an_error_not_a_skipped_check(
    far: Workspace, misbehaving: Callable[..., Misbehaving], lock: str, got: str
) -> None:
    """Before, a lock that was a list or held wrong types made diff-effective skip the lock
    check without a word and say "no drift"."""
    real = json.loads(SERVER_INFO_0523.read_text())
    server = misbehaving(lambda h: _json(h, real))
    name = far.profile("locked", host="far", port=port_of(server.url), args={"tp_size": 1})
    (far.profiles / "locked.lock.json").write_text(lock)
    outcome = far.orch("diff-effective", name, "--url", server.url)
    assert outcome.code == ExitCode.CONFIG, outcome.out + outcome.err
    assert f"{far.profiles}/locked.lock.json: expected an orch.lock/1 object" in outcome.err
    assert f"got {got}" in outcome.err
    assert "orch: hint: orch lock locked" in outcome.err
    assert outcome.out == ""


def test_escape_sequences_in_server_info_never_reach_the_terminal(
    far: Workspace, misbehaving: Callable[..., Misbehaving]
) -> None:
    hostile = {
        **json.loads(SERVER_INFO_0523.read_text()),
        "model_path": "/models/m\x1b]0;owned\x07\x1b[2J",
        "launch_command": "--model-path /m --\x1b[31mevil\x9b1m 1",
    }
    server = misbehaving(lambda h: _json(h, hostile))
    name = far.profile("hostile", host="far", port=port_of(server.url), args={"tp_size": 1})
    for argv in ((), ("--wide",), ("--json",)):
        outcome = far.orch("diff-effective", name, "--url", server.url, *argv)
        assert outcome.code in (ExitCode.DRIFT, ExitCode.OK), outcome.err
        shown = outcome.out + outcome.err
        assert not {"\x1b", "\x07", "\x9b"} & set(shown), argv
        if argv == ("--wide",):
            assert "/models/m\\u001b]0;owned\\u0007\\u001b[2J" in shown
        if argv == ("--json",):
            document = outcome.json()  # still JSON, the values unchanged
            fields = {row["field"]: row for row in document["fields"]}
            assert fields["model_path"]["resolved"] == hostile["model_path"]
