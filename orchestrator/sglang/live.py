"""The ServerArgs fields a running SGLang server can change without a restart, per release.

Read from each release's own source (docs/review.md says where):

- ``POST /configure_logging`` (``ConfigureLoggingReq`` in ``srt/managers/io_struct.py``):
  ``log_requests``, ``log_requests_level``, ``log_requests_format``, ``crash_dump_folder`` in
  0.5.11 and 0.5.23; 0.5.23 added ``log_level``. (Its ``dump_requests_*`` keys are no server
  arguments: no profile sets them.)
- ``POST /set_internal_state`` (the scheduler's ``set_internal_state``: 0.5.11's
  ``args_allow_update``, 0.5.23's ``_update_handlers``): ``pp_max_micro_batch_size``,
  ``speculative_accept_threshold_single``, ``speculative_accept_threshold_acc`` (0.5.23's
  ``dspark_*`` keys are no server arguments either).

A release between two read ones is credited only with what both have (a field cannot be called
live on a guess: the cost of a wrong ``live`` is a review that hides a restart); a release
outside them, with nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.sglang.argtable import Version, parse_version

CONFIGURE_LOGGING = "/configure_logging"
SET_INTERNAL_STATE = "/set_internal_state"

_INTERNAL_STATE = {
    "pp_max_micro_batch_size": SET_INTERNAL_STATE,
    "speculative_accept_threshold_single": SET_INTERNAL_STATE,
    "speculative_accept_threshold_acc": SET_INTERNAL_STATE,
}
_LOGGING_0511 = {
    "log_requests": CONFIGURE_LOGGING,
    "log_requests_level": CONFIGURE_LOGGING,
    "log_requests_format": CONFIGURE_LOGGING,
    "crash_dump_folder": CONFIGURE_LOGGING,
}

# release read -> field -> the endpoint that changes it on a running server
READ: Mapping[Version, Mapping[str, str]] = {
    (0, 5, 11): {**_LOGGING_0511, **_INTERNAL_STATE},
    (0, 5, 23): {**_LOGGING_0511, "log_level": CONFIGURE_LOGGING, **_INTERNAL_STATE},
}


def live_fields(version: str | None) -> Mapping[str, str]:
    """Field -> endpoint for ``version``'s running server; empty when orch has not read it."""
    parsed = parse_version(version or "")
    if parsed is None:
        return {}
    if parsed in READ:
        return READ[parsed]
    older = [v for v in READ if v < parsed]
    newer = [v for v in READ if v > parsed]
    if not older or not newer:
        return {}
    low, high = READ[max(older)], READ[min(newer)]
    return {name: endpoint for name, endpoint in low.items() if high.get(name) == endpoint}
