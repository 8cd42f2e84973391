"""Every validation error: located (file:line:col, key path), explained, with a hint."""

from __future__ import annotations

import pytest

from orchestrator.errors import ExitCode, InvalidProfile, ProfileError
from orchestrator.model import RestartMode, Severity
from orchestrator.profile.store import LoadedProfile
from tests.conftest import ProfileDir

HEAD = 'sglang: "0.5.11"\nhost: gpu-1\nmodel: {path: /models/m}\n'


def _errors(profile_dir: ProfileDir, body: str, head: str = HEAD) -> list[ProfileError]:
    profile_dir.write("p", head + body)
    with pytest.raises(InvalidProfile) as caught:
        profile_dir.store().load("p")
    assert caught.value.exit_code == ExitCode.CONFIG
    return caught.value.errors


def _one(profile_dir: ProfileDir, body: str, head: str = HEAD) -> ProfileError:
    errors = _errors(profile_dir, body, head)
    assert len(errors) == 1, [e.message for e in errors]
    return errors[0]


def _load(profile_dir: ProfileDir, body: str, head: str = HEAD) -> LoadedProfile:
    profile_dir.write("p", head + body)
    return profile_dir.store().load("p")


def test_validation_misspelt_argument_suggests_the_real_name(profile_dir: ProfileDir) -> None:
    error = _one(profile_dir, "args:\n  mamba_scheduler_stratgy: extra_buffer\n")
    assert error.message == (
        "profiles/p.yaml:5:3: args.mamba_scheduler_stratgy: unknown SGLang 0.5.11 argument"
    )
    assert error.hint == "did you mean mamba_scheduler_strategy?"


def test_validation_bad_choice_lists_the_choices(profile_dir: ProfileDir) -> None:
    error = _one(profile_dir, "args:\n  mamba_scheduler_strategy: extra-buffer\n")
    assert error.key_path == "args.mamba_scheduler_strategy"
    assert "expected one of auto, no_buffer, extra_buffer" in error.message
    assert error.hint == "did you mean extra_buffer?"


def test_validation_choice_of_a_newer_version_is_refused(profile_dir: ProfileDir) -> None:
    error = _one(profile_dir, "args:\n  mamba_scheduler_strategy: extra_buffer_lazy\n")
    assert "expected one of auto, no_buffer, extra_buffer," in error.message


def test_validation_type_errors_name_the_key_path(profile_dir: ProfileDir) -> None:
    errors = _errors(
        profile_dir,
        "args:\n"
        "  max_total_tokens: lots\n"
        "  trust_remote_code: 'yes'\n"
        "  mem_fraction_static: true\n"
        "  max_running_requests: [1, 2]\n",
    )
    assert [(e.key_path, e.problem) for e in errors] == [
        (
            "args.max_total_tokens",
            "expected an integer, optionally with a suffix (8192, 8k, 32Ki), got 'lots'",
        ),
        (
            "args.trust_remote_code",
            "expected true or false (--trust-remote-code is a switch), got 'yes'",
        ),
        ("args.mem_fraction_static", "expected a number, got true"),
        (
            "args.max_running_requests",
            "expected a single value for --max-running-requests, got a list",
        ),
    ]


def test_validation_collects_every_error_of_a_profile(profile_dir: ProfileDir) -> None:
    errors = _errors(profile_dir, "port: 70000\nlauncher: docker\nspec_decoding: {}\n")
    assert [e.key_path for e in errors] == ["spec_decoding", "launcher", "port"]
    assert errors[0].hint == "did you mean spec_decode?"


