"""No secret a launch script holds reaches anything ``orch import`` writes or prints: the profile
(values, the header comment, the notes written as comments), standard output and error, and
``--check`` (text and ``--json``), which reports each secret written in the script, located,
without its value.

Every token below is made up, assembled from pieces so that no secret scanner mistakes this file
for a leak; each has the shape of the real format it stands for.
"""

from __future__ import annotations

import io
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.cli.main import main
from orchestrator.errors import ExitCode
from tests.conftest import copy_examples

LAUNCH = "python -m sglang.launch_server --model-path /models/m --port 30001"

HF = "hf_" + "aB3dE5fG7h" * 3 + "kLmN"  # 34 characters after hf_, as the Hub writes them
SK_ONE = "sk-" + "Zx9Wq" * 8
SK_TWO = "sk-" + "Qw8Er" * 8
SK_PROJ = "sk-" + "proj-" + "Ab1Cd2Ef3" * 6
SK_ANT = "sk-" + "ant-api03-" + "Xy7_Zz8-Pq" * 5
GH_PAT = "github" + "_pat_" + "11ABCDEFG0" + "_" + "q1W2e3R4t5" * 6
GHP = "gh" + "p_" + "R2d2C3po4B" * 3 + "b8B8b8"
GLPAT = "gl" + "pat-" + "Ab3Cd4Ef5Gh6Ij7Kl8Mn"
SLACK = "xo" + "xb-" + "123456789012-1234567890123-" + "AbCdEfGhIjKlMnOpQrStUvWx"
AKIA = "AK" + "IA" + "Q3EGRIV7ZX5NM2PL"
AWS_SECRET = "wJalrXUtnFEMI" + "/K7MDENG/bPxRfiCYzQ9ExampLeKEY"
JWT = (
    "ey"
    + "JhbGciOiJIUzI1NiJ9."
    + "ey"
    + "JzdWIiOiIxMjM0NTY3ODkwIn0."
    + "d0zjgNryP4J3jVmNHl0w5N_XgL0n3I9P"
)
PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"
BEARER = "tkn" + "_9f8e7d6c5b4a3f2e1d0c"


@dataclass(frozen=True)
class Case:
    id: str
    script: str
    secrets: tuple[str, ...]  # values that must appear nowhere orch writes or prints
    plaintext: tuple[int, ...]  # lines where --check reports a secret written in the script
    expect: dict[str, Any] = field(default_factory=dict)  # "env.NAME"/"args.NAME" -> value
    given: tuple[str, ...] = ()  # --set NAME=VALUE


def _from_env(name: str) -> dict[str, str]:
    return {"from_env": name}


