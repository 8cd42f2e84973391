"""``orch diff`` reports built as values (pure), for the markdown tests and their golden files.

The content follows what ``orch diff`` printed for the shipped profiles (the validation messages
are orch's own, copied from a run). The secrets below are handed to the report where a careless
renderer could show them: a secret field's change carrying the raw values, a literal api key in a
side's parsed arguments (compared, never shown). No output may hold any of them.
"""

from __future__ import annotations

from orchestrator.effective import review, verify

SECRETS = ("sk-live-7f3a9c2e5b8d", "hf_QpL4mZx9RtYw2VbN")

_0511 = "/opt/venvs/sglang-0.5.11/bin/python"
_0523 = "/opt/venvs/sglang-0.5.23/bin/python"
_SUPERVISION = {"restart.mode": "on-failure", "restart.delay_s": "5.0", "health.interval_s": "5.0"}
HALF_TRIPLE = (
    "profiles/qwen36-mtp-b200.yaml:13:3: spec_decode.num_steps: EAGLE speculative decoding with "
    "speculative_num_steps but not speculative_eagle_topk, speculative_num_draft_tokens: SGLang "
    "0.5.11 stops in its resolution with a bare TypeError ('>' between None and int) "
    "[speculative-triple] (hint: set all three of spec_decode.num_steps, eagle_topk and "
    "num_draft_tokens (e.g. 3, 1, 4), or none of them and let SGLang choose)"
)
PIN = (
    "profiles/qwen36-mtp-b200.yaml:23:5: pin[1]: pins speculative_num_draft_tokens, which this "
    "profile does not set (hint: a pin asserts the profile's own value survives; set the field "
    "or drop the pin)"
)


def placement(host: str, gpu: str, version: str = "0.5.11", nodes: int = 1) -> review.Placement:
    return review.Placement(
        f"{host} (ubuntu@{host}.example.net, workdir /data/orch)", gpu, version, nodes
    )


def side(
    argv: tuple[str, ...],
    where: review.Placement,
    env: dict[str, str] | None = None,
    *,
    arguments: tuple[str, ...] = (),
    supervision: dict[str, str] | None = None,
    problems: tuple[str, ...] = (),
) -> review.Side:
    python = _0523 if where.sglang == "0.5.23" else _0511
    rendered = review.Rendered(
        (python, "-m", "sglang.launch_server", *argv),
        env if env is not None else {"CUDA_VISIBLE_DEVICES": "0"},
        where,
        supervision if supervision is not None else _SUPERVISION,
    )
    return review.Side(
        None if problems else rendered,
        arguments=arguments,
        problems=problems,
        version=where.sglang,
    )


_QWEN = ("--model-path", "/models/Qwen3.6-27B", "--host", "0.0.0.0", "--port", "30000")
_MTP = (
    "--speculative-algorithm",
    "EAGLE",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
)


def restart_demo() -> review.DeploymentChange:
    where = placement("gpu-1", "L4 devices 0")
    argv = ("--model-path", "/models/Qwen2.5-0.5B-Instruct", "--port", "30000")
    return review.DeploymentChange(
        "demo",
        None,
        review.RESTART,
        ("context_length",),
        side((*argv, "--context-length", "8192"), where),
        side((*argv, "--context-length", "16384"), where),
        (
            review.FieldChange(
                "context_length", 8192, 16384, review.ARGTABLE, "given", secret=False
            ),
        ),
        memory=review.Memory("fits", "tight", None, "kv", 48, 12, 9.5, 1.2),
        running=review.Running("RUNNING", "4b1ce0b8d2a19f0e", True, "base"),
    )


def replace_upgrade() -> review.DeploymentChange:
    before = placement("b200-1", "B200 devices 0", "0.5.11")
    after = placement("b200-1", "B200 devices 0", "0.5.23")
    return review.DeploymentChange(
        "qwen36-mtp-b200",
        None,
        review.REPLACE,
        ("sglang",),
        side((*_QWEN, *_MTP, "--mamba-scheduler-strategy", "extra_buffer"), before),
        side((*_QWEN, *_MTP, "--mamba-radix-cache-strategy", "extra_buffer"), after),
        (
            review.FieldChange("sglang", "0.5.11", "0.5.23", review.PLACEMENT),
            review.FieldChange(
                "mamba_radix_cache_strategy",
                "extra_buffer",
                "extra_buffer",
                review.RENAME,
                renamed_from="mamba_scheduler_strategy",
            ),
            review.FieldChange(
                "chunked_prefill_size",
                verify.ABSENT,
                8192,
                review.RELEASE_DEFAULT,
                "left to SGLang: 0.5.11's default -> 0.5.23's",
            ),
        ),
        notes=("effective values from the argument tables; SGLang 0.5.23's plan not made",),
    )


def blocked_triple() -> review.DeploymentChange:
    where = placement("h200-1", "H200 devices 0")
    return review.DeploymentChange(
        "qwen36-mtp-h200",
        None,
        review.BLOCKED,
        (),
        side((*_QWEN, *_MTP), where),
        side((), where, problems=(PIN, HALF_TRIPLE)),
        (),
        reasons=(PIN, HALF_TRIPLE),
    )