@pytest.mark.parametrize(
    ("body", "key_path", "problem"),
    [
        ("port: 0\n", "port", "expected an integer in 1..65535, got 0"),
        ("port: 65536\n", "port", "expected an integer in 1..65535, got 65536"),
        ("port: '30000'\n", "port", "expected an integer, got a string"),
        ("bind: '0.0.0.0 '\n", "bind", "expected an address such as 0.0.0.0, got '0.0.0.0 '"),
        ("launcher: docker\n", "launcher", "expected module or serve, got 'docker'"),
        ("gpu: {devices: [0, 0]}\n", "gpu.devices[1]", "GPU 0 is listed twice"),
        (
            "gpu: {devices: [-1]}\n",
            "gpu.devices[0]",
            "expected a GPU index or GPU-/MIG- UUID, got -1",
        ),
        ("gpu: {devices: 0}\n", "gpu.devices", "expected a list such as [0, 1], got an integer"),
        ("env: {9LIVES: x}\n", "env.9LIVES", "bad environment variable name '9LIVES'"),
        ("env: {FLAG: true}\n", "env.FLAG", "expected a string, got true"),
        ('env: {NUL: "a\\0b"}\n', "env.NUL", "NUL bytes cannot be in an environment variable"),
        ("env: {T: {from_env: 1}}\n", "env.T", "expected {from_env: NAME}"),
        ("env: {T: {from_evn: X}}\n", "env.T", "expected {from_env: NAME}"),
        ("args: {port: 1}\n", "args.port", "port is set by `port`"),
        ("args: {model_path: /x}\n", "args.model_path", "model_path is set by `model.path`"),
        ('args: {"bad\\nname": 1}\n', "args.bad\nname", "bad SGLang argument name 'bad\\nname'"),
        (
            'args: {tokenizer_path: "a\\0b"}\n',
            "args.tokenizer_path",
            "a NUL byte cannot be passed in a command line",
        ),
        (
            "args: {tp_size: 4}\ngpu: {devices: [0, 1]}\n",
            "args.tp_size",
            "tp_size x pp_size = 4 GPUs, but gpu.devices lists 2",
        ),
        (
            "pin: [mem_fraction_static]\n",
            "pin[0]",
            "pins mem_fraction_static, which this profile does not set",
        ),
        ("pin: mem_fraction_static\n", "pin", "expected a list of SGLang field names"),
        (
            "restart: {mode: sometimes}\n",
            "restart.mode",
            "expected no, on-failure or always, got 'sometimes'",
        ),
        (
            "restart: {delay_s: 10, max_delay_s: 5}\n",
            "restart.max_delay_s",
            "must be >= restart.delay_s",
        ),
        ("restart: {start_limit: 0}\n", "restart.start_limit", "expected an integer >= 1, got 0"),
        (
            "health: {endpoint: health}\n",
            "health.endpoint",
            "expected a path such as /health, got 'health'",
        ),
        ("spec_decode: {num_steps: 3}\n", "spec_decode", "missing `algorithm`"),
        ("spec_decode: {algorithm: EAGLE4}\n", "spec_decode.algorithm", None),
        ("description: [x]\n", "description", "expected a string, got a list"),
    ],
)
def test_validation_rejects(
    profile_dir: ProfileDir, body: str, key_path: str, problem: str | None
) -> None:
    error = _one(profile_dir, body)
    assert error.key_path == key_path
    if problem is not None:
        assert error.problem == problem
    assert error.message.startswith("profiles/p.yaml:")


def test_validation_spec_algorithm_is_checked_against_the_version(profile_dir: ProfileDir) -> None:
    error = _one(profile_dir, "spec_decode: {algorithm: EAGLE4}\n")
    assert error.problem.startswith("expected one of ")
    assert "EAGLE" in error.problem
    assert "EAGLE3" in error.problem


def test_validation_unknown_gpu_type_suggests(profile_dir: ProfileDir) -> None:
    error = _one(profile_dir, "gpu: {type: B20}\n")
    assert error.problem == "unknown GPU type 'B20'"
    assert error.hint is not None
    assert error.hint.startswith("did you mean B200?")


def test_validation_version_must_be_a_quoted_version(profile_dir: ProfileDir) -> None:
    error = _one(profile_dir, "sglang: 0.5\n", head="host: gpu-1\nmodel: {path: /m}\n")
    assert error.problem == "expected a version string, got the number 0.5"
    assert error.hint == 'quote it: sglang: "0.5.11"'
    error = _one(profile_dir, "sglang: latest\n", head="host: gpu-1\nmodel: {path: /m}\n")
    assert error.problem == "expected a version like 0.5.11, got 'latest'"