CASES = [
    Case(
        "name-placeholder-hf-token",
        f"export HF_TOKEN=hf_xxx\n{LAUNCH}\n",
        ("hf_xxx",),
        (1,),
        {"env.HF_TOKEN": _from_env("HF_TOKEN")},
    ),
    Case(
        "name-short-openai-key",
        f"export OPENAI_API_KEY=abc123\n{LAUNCH}\n",
        ("abc123",),
        (1,),
        {"env.OPENAI_API_KEY": _from_env("OPENAI_API_KEY")},
    ),
    Case(
        "name-db-pass-prefix-assignment",
        f"DB_PASS=hunter22 {LAUNCH}\n",
        ("hunter22",),
        (1,),
        {"env.DB_PASS": _from_env("DB_PASS")},
    ),
    Case(
        "name-aws-secret-access-key",
        f"export AWS_SECRET_ACCESS_KEY={AWS_SECRET}\n{LAUNCH}\n",
        (AWS_SECRET,),
        (1,),
        {"env.AWS_SECRET_ACCESS_KEY": _from_env("AWS_SECRET_ACCESS_KEY")},
    ),
    *(
        Case(
            f"value-{kind}-under-a-plain-name",
            f"export BUILD_NOTE={token}\n{LAUNCH}\n",
            (token,),
            (1,),
            {"env.BUILD_NOTE": _from_env("BUILD_NOTE")},
        )
        for kind, token in [
            ("hf", HF),
            ("sk-proj", SK_PROJ),
            ("sk-ant", SK_ANT),
            ("github-pat", GH_PAT),
            ("ghp", GHP),
            ("glpat", GLPAT),
            ("slack", SLACK),
            ("akia", AKIA),
            ("jwt", JWT),
        ]
    ),
    Case(
        "api-key-given-twice",
        f"{LAUNCH} --api-key {SK_ONE} --api-key {SK_TWO}\n",
        (SK_ONE, SK_TWO),
        (1,),
        {"args.api_key": _from_env("API_KEY")},
    ),
    Case(
        "api-key-abbreviated-and-equals",
        f"{LAUNCH} --api-k={SK_ONE}\n",
        (SK_ONE,),
        (1,),
        {"args.api_key": _from_env("API_KEY")},
    ),
    Case(
        "admin-key-and-keyfile-password",
        f"{LAUNCH} --admin-api-key adminpw1 --ssl-keyfile-password keypw123\n",
        ("adminpw1", "keypw123"),
        (1,),
        {
            "args.admin_api_key": _from_env("ADMIN_API_KEY"),
            "args.ssl_keyfile_password": _from_env("SSL_KEYFILE_PASSWORD"),
        },
    ),
    Case(
        "every-token-shaped-default",
        f'export EXTRA_NOTE="${{NOTE_SRC:-{GHP}}}"\n'
        f'{LAUNCH} --api-key "${{KEY_ONE:-{SK_ONE}}}" --admin-api-key "${{KEY_TWO:-{SK_TWO}}}"\n',
        (GHP, SK_ONE, SK_TWO),
        (1, 2),
        {
            "env.EXTRA_NOTE": _from_env("EXTRA_NOTE"),
            "args.api_key": _from_env("API_KEY"),
            "args.admin_api_key": _from_env("ADMIN_API_KEY"),
        },
    ),
    Case(
        "later-token-defaults-in-plain-flags",
        f'{LAUNCH} --tokenizer-path "${{TOK_A:-{SK_ONE}}}" --chat-template "${{TOK_B:-{HF}}}"\n',
        (SK_ONE, HF),
        (1,),
        {
            "args.tokenizer_path": _from_env("TOKENIZER_PATH"),
            "args.chat_template": _from_env("CHAT_TEMPLATE"),
        },
    ),
    Case(
        "token-in-a-field-a-profile-takes-as-text",
        f"{LAUNCH} --served-model-name {GHP}\n",
        (GHP,),
        (1,),
        {"model.served_model_name": "<unset: --served-model-name without its secret>"},
    ),
    Case(
        "url-password-in-env",
        f"export HF_ENDPOINT=https://alice:Pa55w0rd-x@mirror.example.com\n{LAUNCH}\n",
        ("Pa55w0rd-x",),
        (1,),
        {"env.HF_ENDPOINT": _from_env("HF_ENDPOINT")},
    ),
    Case(
        "url-password-in-a-flag",
        f"{LAUNCH} --tokenizer-path https://bob:T0kenPw-9@models.example.com/tok\n",
        ("T0kenPw-9",),
        (1,),
        {"args.tokenizer_path": _from_env("TOKENIZER_PATH")},
    ),
    Case(
        "token-inside-json-argument",
        f"{LAUNCH} --model-loader-extra-config "
        f'\'{{"hf_token": "{HF}", "enable_multithread_load": true}}\'\n',
        (HF,),
        (1,),
        {"args.model_loader_extra_config": _from_env("MODEL_LOADER_EXTRA_CONFIG")},
    ),
    Case(
        "credential-key-inside-json-argument",
        f'{LAUNCH} --model-loader-extra-config \'{{"password": "opensesame9"}}\'\n',
        ("opensesame9",),
        (1,),
        {"args.model_loader_extra_config": _from_env("MODEL_LOADER_EXTRA_CONFIG")},
    ),
    Case(
        "pem-private-key-in-a-variable",
        'export TLS_MATERIAL="-----BEGIN PRIVATE KEY-----\n'
        f'{PEM_BODY}\n-----END PRIVATE KEY-----"\n{LAUNCH}\n',
        (PEM_BODY,),
        (1,),
        {"env.TLS_MATERIAL": _from_env("TLS_MATERIAL")},
    ),
    Case(
        "bearer-token-in-a-header-variable",
        f'export EXTRA_HEADERS="Authorization: Bearer {BEARER}"\n{LAUNCH}\n',
        (BEARER,),
        (1,),
        {"env.EXTRA_HEADERS": _from_env("EXTRA_HEADERS")},
    ),
    Case(
        "docker-env-token",
        "docker run --gpus all -e HF_TOKEN=hf_localtoken9 img "
        "python3 -m sglang.launch_server --model-path /m\n",
        ("hf_localtoken9",),
        (1,),
        {"env.HF_TOKEN": _from_env("HF_TOKEN")},
    ),
    Case(
        "sshpass-password",
        f'sshpass -p "s3cr3tpw" scp weights.tar gpu-host:/models/\n{LAUNCH}\n',
        ("s3cr3tpw",),
        (1,),
    ),
    Case(
        "token-in-a-comment",
        f"# the old token: {HF}\n{LAUNCH}\n",
        (HF,),
        (1,),
    ),
    Case(
        "secret-given-with-set",
        f'{LAUNCH} --api-key "$KEY"\n',
        (SK_ONE,),
        (),
        {"args.api_key": _from_env("KEY")},
        given=(f"KEY={SK_ONE}",),
    ),
]