def secret_change() -> review.DeploymentChange:
    """An api key changed (a literal in the profile) and a token read from the environment."""
    where = placement("gpu-2", "A100 devices 0,1")
    token = "<redacted: from_env HF_TOKEN>"  # noqa: S105 - how orch shows a secret reference
    before = side(
        (*_QWEN, "--api-key", verify.SECRET_SHOWN, "--log-level", "info"),
        where,
        {"CUDA_VISIBLE_DEVICES": "0,1"},
        arguments=("--api-key", SECRETS[0]),
    )
    after = side(
        (*_QWEN, "--api-key", verify.SECRET_SHOWN, "--log-level", "debug"),
        where,
        {"CUDA_VISIBLE_DEVICES": "0,1", "HF_TOKEN": token},
        arguments=("--api-key", SECRETS[0] + "-rotated"),
    )
    return review.DeploymentChange(
        "team-chat|prod",
        None,
        review.RESTART,
        ("api_key", "env.HF_TOKEN"),
        before,
        after,
        (
            # the raw values reach the renderer on purpose: it must show none of them
            review.FieldChange(
                "api_key", SECRETS[0], SECRETS[0] + "-rotated", review.ARGTABLE, secret=True
            ),
            review.FieldChange(
                "admin_api_key", verify.ABSENT, SECRETS[1], review.ARGTABLE, "given", secret=True
            ),
            review.FieldChange("env.HF_TOKEN", verify.ABSENT, token, review.ENV),
            review.FieldChange(
                "log_level", "info", "debug", review.ARGTABLE, "given `debug` | *loud*"
            ),
        ),
        notes=("@reviewers: #42 asks for <b>debug</b> logs; revert after the incident",),
    )


def group_ranks(delay: str = "10.0") -> tuple[review.DeploymentChange, ...]:
    changes = []
    for rank in (0, 1):
        where = placement(f"h200-{rank + 1}", "H200 devices 0-7", nodes=2)
        argv = ("--model-path", "/models/Qwen3.5-397B", "--tp-size", "16", "--node-rank", str(rank))
        after_supervision = {**_SUPERVISION, "restart.delay_s": delay}
        changes.append(
            review.DeploymentChange(
                "qwen35-397b-2x8-h200",
                rank,
                review.AGENT_ONLY,
                ("restart.delay_s",),
                side(argv, where),
                side(argv, where, supervision=after_supervision),
                (review.FieldChange("restart.delay_s", "5.0", delay, review.SUPERVISION),),
            )
        )
    return tuple(changes)


def live_log_level() -> review.DeploymentChange:
    where = placement("gpu-3", "L40S devices 0")
    argv = ("--model-path", "/models/Qwen3-8B")
    return review.DeploymentChange(
        "qwen3-8b-canary",
        None,
        review.LIVE,
        ("log_requests",),
        side((*argv,), where),
        side((*argv, "--log-requests"), where),
        (review.FieldChange("log_requests", False, True, review.ARGTABLE, "given"),),
        live_endpoints={"log_requests": "/configure_logging"},
    )


def small() -> review.Review:
    """One of each action a pull request commonly holds."""
    changes = (
        blocked_triple(),
        replace_upgrade(),
        restart_demo(),
        secret_change(),
        live_log_level(),
        *group_ranks(),
    )
    return review.Review(
        "origin/main",
        "HEAD",
        "34a656d5355480adf77cf66d6b4147438d17e981",
        "cb758f2a0e4c9d1b7a3f5e6d8c2b1a0f9e8d7c6b",
        review.ordered(changes),
        unchanged=3,
        notes=(
            "effective values from the argument tables (each release's defaults); "
            "--local-sglang or --remote adds SGLang's own resolution and the memory plans",
        ),
    )


def wide_argv(count: int, spelling: str) -> tuple[str, ...]:
    """A long launch: ``count`` flags, each with a value."""
    argv: list[str] = []
    for number in range(count):
        argv += [f"--{spelling}-{number:03d}", f"value-{number:03d}-" + "x" * 24]
    return tuple(argv)


def large() -> review.Review:
    """Many deployments, one of them with a launch larger than a small comment: a base profile
    changed under a fleet of tenants."""
    changes: list[review.DeploymentChange] = [
        blocked_triple(),
        replace_upgrade(),
        secret_change(),
        *group_ranks(),
    ]
    before = placement("b200-2", "B200 devices 0-3")
    after = placement("b200-2", "B200 devices 0-3", "0.5.23")
    changes.append(
        review.DeploymentChange(
            "qwen36-wide-b200",
            None,
            review.REPLACE,
            ("sglang",),
            side(wide_argv(40, "lora-path"), before),
            side(wide_argv(40, "lora-paths"), after),
            (review.FieldChange("sglang", "0.5.11", "0.5.23", review.PLACEMENT),),
        )
    )
    for tenant in range(24):
        change = restart_demo()
        changes.append(
            review.DeploymentChange(
                f"tenant-{tenant:02d}",
                None,
                change.action,
                change.forced_by,
                change.before,
                change.after,
                change.changes,
            )
        )
    return review.Review(
        "origin/main",
        "HEAD",
        "34a656d5355480adf77cf66d6b4147438d17e981",
        "cb758f2a0e4c9d1b7a3f5e6d8c2b1a0f9e8d7c6b",
        review.ordered(changes),
        unchanged=1,
    )