def test_validation_unknown_host_lists_the_inventory(profile_dir: ProfileDir) -> None:
    error = _one(profile_dir, "host: gpu-2\nmodel: {path: /m}\n", head="")
    assert error.problem == "unknown host 'gpu-2'"
    assert error.hint == "did you mean gpu-1? hosts in hosts.yaml: gpu-1, local"


def test_validation_missing_model_path(profile_dir: ProfileDir) -> None:
    error = _one(profile_dir, "host: gpu-1\n", head="")
    assert error.problem == "missing `model.path`"


def test_validation_argument_of_another_version_says_where_it_exists(
    profile_dir: ProfileDir,
) -> None:
    error = _one(profile_dir, "args: {attn_dp_size: 2}\n")  # added in 0.5.22
    assert error.problem == "unknown SGLang 0.5.11 argument"
    assert error.hint is not None
    assert "it exists in SGLang" in error.hint
    assert "0.5.22" in error.hint


def test_validation_old_name_on_new_version_warns_with_what_to_write(
    profile_dir: ProfileDir,
) -> None:
    loaded = _load(
        profile_dir,
        "args: {mamba_scheduler_strategy: extra_buffer}\n",
        head='sglang: "0.5.23"\nhost: gpu-1\nmodel: {path: /m}\n',
    )
    (finding,) = loaded.findings
    assert finding.severity is Severity.WARNING
    assert "SGLang 0.5.23 calls this mamba_radix_cache_strategy" in finding.message
    assert "rendered as --mamba-radix-cache-strategy" in finding.message
    assert finding.hint == "write mamba_radix_cache_strategy"


def test_validation_unpinned_version_is_checked_against_the_newest_table(
    profile_dir: ProfileDir,
) -> None:
    loaded = _load(profile_dir, "", head="host: gpu-1\nmodel: {path: /m}\n")
    assert loaded.table.version == "0.5.23"
    assert [f.severity for f in loaded.findings] == [Severity.NOTICE]


def test_validation_version_without_table_is_an_error_naming_the_command_that_adds_it(
    profile_dir: ProfileDir,
) -> None:
    """Not a neighbour's table in its place: a flag the release renamed or added would be
    checked, and rendered, wrongly."""
    errors = _errors(
        profile_dir,
        "args:\n  tp_size: 2\n",
        head='sglang: "0.5.99"\nhost: gpu-1\nmodel: {path: /m}\n',
    )
    assert errors[0].message.startswith(
        "profiles/p.yaml:1:1: sglang: orch has no argument table for SGLang 0.5.99 (it knows "
    )
    assert errors[0].hint is not None
    assert 'make argtables VERSIONS="0.5.99"' in errors[0].hint


def test_validation_yaml_no_is_restart_mode_no(profile_dir: ProfileDir) -> None:
    profile = _load(profile_dir, "restart: {mode: no}\n").profile
    assert profile.restart.mode is RestartMode.NO


def test_validation_dashes_in_argument_names_are_accepted(profile_dir: ProfileDir) -> None:
    profile = _load(profile_dir, "args: {mem-fraction-static: 0.9}\n").profile
    assert dict(profile.args) == {"mem_fraction_static": 0.9}


def test_inventory_errors_are_located(profile_dir: ProfileDir) -> None:
    profile_dir.write(
        "hosts.yaml",
        """\
        hosts:
          box:
            address: box.example
            workdir: /w
          local:
            address: 127.0.0.1
          other:
            python: python3
            prot: 22
        """,
    )
    profile_dir.write("p", "host: box\nmodel: {path: /m}\n")
    with pytest.raises(InvalidProfile) as caught:
        profile_dir.store().load("p")
    assert [(e.key_path, e.problem, e.line) for e in caught.value.errors] == [
        ("hosts.box", "missing `python`: the interpreter of the venv that holds sglang", 2),
        ("hosts.local.address", "`local` is this machine and takes no address", 6),
        ("hosts.other.prot", "unknown key", 9),
        ("hosts.other", "missing `address` (a hostname, IP or ~/.ssh/config alias)", 7),
    ]
    assert caught.value.errors[2].hint == "did you mean port?"


