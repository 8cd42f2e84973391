"""SGLang's live-change endpoints, as the imitated release answers them (read in 0.5.11's and
0.5.23's srt/entrypoints/http_server.py and the managers they call):

- ``POST /configure_logging`` (``ConfigureLoggingReq``): 200 with an empty body; the tokenizer
  manager logs ``Config logging: obj=ConfigureLoggingReq(...)`` (the request as Python writes
  it; keys the release's request lacks are dropped, as its body model drops them: 0.5.11 has no
  ``log_level``). The request logger it changes is no server argument: ``/server_info`` keeps
  the startup values, in SGLang and here.
- ``POST /set_internal_state`` (``{"server_args": {...}}``): one boolean per DP rank (the
  tokenizer manager's ``[res.updated for res in responses]``); ``false`` when the scheduler
  refuses: a key it cannot update, ``pp_max_micro_batch_size`` outside ``[1,
  max_running_requests // pp_size]``. Once updated, every scheduler's view
  (``/server_info``'s ``internal_states``) shows the values; the top-level fields stay the
  startup's (0.5.11 sets the scheduler's global server args, 0.5.23 overrides its resolved
  ones; the tokenizer manager's ServerArgs is never touched).
"""

from __future__ import annotations

from typing import Any

# ConfigureLoggingReq's fields in order (BaseReq's rid and http_worker_ipc first)
LOGGING_FIELDS_0511 = (
    "rid",
    "http_worker_ipc",
    "log_requests",
    "log_requests_level",
    "log_requests_format",
    "dump_requests_folder",
    "dump_requests_threshold",
    "crash_dump_folder",
)
LOGGING_FIELDS_0523 = (
    "rid",
    "http_worker_ipc",
    "log_requests",
    "log_requests_level",
    "log_requests_format",
    "log_level",
    "dump_requests_folder",
    "dump_requests_threshold",
    "crash_dump_folder",
    "dump_requests_exclude_meta_keys",
)
# 0.5.11 scheduler.set_internal_state's args_allow_update; 0.5.23 internal_state.py's
# _update_handlers (its dspark_* keys are worker commands the stand-in has no worker for)
UPDATABLE = (
    "pp_max_micro_batch_size",
    "speculative_accept_threshold_single",
    "speculative_accept_threshold_acc",
)


def logging_line(body: dict[str, Any], version: tuple[int, ...]) -> str:
    """The tokenizer manager's ``Config logging: {obj=}`` line for this request."""
    names = LOGGING_FIELDS_0523 if version >= (0, 5, 23) else LOGGING_FIELDS_0511
    fields = ", ".join(f"{name}={body.get(name)!r}" for name in names)
    return f"Config logging: obj=ConfigureLoggingReq({fields})"


def update_internal_state(
    body: dict[str, Any], max_running_requests: int, pp_size: int, overrides: dict[str, Any]
) -> tuple[bool, str | None]:
    """The scheduler's verdict on ``{"server_args": {...}}``, ``overrides`` updated when it
    accepts; the warning it logs when it refuses. ``max_running_requests``: the scheduler's
    own (after the KV cap), as SGLang's bound reads it."""
    requested = body.get("server_args")
    if not isinstance(requested, dict):
        return False, "server_args: field required"
    upper = max_running_requests // max(pp_size, 1)
    for key, value in requested.items():
        if key not in UPDATABLE:
            return False, f"Updating {key} is not supported."
        if key == "pp_max_micro_batch_size" and not 1 <= value <= upper:
            return False, (
                f"Updating {key} to {value} is rejected because it is out of the valid range "
                f"[1, {upper}]."
            )
    overrides.update(requested)
    return True, None