def _run(argv: list[str], stdin: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    saved, sys.stdin = sys.stdin, io.StringIO(stdin)
    try:
        code = main(argv, out=out, err=err)
    finally:
        sys.stdin = saved
    return code, out.getvalue(), err.getvalue()


def _at(document: dict[str, Any], dotted: str) -> Any:
    section, name = dotted.split(".", 1)
    return (document.get(section) or {}).get(name)


@pytest.fixture
def profiles(tmp_path: Path) -> Path:
    return copy_examples(tmp_path / "profiles")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_secret_reaches_no_profile_and_no_output(case: Case, profiles: Path) -> None:
    sets = [word for given in case.given for word in ("--set", given)]
    code, out, err = _run(
        ["--profiles", str(profiles), "import", "-", "--name", "s", *sets], case.script
    )
    assert code == ExitCode.OK, err
    text = (profiles / "s.yaml").read_text()
    yaml_run = ["--profiles", str(profiles), "import", "-", "-o", "-", *sets]
    _, yaml_out, yaml_err = _run(yaml_run, case.script)
    check = _run(["import", "--check", "-", *sets], case.script)
    check_json = _run(["import", "--check", "--json", "-", *sets], case.script)
    shown = {
        "the written profile": text,
        "stdout": out,
        "stderr": err,
        "-o - stdout": yaml_out,
        "-o - stderr": yaml_err,
        "--check": check[1] + check[2],
        "--check --json": check_json[1] + check_json[2],
    }
    for secret in case.secrets:
        for where, content in shown.items():
            assert secret not in content, f"{secret!r} in {where}:\n{content}"
    document = yaml.safe_load(text)
    for dotted, value in case.expect.items():
        assert _at(document, dotted) == value, dotted
    finding = re.compile(r"^<stdin>:(\d+):\d+: warning: .*\[plaintext-secret\]$", re.M)
    reported = {int(match.group(1)) for match in finding.finditer(check[1])}
    assert reported == set(case.plaintext), check[1]
    findings = json.loads(check_json[1])["findings"]
    assert {f["line"] for f in findings if f["code"] == "plaintext-secret"} == set(case.plaintext)


def test_check_says_the_fix_and_where_without_the_value() -> None:
    _, out, _ = _run(["import", "--check", "-"], f"export HF_TOKEN={HF}\n{LAUNCH}\n")
    line = next(x for x in out.splitlines() if "[plaintext-secret]" in x)
    assert line.startswith("<stdin>:1:17: warning: ")  # where the value is written
    assert "HF_TOKEN" in line
    fix = out.splitlines()[out.splitlines().index(line) + 1]
    assert "from_env: HF_TOKEN" in fix
    assert "export HF_TOKEN" in fix


SETTINGS = {
    # SGLang's own settings (python/sglang/srt/environ.py) and the usual library switches
    "SGLANG_USE_AITER_FP8_PER_TOKEN": "1",
    "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK": "256",
    "SGLANG_SIMULATE_ACC_TOKEN_MODE": "fixed",
    "SGLANG_LOG_DECODE_GRAPH_KEY": "1",
    "SGLANG_MAX_THINK_TOKENS": "1024",
    "SGLANG_INIT_NEW_TOKEN_RATIO": "0.7",
    "SGLANG_KV_CANARY_ENABLE_VERIFY_TOKEN_ASSERT": "true",
    # a Hygon DCU build's switches (tests/fixtures/launchscripts/c-09-*): SGLang's pools
    "SGLANG_ASSIGN_REQ_TO_TOKEN_POOL": "1",
    "SGLANG_TOKEN_TO_KV_POOL_FALLBACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_TOKEN_PATH": "/secrets/hf-token",
    "HF_HOME": "/mnt/nvme/hf_cache",
    "GIT_AUTHOR_NAME": "someone",
}


def test_settings_that_only_mention_tokens_or_keys_stay_values(profiles: Path) -> None:
    script = "".join(f"export {k}={v}\n" for k, v in SETTINGS.items())
    script += f"{LAUNCH} --max-total-tokens 4096 --ssl-keyfile /etc/tls/key.pem\n"
    code, _, err = _run(["--profiles", str(profiles), "import", "-", "--name", "s"], script)
    assert code == ExitCode.OK, err
    document = yaml.safe_load((profiles / "s.yaml").read_text())
    assert document["env"] == SETTINGS
    assert document["args"]["max_total_tokens"] == 4096
    assert document["args"]["ssl_keyfile"] == "/etc/tls/key.pem"
    _, check, _ = _run(["import", "--check", "-"], script)
    assert "[plaintext-secret]" not in check


def test_a_secret_default_is_not_quoted_in_the_note(profiles: Path) -> None:
    script = f'{LAUNCH} --api-key "${{KEY:-{SK_ONE}}}"\n'
    code, out, err = _run(["--profiles", str(profiles), "import", "-", "--name", "s"], script)
    assert code == ExitCode.OK, err
    default = next(x for x in out.splitlines() if "default:" in x and "KEY" in x)
    assert "<redacted" not in default  # import never quoted it: nothing was left to mask
    assert "a secret" in default


# -- the classifier, on its own ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "GITHUB_TOKEN",
        "AWS_SESSION_TOKEN",
        "NGROK_AUTHTOKEN",
        "OPENAI_API_KEY",
        "WANDB_API_KEY",
        "EXA_API_KEY",
        "APIKEY",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID",
        "CLIENT_SECRET",
        "DB_PASSWORD",
        "MYSQL_PWD",
        "DB_PASS",
        "SSHPASS",
        "PASSPHRASE",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "BASIC_AUTH",
        "PROXY_AUTHORIZATION",
        "SGLANG_API_KEY",
        "KEY",
        "TOKEN",
        "hf_token",
        "apiKey",
        "accessToken",
    ],
)
def test_a_name_that_says_credential_is_a_secret(name: str) -> None:
    from orchestrator.importing import credentials

    assert credentials.secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        *SETTINGS,
        "MAX_TOTAL_TOKENS",
        "SGLANG_FLASHINFER_NVFP4_PER_TOKEN_ACTIVATION",
        "SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION",
        "SGLANG_SYNC_TOKEN_IDS_ACROSS_TP",
        "SGLANG_PREFILL_DELAYER_TOKEN_USAGE_LOW_WATERMARK",
        "SGLANG_PATCH_TOKENIZER",
        "SGLANG_KV_CANARY_PERTURB_NEXT_TOKEN_SWAP_PROB",
        "SGLANG_DEBUG_SLOW_SCHEDULER_PASS_MS",
        "SGLANG_DIAG_BYPASS_HEALTH_GENERATE",
        "SGLANG_PREFILL_DELAYER_MAX_DELAY_PASSES",
        "SSL_KEYFILE",
        "PGPASSFILE",
        "HF_TOKEN_FILE",
        "K8S_SECRET_NAME",
        "PWD",
        "OLDPWD",
        "bucket_time_to_first_token",
        "speculative_token_map",
        "max_tokens",
        "MONKEY_PATCH",
    ],
)
def test_a_setting_that_mentions_a_credential_word_is_not_a_secret(name: str) -> None:
    from orchestrator.importing import credentials

    assert not credentials.secret_name(name)


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (HF, HF),
        (f"x {SK_PROJ} y", SK_PROJ),
        (SK_ANT, SK_ANT),
        (GH_PAT, GH_PAT),
        (GHP, GHP),
        (GLPAT, GLPAT),
        (SLACK, SLACK),
        (AKIA, AKIA),
        (JWT, JWT),
        (f"Authorization: Bearer {BEARER}", BEARER),
        ("https://alice:Pa55w0rd-x@mirror.example.com/x", "Pa55w0rd-x"),
        (f'{{"hf_token": "{HF}"}}', HF),
        ('{"password": "opensesame9"}', "opensesame9"),
        ("s3://bucket/x?token=abc123def", "abc123def"),
        (f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----", PEM_BODY),
    ],
)
def test_a_value_that_holds_a_secret_is_found(text: str, secret: str) -> None:
    from orchestrator.importing import credentials

    found = credentials.secrets_in(text)
    assert found, text
    assert any(secret in hit.value for hit in found)