def test_inventory_python_must_be_absolute_or_a_command(profile_dir: ProfileDir) -> None:
    profile_dir.write("hosts.yaml", "hosts:\n  box: {address: b, python: ~/venv/bin/python}\n")
    profile_dir.write("p", "host: box\nmodel: {path: /m}\n")
    with pytest.raises(InvalidProfile) as caught:
        profile_dir.store().load("p")
    assert caught.value.errors[0].key_path == "hosts.box.python"
    assert "no shell expands" in caught.value.errors[0].problem


# -- numbers: finite, within what the agent can wait (issue 10 §6) ---------------------------------


@pytest.mark.parametrize(
    ("body", "key_path", "column"),
    [
        ("restart: {delay_s: .inf}\n", "restart.delay_s", 20),
        ("restart: {max_delay_s: .nan}\n", "restart.max_delay_s", 24),
        ("health: {startup_timeout_s: -.inf}\n", "health.startup_timeout_s", 29),
        ("stop_timeout_s: .Inf\n", "stop_timeout_s", 17),
        ("args: {mem_fraction_static: .nan}\n", "args.mem_fraction_static", 29),
        ("env: {RATIO: .inf}\n", "env.RATIO", 14),
    ],
)
def test_validation_nan_and_infinities_are_refused_for_every_number(
    profile_dir: ProfileDir, body: str, key_path: str, column: int
) -> None:
    profile_dir.write("p", HEAD + body)
    with pytest.raises(ProfileError) as caught:
        profile_dir.store().load("p")
    error = caught.value
    assert error.exit_code == ExitCode.CONFIG
    assert error.message.startswith(
        f"profiles/p.yaml:4:{column}: {key_path}: expected a finite number"
    )
    assert error.hint is not None


@pytest.mark.parametrize("text", ["nan", "-inf", "Infinity", "1e999"])
def test_validation_non_finite_text_for_a_number_argument_is_refused(
    profile_dir: ProfileDir, text: str
) -> None:
    error = _one(profile_dir, f'args:\n  mem_fraction_static: "{text}"\n')
    assert error.message == (
        f"profiles/p.yaml:5:3: args.mem_fraction_static: expected a finite number, got {text!r}"
    )


def test_validation_durations_are_bounded_and_huge_integers_do_not_crash(
    profile_dir: ProfileDir,
) -> None:
    errors = _errors(
        profile_dir,
        "restart: {delay_s: 1.0e+300, max_delay_s: 1.0e+300}\n"
        f"health: {{interval_s: {10**400}}}\n",
    )
    assert [(e.key_path, e.problem) for e in errors] == [
        ("restart.delay_s", "expected a number in 0..3.16224e+07, got 1e+300"),
        ("restart.max_delay_s", "expected a number in 0..3.16224e+07, got 1e+300"),
        ("health.interval_s", "expected a finite number"),
    ]


# -- the host's workdir (issue 10 §5) ----------------------------------------------------------


@pytest.mark.parametrize("workdir", ["data/orch", "./orch", "orch", "~ubuntu/orch", '""'])
def test_inventory_relative_workdir_is_an_error(profile_dir: ProfileDir, workdir: str) -> None:
    profile_dir.write(
        "hosts.yaml", f"hosts:\n  box: {{address: b, python: /v/bin/python, workdir: {workdir}}}\n"
    )
    profile_dir.write("p", "host: box\nmodel: {path: /m}\n")
    with pytest.raises(InvalidProfile) as caught:
        profile_dir.store().load("p")
    [error] = caught.value.errors
    assert error.message.startswith(
        "profiles/hosts.yaml:2:44: hosts.box.workdir: expected an absolute path or ~/..."
    )
    assert error.hint is not None
    assert "absolute path" in error.hint


