"""Why a server process ended, read from its exit status and its last lines (classify_exit):
the decisive evidence only (tests/fixtures/crashlogs/README.md): the exceptions that ended a
process (type and message, chained causes included, "During handling" ones superseded), what
SGLang itself logs when a process of the server fails, the signal, and how far the startup got.
Never from ordinary log text: SGLang's server_args= dump holds nccl_port and watchdog_timeout,
NCCL INFO lines and "sglang is using nccl==2.27.3" are chatter. The marks and patterns it
matches are classify_rules.py's, each with its source."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import NamedTuple

from . import classify_rules as rules
from .sglang_log import EXCEPTION_LINE, config_line_payload, log_record, strip_log_prefix
from .verdict import (
    CONFIG_ERROR,
    CRASHED,
    CUDA_OOM,
    IMPORT_ERROR,
    KERNEL_ERROR,
    KILLED,
    LOST,
    MODEL_NOT_FOUND,
    NCCL,
    PORT_IN_USE,
    ExitVerdict,
    restart_for,
)


def exit_record(
    run_id: str, returncode: int, verdict: ExitVerdict, *, at: float, was_ready: bool
) -> dict[str, object]:
    """A run's end as state.json's ``last_exit`` and the ``exit`` event say it."""
    return {
        "run_id": run_id,
        "returncode": returncode,
        "signal": signal_name(-returncode) if returncode < 0 else None,
        "class": verdict.cls,
        "message": verdict.message,
        "restart_helps": verdict.restart_helps,
        "restart_why": verdict.restart_why,
        "at": at,
        "was_ready": was_ready,
        "swept_pids": [],
    }


def run_ending(
    returncode: int,
    tail: Sequence[str] | None,
    *,
    stopped: ExitVerdict | None,
    ended_by: ExitVerdict | None,
    saw_config_line: bool,
    was_ready: bool,
) -> ExitVerdict:
    """How a watched run ended: the stop that was asked for (``stopped``, unless the
    supervisor had ended it itself), the supervisor's own verdict (``ended_by``: hung, not READY
    in time, the group's), an adopted server's end (``tail`` None: its output went with the
    supervisor that died), else its exit classified."""
    if stopped is not None and ended_by is None:
        return stopped
    if ended_by is not None:
        return ended_by
    if tail is None:
        return ExitVerdict(
            LOST,
            "the adopted server ended; its exit status and last lines are unknown (it was "
            "not this supervisor's child, and its output went with the one that died)",
        )
    return classify_exit(returncode, tail, saw_config_line=saw_config_line, was_ready=was_ready)


def classify_exit(
    returncode: int, tail: Sequence[str], *, saw_config_line: bool, was_ready: bool
) -> ExitVerdict:
    """Why a server process ended (its class and the line that says so), and whether starting it
    again can end otherwise (``restart``: restart_for the class and the phase it reached)."""
    happened = _what_happened(
        returncode, tail, saw_config_line=saw_config_line, was_ready=was_ready
    )
    return replace(happened, restart=restart_for(happened.cls, was_ready=was_ready))


def _what_happened(
    returncode: int, tail: Sequence[str], *, saw_config_line: bool, was_ready: bool
) -> ExitVerdict:
    """Why a server process ended, from its exit status and the last lines it printed.

    In order (formats: docs/sglang-facts.md §2, tests/fixtures/crashlogs/):
    argparse's usage error with exit 2; an exception (Python, a C++ ``terminate``, a torch
    NCCL watchdog record) whose type and message name a specific cause, the root cause first
    (import, model, port, a configuration SGLang asserts against, CUDA memory, a GPU kernel,
    then NCCL, which other ranks' failures also cause);
    a process of the server that SGLang reports dead by a signal; a signal from outside;
    any other exception: a configuration error when the main process raised it before SGLang
    accepted its configuration (the incident's ValueError), else a crash.
    """
    lines = [_plain(line) for line in tail]
    number = _signal_number(returncode)
    if returncode == 2:
        usage = _argparse_error(tail)
        if usage is not None:
            return ExitVerdict(CONFIG_ERROR, usage)
    failures = _failures(tail, lines)
    # A server that was READY had its configuration accepted and served: an assertion of its
    # sizes then is about a request, no verdict on the configuration.
    specific = [
        f for f in failures if f.cls is not None and not (was_ready and f.cls == CONFIG_ERROR)
    ]
    if specific:
        cause = min(specific, key=lambda f: (_CAUSE_ORDER.index(f.cls or ""), -f.line))
        return ExitVerdict(cause.cls or CRASHED, cause.text)
    self_kill = _last_index(lines, rules.SELF_KILL_MARKS)
    if self_kill is None:
        # A traceback through a subprocess's entry point is SGLang's own failure even when the
        # excerpt lost the line it logs before it kills its tree: the -9 is its self-kill.
        self_kill = _last_match(lines, rules.SUBPROCESS_FRAME)
    if self_kill is None:
        self_kill = _last_match(lines, rules.COMPONENT_FAILED)
    dead_child = _dead_child(lines)
    if dead_child is not None:
        index, child_signal, text = dead_child
        # SGLang SIGKILLs its own processes after a failure it saw: a child's death reported
        # after that is the consequence, not the cause.
        if self_kill is None or self_kill > index:
            name = signal_name(child_signal)
            if child_signal not in rules.EXTERNAL_SIGNALS:  # SIGSEGV, SIGBUS, SIGABRT: it crashed
                return ExitVerdict(CRASHED, f"{text}: crashed with {name}")
            why = " (the kernel's OOM killer, or kill -9)" if child_signal == signal.SIGKILL else ""
            return ExitVerdict(KILLED, f"{text}: killed by {name}{why}")
    # abort() ends a process after the failure it reports (a C++ exception's what(), a CUDA
    # error): that failure, when the tail shows one, says more than "Aborted"
    said = [f for f in failures if f.text != rules.ABORTED] or failures
    generic = said[-1] if said else None
    external = _last_index(lines, rules.EXTERNAL_STOP_MARKS)
    if number in rules.EXTERNAL_SIGNALS or external is not None:
        if external is not None:
            return ExitVerdict(KILLED, lines[external])
        if self_kill is None and (generic is None or generic.process == "main"):
            # An exception SGLang did not die of (it logs its self-kill when one does).
            why = " (the kernel's OOM killer, or kill -9)" if number == signal.SIGKILL else ""
            return ExitVerdict(KILLED, f"killed by {signal_name(number or 0)}{why}")
        if generic is None and self_kill is not None:
            return ExitVerdict(CRASHED, lines[self_kill])
    if generic is not None:
        past_config = saw_config_line or was_ready or _past_config(tail)
        if not past_config and generic.process == "main" and generic.python:
            return ExitVerdict(CONFIG_ERROR, generic.text)
        return ExitVerdict(CRASHED, generic.text)
    if number is not None:
        return ExitVerdict(CRASHED, f"crashed with {signal_name(number)}")
    if self_kill is not None:
        return ExitVerdict(CRASHED, lines[self_kill])
    return ExitVerdict(CRASHED, f"exited with code {returncode}")


# The root cause first: a rank's CUDA OOM, kernel fault or crash makes the other ranks'
# collectives fail.
_CAUSE_ORDER = (
    IMPORT_ERROR,
    MODEL_NOT_FOUND,
    PORT_IN_USE,
    CONFIG_ERROR,
    CUDA_OOM,
    KERNEL_ERROR,
    NCCL,
)


class _Failure(NamedTuple):
    line: int  # its index in the tail
    text: str  # what the verdict shows: ``ExcType: message`` as printed
    cls: str | None  # the specific cause it names, None for any other exception
    process: str  # "main", a rank ("TP3", "DP1 TP0") or "scheduler" when SGLang said so
    python: bool  # a Python exception (not a fatal signal, a C++ abort or uvicorn's error)


def _plain(line: str) -> str:
    """A line without SGLang's record prefix, torch's ``[rankN]:`` prefix and outer blanks."""
    return rules.TORCH_RANK.sub("", strip_log_prefix(line.rstrip("\r\n")), count=1)


def _failures(tail: Sequence[str], lines: Sequence[str]) -> list[_Failure]:
    """Every failure the tail shows, in order: exceptions that ended a traceback (those the
    next one was raised "during handling" of are dropped), C++ terminations, torch's NCCL
    watchdog records, uvicorn's bind errors."""
    found: list[_Failure] = []
    process = "main"
    for index, text in enumerate(lines):
        record = log_record(tail[index])
        if record is not None and "hit an exception" in record.message:
            process = record.rank or "scheduler"
        elif record is not None:
            process = record.rank or "main"
        elif process == "main" and rules.SUBPROCESS_FRAME.search(text):
            process = "scheduler"  # a traceback through a subprocess's entry point
        elif rules.COMPONENT_FAILED.match(text):
            process = "scheduler"  # SGLang 0.1-0.3's report of one of its processes
        failure = _failure_at(index, text, tail, lines)
        if failure is not None:
            exc_type, shown, detail = failure
            cls = _specific_class(
                exc_type,
                detail,
                at_import=_raised_at_import(index, lines),
                in_kernel_library=_raised_in_kernel_library(index, lines),
                in_compiled_op=_raised_in_compiled_op(index, lines),
                reading_model=_raised_reading_model(index, lines),
                importing=_raised_while_importing(index, lines),
            )
            python = bool(EXCEPTION_LINE.match(shown)) or _is_exception_line(index, lines)
            found.append(_Failure(index, shown, cls, process, python))
    return found


def _failure_at(
    index: int, text: str, tail: Sequence[str], lines: Sequence[str]
) -> tuple[str, str, str] | None:
    """(type, text to show, lowered text to match) when line ``index`` states a failure."""
    if _is_exception_line(index, lines):
        exc_type = text.split(":", 1)[0]
        if exc_type.endswith("Warning") or _superseded(index, tail, lines):
            return None
        return exc_type, text, _message(index, tail, lines)
    if text.startswith(rules.CUDA_ERROR_TRAILER) and (
        index == 0 or not EXCEPTION_LINE.match(lines[index - 1])
    ):  # the trailer follows its error's line at once: without one, the excerpt lost it
        named = rules.NAMED_DEVICE_ERROR.search(lines[index - 1]) if index else None
        if named is not None:  # on another record's line (torch's watchdog, glued output)
            return "named CUDA error", named.group(0), named.group(0).lower()
        return rules.ORPHAN_CUDA_ERROR, text, text.lower()
    terminate = rules.CPP_TERMINATE.match(text)
    if terminate is not None:  # a C++ exception: its what() follows
        what = next((t for t in lines[index + 1 : index + 4] if t.startswith("what():")), "")
        detail = f"{text} {what}".lower()
        return terminate.group("type"), (what or text), detail
    if rules.DEVICE_ASSERT.search(text):  # a kernel's own assert(), printed by CUDA
        return "device-side assert", text, "device-side assert triggered"
    check = rules.CHECK_MACRO.search(text)
    if check is not None:  # its text as torch words the same error: "CUDA error: ..."
        return "CUDACHECK", text[check.start() :], f"{check['lib']} error: {check['what']}".lower()
    call = rules.FLASHINFER_CUDA_CALL.search(text)
    if call is not None:
        return "CUDACHECK", text[call.start() :], f"cuda error: {call['what']}".lower()
    if text.startswith("Fatal Python error: "):
        return "Fatal Python error", text, text.lower()
    record = rules.TORCH_ERROR_RECORD.search(text)
    if record is not None and "watchdog caught collective operation timeout" in text.lower():
        shown = text[record.end() :]
        return "c10::DistBackendError", shown, shown.lower()
    uvicorn = rules.UVICORN_ERROR.match(text)
    if uvicorn is not None:
        return "uvicorn", text, text.lower()
    return None


def _message(index: int, tail: Sequence[str], lines: Sequence[str]) -> str:
    """The exception line and the lines its message continues on (a few at most), lowered."""
    parts = [lines[index]]
    for later in range(index + 1, min(index + 8, len(lines))):
        text = lines[later]
        if not text or text.startswith(("Traceback", "File ")) or EXCEPTION_LINE.match(text):
            break
        if log_record(tail[later]) is not None or rules.TORCH_ERROR_RECORD.match(text):
            break
        if rules.CHAIN_SUPERSEDED in text.lower() or text.startswith("The above exception"):
            break
        parts.append(text)
    return " ".join(parts).lower()


def _superseded(index: int, tail: Sequence[str], lines: Sequence[str]) -> bool:
    """Raised while handling this exception, another one followed and ended the process. When
    the excerpt ends before that other one, this one is the best evidence there is."""
    for later in range(index + 1, min(index + 10, len(lines))):
        text = lines[later]
        if rules.CHAIN_SUPERSEDED in text.lower():
            return any(EXCEPTION_LINE.match(after) for after in lines[later + 1 :])
        if text.startswith(("Traceback", "The above exception")) or log_record(tail[later]):
            return False
    return False


def _innermost_frame(index: int, lines: Sequence[str]) -> re.Match[str] | None:
    """The last ``File "...", line N, in f`` line of the traceback ending at line ``index``."""
    for earlier in range(index - 1, max(index - 6, -1), -1):
        frame = rules.FRAME.match(lines[earlier])
        if frame is not None:
            return frame
    return None


def _raised_at_import(index: int, lines: Sequence[str]) -> bool:
    """The traceback ending at line ``index`` was raised by a module's own top level: its
    innermost frame is ``in <module>`` (an import running), not a function it called."""
    frame = _innermost_frame(index, lines)
    return frame is not None and frame.group("function") == "<module>"


def _traceback_frames(index: int, lines: Sequence[str]) -> list[re.Match[str]]:
    """The ``File "...", line N, in f`` lines of the traceback ending at line ``index``, outermost
    first (back to its ``Traceback (most recent call last)`` line, 300 lines at most)."""
    frames: list[re.Match[str]] = []
    for earlier in range(index - 1, max(index - 300, -1), -1):
        if "Traceback (most recent call last)" in lines[earlier]:
            break
        frame = rules.FRAME.match(lines[earlier])
        if frame is not None:
            frames.append(frame)
    return frames[::-1]


def _raised_reading_model(index: int, lines: Sequence[str]) -> bool:
    """The traceback ending at line ``index`` passes through code that reads the model's files."""
    return any(
        rules.MODEL_FILE_READERS.search(f.group("path")) for f in _traceback_frames(index, lines)
    )


def _raised_while_importing(index: int, lines: Sequence[str]) -> bool:
    """The traceback ending at line ``index`` runs inside an import: a module's top level below
    the entry point's own (``in <module>`` past the first), or importlib's machinery."""
    frames = _traceback_frames(index, lines)
    tops = [f for f in frames if f.group("function") == "<module>"]
    return len(tops) > 1 or any("importlib._bootstrap" in f.group("path") for f in frames)


def _raised_in_kernel_library(index: int, lines: Sequence[str]) -> bool:
    """The traceback ending at line ``index`` was raised by a GPU kernel library's own code."""
    frame = _innermost_frame(index, lines)
    return frame is not None and rules.KERNEL_LIBRARY.search(frame.group("path")) is not None


def _raised_in_compiled_op(index: int, lines: Sequence[str]) -> bool:
    """The traceback ending at line ``index`` was raised by a call of a compiled op."""
    frame = _innermost_frame(index, lines)
    return frame is not None and rules.COMPILED_OP.search(frame.group("path")) is not None


def _is_exception_line(index: int, lines: Sequence[str]) -> bool:
    """Line ``index`` states the exception that ends a traceback: ``ExcType: message``, or right
    after a frame ``module.Name: message`` whatever the class is called (Python prints every
    exception so: huggingface_hub's OfflineModeIsEnabled has no usual suffix)."""
    if EXCEPTION_LINE.match(lines[index]):
        return True
    if rules.QUALIFIED_EXCEPTION.match(lines[index]) is None:
        return False
    earlier = index - 1
    while earlier >= 0 and rules.CARETS.fullmatch(lines[earlier]):
        earlier -= 1  # the ^^^ markers under the frame's source line
    return any(rules.FRAME.match(lines[i]) for i in (earlier, earlier - 1) if i >= 0)


def _specific_class(
    exc_type: str,
    detail: str,
    *,
    at_import: bool = False,
    in_kernel_library: bool = False,
    in_compiled_op: bool = False,
    reading_model: bool = False,
    importing: bool = False,
) -> str | None:
    """The cause an exception names by its type and message (and, for an AttributeError or a
    failed check, where it was raised), if it names one."""
    name = exc_type.rsplit(".", 1)[-1].rsplit(":", 1)[-1]
    if (
        name in ("ModuleNotFoundError", "ImportError")
        or (name == "OSError" and ("undefined symbol" in detail or "shared object file" in detail))
        # a module's top level reading what its dependency lacks (a torch, transformers or
        # sgl_kernel of another release), or an import circle
        or (name == "AttributeError" and (at_import or "partially initialized module" in detail))
        # a module of another release than its caller's (vllm._custom_ops without silu_and_mul)
        or (name == "AttributeError" and rules.MODULE_LACKS.match(detail) is not None)
        or rules.OP_SIGNATURE_MISFIT.search(detail) is not None
        # packages that do not fit together fail while one imports another (transformers
        # refusing SGLang's registration of a name it already has)
        or (importing and name in rules.IMPORT_TIME_MISFITS)
        # SGLang's assert_pkg_version: "<pkg> with minimum required version V is not installed",
        # "<pkg> is installed with version U, which is less than the minimum required version V"
        or "minimum required version" in detail
        # a library's own words for a package it needs (FastAPI: 'Form data requires
        # "python-multipart" to be installed.')
        or rules.REQUIRES_PACKAGE.search(detail) is not None
    ):
        return IMPORT_ERROR
    if (
        name in rules.MISSING_MODEL_TYPES
        or any(mark in detail for mark in rules.MISSING_MODEL_MARKS)
        or (name == "JSONDecodeError" and reading_model)
        or rules.HUB_HTTP_ERROR.search(detail)
    ):
        return MODEL_NOT_FOUND
    if any(mark in detail for mark in rules.PORT_MARKS) or rules.PORT_WAIT.search(detail):
        return PORT_IN_USE
    if name == "OutOfMemoryError" or any(mark in detail for mark in rules.OOM_MARKS):
        return CUDA_OOM
    if (
        name in rules.KERNEL_TYPES
        or exc_type == rules.ORPHAN_CUDA_ERROR
        or any(mark in detail for mark in rules.KERNEL_MARKS)
        or rules.MARLIN_SHAPE.search(detail)
        or (in_kernel_library and name in rules.KERNEL_LIBRARY_CHECKS)
        or rules.KERNEL_LIBRARY_ERROR.search(detail) is not None
        or (in_compiled_op and name == "RuntimeError" and not _names_nccl(detail))
        or (name == "CalledProcessError" and rules.COMPILER_FAILED.search(detail) is not None)
    ):
        return KERNEL_ERROR
    if name in ("AssertionError", "ValueError") and (
        rules.PARALLEL_CHECK.search(detail) or rules.QUANTIZATION_CHECK.search(detail)
    ):
        return CONFIG_ERROR
    if (name in rules.NCCL_TYPES and rules.CARRIES_CUDA_ERROR not in detail) or _names_nccl(detail):
        return NCCL
    return None


def _names_nccl(detail: str) -> bool:
    return any(mark in detail for mark in rules.NCCL_MARKS)


def _argparse_error(tail: Sequence[str]) -> str | None:
    for line in reversed(tail):
        text = line.strip()
        if log_record(text) is None and rules.ARGPARSE_ERROR.match(text):
            return text
    return None


def _dead_child(lines: Sequence[str]) -> tuple[int, int, str] | None:
    """(line, signal, SGLang's line) when SGLang reported a process of the server dead by a
    signal; the last such report."""
    found: tuple[int, int, str] | None = None
    for index, text in enumerate(lines):
        child = rules.CHILD_FAILED.search(text)
        status = int(child.group(1)) if child else 0
        if child and status & 0x7F in rules.REPORTED_SIGNALS:  # the raw wait status of waitpid
            found = (index, status & 0x7F, text)
        died = rules.SCHEDULER_DIED.search(text)
        if died and -int(died.group("code")) in rules.REPORTED_SIGNALS:
            found = (index, -int(died.group("code")), text[: died.end()])
        if rules.SCHEDULER_DEAD.search(text):
            for later in lines[index + 1 : index + 4]:
                code = rules.EXIT_CODE.search(later)
                if code and -int(code.group("code")) in rules.REPORTED_SIGNALS:
                    found = (index, -int(code.group("code")), text)
                    break
    return found


def _past_config(tail: Sequence[str]) -> bool:
    """The tail shows SGLang past accepting its configuration: its config line, or any record
    of a scheduler process (they are started after it)."""
    for line in tail:
        record = log_record(line)
        if record is not None and (record.rank is not None or config_line_payload(line)):
            return True
    return False


def _last_match(lines: Sequence[str], pattern: re.Pattern[str]) -> int | None:
    for index in range(len(lines) - 1, -1, -1):
        if pattern.search(lines[index]):
            return index
    return None


def _last_index(lines: Sequence[str], marks: Iterable[str]) -> int | None:
    wanted = tuple(marks)
    for index in range(len(lines) - 1, -1, -1):
        lowered = lines[index].lower()
        if any(mark in lowered for mark in wanted):
            return index
    return None


def _signal_number(returncode: int) -> int | None:
    """The signal that ended the process: -N from Python, 128+N as a shell or container says."""
    if returncode < 0:
        return -returncode
    if returncode - 128 in rules.REPORTED_SIGNALS:
        return returncode - 128
    return None


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