@pytest.mark.parametrize(
    "text",
    [
        "/mnt/nvme_raid0/hf_cache",
        "https://hf-mirror.com",
        "https://user@host/x",
        '{"max_tokens": 5, "key": 3}',
        "sk-learn",
        "Qwen/Qwen3-8B",
        "0.0.0.0:30000",
        "desk-top-1234567890123456789012",
        "-----BEGIN CERTIFICATE-----",
    ],
)
def test_an_ordinary_value_holds_no_secret(text: str) -> None:
    from orchestrator.importing import credentials

    assert credentials.secrets_in(text) == ()


def test_only_sglangs_credential_options_are_named_like_one() -> None:
    """Every flag of every release orch knows, read by the name rule: exactly the three options
    that hold a credential (SECRET_ARGS) are secrets; the many TOKEN/KEY settings are not."""
    from orchestrator.importing import credentials
    from orchestrator.sglang import argtable

    named = set()
    for version in argtable.available_versions():
        for flag, option in argtable.load_table(version).by_flag.items():
            if flag.startswith("--") and credentials.secret_name(flag):
                named.add(option.dest)
    assert named == credentials.SECRET_ARGS


def test_a_masked_value_leaves_the_written_profile_valid_yaml(profiles: Path) -> None:
    """A secret that also appears inside another value (a served name built from the key) is
    masked in that value, and the profile stays YAML: the mask, ``<redacted: NAME>``, holds a
    colon and a space, which a plain YAML scalar cannot."""
    script = f"{LAUNCH} --api-key team-alpha-key --served-model-name team-alpha-key-model\n"
    code, _, err = _run(["--profiles", str(profiles), "import", "-", "--name", "s"], script)
    assert code == ExitCode.OK, err
    text = (profiles / "s.yaml").read_text()
    assert "team-alpha-key" not in text
    document = yaml.safe_load(text)
    assert document["model"]["served_model_name"] == "<redacted: API_KEY>-model"