@pytest.mark.parametrize("workdir", ["/data/orch", '"~"', "~/orch", "~/.local/state/orch"])
def test_inventory_absolute_and_home_workdirs_are_accepted(
    profile_dir: ProfileDir, workdir: str
) -> None:
    profile_dir.write(
        "hosts.yaml", f"hosts:\n  box: {{address: b, python: /v/bin/python, workdir: {workdir}}}\n"
    )
    profile_dir.write("p", "host: box\nmodel: {path: /m}\n")
    assert profile_dir.store().load("p").profile.host.workdir == workdir.strip('"')


def test_inventory_bare_tilde_workdir_is_yaml_null_and_says_so(profile_dir: ProfileDir) -> None:
    profile_dir.write(
        "hosts.yaml", "hosts:\n  box: {address: b, python: /v/bin/python, workdir: ~}\n"
    )
    profile_dir.write("p", "host: box\nmodel: {path: /m}\n")
    with pytest.raises(InvalidProfile) as caught:
        profile_dir.store().load("p")
    [error] = caught.value.errors
    assert error.problem == "expected a path, got null (YAML reads a bare ~ as null)"
    assert error.hint == 'quote it for the SSH user\'s home: workdir: "~"; or leave the key out'


# -- a secret in args is on the command line (issue 10 §4) ---------------------------------------


def test_validation_secret_in_args_warns_that_the_process_list_shows_it(
    profile_dir: ProfileDir,
) -> None:
    loaded = _load(
        profile_dir,
        "args:\n  api_key: {from_env: SERVING_KEY}\nenv:\n  HF_TOKEN: {from_env: HF_TOKEN}\n",
    )
    [warning] = [f for f in loaded.findings if f.severity is Severity.WARNING]
    assert warning.message == (
        "profiles/p.yaml:5:3: args.api_key: {from_env: SERVING_KEY} goes on the server's command "
        "line as --api-key: every user on gpu-1 can read it in the process list "
        "(ps, /proc/PID/cmdline)"
    )
    assert warning.hint is not None
    assert "SGLang 0.5.11 reads --api-key from its command line only" in warning.hint
    assert "env:" in warning.hint


# -- a host's kept connection (issue 16) --------------------------------------------------------


def test_inventory_persist_s_is_read_and_bounded(profile_dir: ProfileDir) -> None:
    profile_dir.write("hosts.yaml", "hosts:\n  box: {address: b, python: /v/bin/python}\n")
    profile_dir.write("p", "host: box\nmodel: {path: /m}\n")
    assert profile_dir.store().load("p").profile.host.persist_s == 0  # off unless asked
    profile_dir.write(
        "hosts.yaml", "hosts:\n  box: {address: b, python: /v/bin/python, persist_s: 600}\n"
    )
    assert profile_dir.store().load("p").profile.host.persist_s == 600
    profile_dir.write(
        "hosts.yaml", "hosts:\n  box: {address: b, python: /v/bin/python, persist_s: -1}\n"
    )
    with pytest.raises(InvalidProfile) as caught:
        profile_dir.store().load("p")
    [error] = caught.value.errors
    assert error.key_path == "hosts.box.persist_s"
    assert error.problem.startswith("expected a number in 0..")


@pytest.mark.parametrize(
    ("body", "key_path"),
    [
        ("model: {path: --help}\n", "model.path"),
        ("model: {path: /models/m, served_model_name: -v}\n", "model.served_model_name"),
        ("model: {path: /models/m}\nbind: -h\n", "bind"),
    ],
)
def test_validation_refuses_a_value_that_reads_as_an_option(
    profile_dir: ProfileDir, body: str, key_path: str
) -> None:
    """``model.path: "--help"`` validated, then the agent's probe read it as its own --help
    (issue 26): a value that becomes a command-line word must not start with '-'."""
    error = _one(profile_dir, body, head='sglang: "0.5.11"\nhost: gpu-1\n')
    assert error.key_path == key_path
    assert error.problem.endswith("starts with '-': a command line would read it as an option")
    assert error.hint is not None
    assert error.line is not None
