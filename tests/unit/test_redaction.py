"""Secrets never reach orch's output: every written form of a secret is replaced, and a secret
split across writes is replaced whole (the stream holds back a tail that could start one)."""

from __future__ import annotations

import io
import json
import urllib.parse

import pytest

from orchestrator.cli.main import main
from orchestrator.cli.output import RedactingStream
from orchestrator.errors import ExitCode
from orchestrator.render import Redactor
from tests.conftest import ProfileDir

SECRET = "hf_Tok\"en\\with'quotes-and-ü"  # noqa: S105 - made up, with every character to escape
MASK = "<redacted: from_env HF_TOKEN>"


def _stream() -> tuple[io.StringIO, RedactingStream]:
    target = io.StringIO()
    return target, RedactingStream(target, Redactor({"HF_TOKEN": SECRET}))


@pytest.mark.parametrize(
    "written",
    [
        SECRET,
        json.dumps(SECRET)[1:-1],
        json.dumps(SECRET, ensure_ascii=False)[1:-1],
        json.dumps(json.dumps(SECRET))[1:-1],
        repr(SECRET)[1:-1],
        urllib.parse.quote(SECRET, safe=""),
    ],
    ids=["raw", "json", "json-unicode", "json-in-json", "repr", "url"],
)
def test_every_written_form_of_a_secret_is_replaced(written: str) -> None:
    shown = Redactor({"HF_TOKEN": SECRET})(f"server_args=ServerArgs(token='{written}') done")
    assert written not in shown
    assert MASK in shown


_ENCODINGS = {
    "json": lambda text: json.dumps(text)[1:-1],
    "json-unicode": lambda text: json.dumps(text, ensure_ascii=False)[1:-1],
    "repr": lambda text: repr(text)[1:-1],
    "url": lambda text: urllib.parse.quote(text, safe=""),
}


@pytest.mark.parametrize("outer", sorted(_ENCODINGS))
@pytest.mark.parametrize("inner", sorted(_ENCODINGS))
def test_a_secret_written_through_two_encodings_is_replaced(inner: str, outer: str) -> None:
    # SGLang logs its config as a Python repr; orch's --json then writes that line as JSON:
    # a secret with both " and \ came out of plan/status/runs --json in clear (issue 26)
    written = _ENCODINGS[outer](_ENCODINGS[inner](SECRET))
    shown = Redactor({"HF_TOKEN": SECRET})(f'{{"line": "server_args=ServerArgs(t={written})"}}')
    assert written not in shown
    assert MASK in shown


def test_a_secret_written_through_three_encodings_is_replaced() -> None:
    written = json.dumps(json.dumps(repr(SECRET)))
    shown = Redactor({"HF_TOKEN": SECRET})(written)
    assert MASK in shown, shown


def test_a_secret_inside_another_is_replaced_whole_in_every_form() -> None:
    outer, inner = "pre-" + SECRET + "-post", SECRET
    shown = Redactor({"A": inner, "B": outer})(json.dumps(repr(outer)))
    assert "pre-" not in shown
    assert "<redacted: from_env B>" in shown


def test_each_line_of_a_multi_line_secret_is_replaced() -> None:
    key = "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEF\n-----END KEY-----"
    shown = Redactor({"SSL_KEY": key})("line one\nMIIEvQIBADANBgkqhkiG9w0BAQEF\nline three")
    assert "MIIEvQIBADANBgkqhkiG9w0BAQEF" not in shown


def test_a_secret_written_in_two_pieces_is_replaced_whole() -> None:
    target, stream = _stream()
    stream.write("token: " + SECRET[:5])
    assert SECRET[:5] not in target.getvalue()  # held back: it could be the start of one
    stream.write(SECRET[5:] + " end\n")
    stream.close()
    assert target.getvalue() == f"token: {MASK} end\n"


def test_a_secret_split_across_many_one_character_writes_is_replaced() -> None:
    target, stream = _stream()
    for character in f"a {SECRET} b":
        stream.write(character)
        stream.flush()  # flushing the stream never releases a held-back tail
    stream.close()
    assert target.getvalue() == f"a {MASK} b"


def test_a_held_back_tail_that_is_no_secret_is_written_at_close() -> None:
    target, stream = _stream()
    stream.write("ends with hf_To")
    stream.close()
    assert target.getvalue() == "ends with hf_To"


def test_text_without_a_secret_start_passes_at_once() -> None:
    target, stream = _stream()
    stream.write("READY in 1.9 s\n")
    assert target.getvalue() == "READY in 1.9 s\n"


def test_an_unexpected_error_is_one_line_and_exit_70(
    profile_dir: ProfileDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.profile import store as profile

    def broken(self: object, name: str) -> None:
        raise RuntimeError(f"boom while loading {name}")

    monkeypatch.setattr(profile.ProfileStore, "load", broken)
    out, err = io.StringIO(), io.StringIO()
    code = main(["--profiles", str(profile_dir.root), "render", "x"], out=out, err=err)
    assert code == ExitCode.INTERNAL
    assert err.getvalue().splitlines()[0] == (
        "orch: error: internal error: RuntimeError: boom while loading x"
    )
    assert "--debug" in err.getvalue()
    assert "Traceback" not in err.getvalue()


# -- secrets found in a launch script (orch import) -----------------------------------------------


def test_every_value_found_under_one_name_is_replaced() -> None:
    """--api-key given twice: both values are secrets, not only the first one recorded."""
    redact = Redactor()
    redact.add_found([("API_KEY", "sk-first-value-1234"), ("API_KEY", "sk-second-value-5678")])
    shown = redact("first sk-first-value-1234, then sk-second-value-5678")
    assert "sk-first-value-1234" not in shown
    assert "sk-second-value-5678" not in shown


def test_a_short_found_secret_is_replaced_where_it_stands_alone_only() -> None:
    """A six-character API key is masked as a word, not inside a path or a longer word."""
    redact = Redactor()
    redact.add_found([("API_KEY", "abc123")])
    assert redact("--api-key abc123\n") == "--api-key <redacted: API_KEY>\n"
    assert redact("key='abc123'") == "key='<redacted: API_KEY>'"
    assert redact("/data/abc1234/x and xabc123") == "/data/abc1234/x and xabc123"


def test_a_found_value_too_short_to_be_a_credential_is_left_alone() -> None:
    """`--api-key eva`: masking three letters would mangle every word that holds them; the
    value itself is never written (import writes {from_env: API_KEY}) nor quoted by import."""
    redact = Redactor()
    redact.add_found([("API_KEY", "eva")])
    assert redact("s-18-eva-prefix.sh") == "s-18-eva-prefix.sh"


def test_a_short_found_secret_split_across_writes_is_still_replaced() -> None:
    target = io.StringIO()
    redact = Redactor()
    redact.add_found([("API_KEY", "abc123")])
    stream = RedactingStream(target, redact)
    for piece in ("--api-key ab", "c12", "3 done"):
        stream.write(piece)
    stream.close()
    assert target.getvalue() == "--api-key <redacted: API_KEY> done"