def test_a_malformed_set_does_not_quote_the_secret_in_it() -> None:
    code, _, err = _run(["import", "-", "--set", f"HF_TOKEN:{HF}"], f"{LAUNCH}\n")
    assert code == ExitCode.USAGE
    assert "expected NAME=VALUE" in err
    assert HF not in err


@pytest.mark.parametrize(
    "text",
    [
        "a." * (1 << 17),
        "a=" * (1 << 17),
        "${a:-" * (1 << 16),
        "ab://u:" * (1 << 15),
        "-----BEGIN PRIVATE KEY-----" * (1 << 13),
        "eyJ" * (1 << 16),
        "[" * 50000 + "]" * 50000,
    ],
    ids=["dots", "pairs", "defaults", "urls", "pem-headers", "jwt-heads", "deep-json"],
)
def test_the_value_scanner_stays_linear_on_hostile_text(text: str) -> None:
    """A script is anyone's text (up to 4 MiB): every pattern is bounded, so 256 KiB of the
    worst repetition for each is read in well under a second, not minutes (unbounded, these
    took quadratic time: `a.a.a.` ran for over ten minutes at 4 MiB)."""
    import time

    from orchestrator.importing import credentials

    started = time.monotonic()
    credentials.secrets_in(text)
    assert time.monotonic() - started < 5


def test_a_credential_read_at_run_time_is_no_plaintext_secret() -> None:
    """`export HF_TOKEN=$(jq ... config.json)` in an `if`: the script names where the token comes
    from, and holds none (s-20 in the corpus)."""
    script = (
        'if [ -n "$CONFIG" ]; then\n'
        "  export HF_TOKEN=$(echo \"$CONFIG\" | jq -r '.hf_token')\nfi\n"
        f"{LAUNCH}\n"
    )
    _, out, _ = _run(["import", "--check", "-"], script)
    assert "[plaintext-secret]" not in out
