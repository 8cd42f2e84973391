"""What is a secret: the one classifier that ``orch import`` (what becomes ``{from_env: NAME}``),
``orch import --check`` (a secret written in a script) and the redaction of import's output use.

A value is a secret

- by its **name**: a variable, flag or JSON key whose name says credential (``*TOKEN*``, ``*KEY*``,
  ``*SECRET*``, ``*PASSWORD*``, ``*PASS``, ``*CREDENTIAL*``, ``*AUTH*``, ...), whatever its value,
  except the named settings that only mention one of those words (``_SETTING_CONTEXT`` says
  which, and why);
- by its **place**: the value of SGLang's own credential options (``SECRET_ARGS``, from the
  argument tables) and of ``sshpass -p``;
- by its **shape**: a known token format anywhere in the value (``hf_``, ``sk-``, ``ghp_``, a JWT,
  an ``AKIA`` key id, a PEM private key, ``Bearer ...``), whatever its name;
- **inside** it: a password in a URL (``scheme://user:pw@host``), a JSON object or a
  ``key=value`` list with a key that names a credential.

Pure: no I/O.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# SGLang's options that hold a credential (server_args.py: "Set API key of the server", "admin
# API key", "The password to decrypt the SSL keyfile"): every other option of the argument
# tables names a path, a size or a switch (--ssl-keyfile is the key's path, not the key).
SECRET_ARGS = frozenset({"api_key", "admin_api_key", "ssl_keyfile_password"})
SECRET_FLAGS = ("--api-key", "--admin-api-key", "--ssl-keyfile-password")

# -- by name --------------------------------------------------------------------------------------

# A word of a name that says credential (a name's words: split at `_`, `-`, `.` and camelCase).
_CREDENTIAL_WORDS = frozenset(
    {
        "TOKEN",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWD",
        "PASSPHRASE",
        "PASS",
        "PWD",
        "KEY",
        "KEYS",
        "APIKEY",
        "CREDENTIAL",
        "CREDENTIALS",
        "CREDS",
        "AUTH",
        "AUTHORIZATION",
        "AUTHTOKEN",
        "COOKIE",
    }
)
# Words that end in a credential word but are one (NGROK_AUTHTOKEN, SSHPASS, HFTOKEN ...).
_GLUED_RE = re.compile(r"^[A-Z0-9]+(TOKEN|SECRET|PASSWORD|PASSWD|PASS|APIKEY|ACCESSKEY)$")
_NOT_GLUED = frozenset({"BYPASS", "COMPASS", "SURPASS", "TRESPASS"})  # words, not credentials
# The shell's own working directories: not MySQL's MYSQL_PWD.
_SHELL_NAMES = frozenset({"PWD", "OLDPWD"})
# A name that ends with one of these names where a credential is kept, not the credential
# (HF_TOKEN_PATH, SSL_KEYFILE, PGPASSFILE): the file never enters a profile.
_LOCATION_RE = re.compile(r"(FILE|FILES|PATH|PATHS|DIR|DIRS|FOLDER)$")
# The words around TOKEN/KEY/AUTH/SECRET that make a name a setting, each from the settings that
# use it. TOKEN is, for SGLang, a unit of text: counts, ratios and modes of tokens
# (python/sglang/srt/environ.py: SGLANG_USE_AITER_FP8_PER_TOKEN, SGLANG_INIT_NEW_TOKEN_RATIO,
# SGLANG_SIMULATE_ACC_TOKEN_MODE, SGLANG_SYNC_TOKEN_IDS_ACROSS_TP,
# SGLANG_PREFILL_DELAYER_TOKEN_USAGE_LOW_WATERMARK, SGLANG_KV_CANARY_PERTURB_NEXT_TOKEN_SWAP_PROB,
# SGLANG_KV_CANARY_ENABLE_VERIFY_TOKEN_ASSERT; flags --bucket-time-to-first-token,
# --bucket-inter-token-latency, --ds-heavy-token-num, --speculative-token-map,
# --tbo-token-distribution-threshold; SGLang's req_to_token_pool and token_to_kv_pool, named
# in builds' switches: SGLANG_ASSIGN_REQ_TO_TOKEN_POOL); a KEY after GRAPH/CACHE/SORT/HASH
# names a lookup key (SGLANG_LOG_DECODE_GRAPH_KEY is a switch that logs one); a SECRET/KEY
# followed by NAME or a NAME of a Kubernetes Secret; AUTH followed by TYPE/MODE/METHOD/URL is
# how to authenticate.
_SETTING_BEFORE: dict[str, frozenset[str]] = {
    "TOKEN": frozenset(
        {
            "PER",
            "FIRST",
            "NEXT",
            "NEW",
            "INTER",
            "LAST",
            "BOS",
            "EOS",
            "PAD",
            "UNK",
            "SEP",
            "CLS",
            "MASK",
            "SPECIAL",
            "DRAFT",
            "HEAVY",
            "THINK",
            "STOP",
            "IMAGE",
            "VIDEO",
            "AUDIO",
            "TO",
        }
    ),
    "KEY": frozenset(
        {
            "GRAPH",
            "CACHE",
            "SORT",
            "HASH",
            "ROUTING",
            "PARTITION",
            "SHARD",
            "LOOKUP",
        }
    ),
}
_SETTING_AFTER: dict[str, frozenset[str]] = {
    "TOKEN": frozenset(
        {
            "RATIO",
            "MODE",
            "IDS",
            "ID",
            "USAGE",
            "NUM",
            "COUNT",
            "LIMIT",
            "BUDGET",
            "MAP",
            "SWAP",
            "ORACLE",
            "ASSERT",
            "LATENCY",
            "DISTRIBUTION",
            "LEN",
            "LENGTH",
            "SIZE",
            "LEVEL",
            "THRESHOLD",
            "RATE",
            "STEPS",
            "BUCKETS",
            "GROUP",
            "ACTIVATION",
            "INDEX",
            "TYPE",
            "POOL",
            "POOLS",
            "TO",
        }
    ),
    "KEY": frozenset(
        {
            "NAME",
            "FIELD",
            "PREFIX",
            "LEN",
            "LENGTH",
            "SIZE",
            "BITS",
            "TYPE",
            "FORMAT",
        }
    ),
    "SECRET": frozenset({"NAME", "REF"}),
    "SECRETS": frozenset({"NAME"}),
    "AUTH": frozenset(
        {
            "TYPE",
            "MODE",
            "METHOD",
            "ENABLED",
            "ENABLE",
            "DISABLED",
            "URL",
            "HOST",
            "PORT",
            "PROVIDER",
            "SCHEME",
            "BACKEND",
        }
    ),
}
# A switch about a credential, not the credential: ENABLE_AUTH, DISABLE_AUTH, USE_AUTH.
_SWITCH_WORDS = frozenset({"ENABLE", "DISABLE", "USE", "SKIP", "NO", "REQUIRE"})


def name_words(name: str) -> list[str]:
    """A name's words: ``HF_TOKEN``, ``accessToken``, ``--api-key`` -> [HF, TOKEN], [ACCESS,
    TOKEN], [API, KEY]."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name.strip("-"))
    return [word for word in re.split(r"[_.\-\s]+", spaced.upper()) if word]


def secret_name(name: str) -> bool:
    """Whether ``name`` (a variable, a flag, a JSON key) says its value is a credential."""
    words = name_words(name)
    if not words or name.upper() in _SHELL_NAMES or _LOCATION_RE.search(words[-1]):
        return False
    for index, word in enumerate(words):
        base = _credential_word(word)
        if base is None:
            continue
        before = words[index - 1] if index else ""
        after = words[index + 1] if index + 1 < len(words) else ""
        if before in _SETTING_BEFORE.get(base, ()) or after in _SETTING_AFTER.get(base, ()):
            continue
        if before in _SWITCH_WORDS and index + 1 == len(words):
            continue
        if base == "PASS" and index + 1 != len(words):
            continue  # *PASS: the last word (DB_PASS), never PASS_MS or PASSES
        return True
    return False


def _credential_word(word: str) -> str | None:
    """The credential word ``word`` is (or ends with), else None."""
    if word in _CREDENTIAL_WORDS:
        return "SECRET" if word == "SECRETS" else "KEY" if word in ("KEYS", "APIKEY") else word
    if word in _NOT_GLUED:
        return None
    match = _GLUED_RE.match(word)
    if match is None:
        return None
    return {"APIKEY": "KEY", "ACCESSKEY": "KEY"}.get(match.group(1), match.group(1))


# -- by shape and inside --------------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    """A secret inside a value: what it is (for a message) and the secret text itself."""

    what: str
    value: str


_BOUNDARY = r"(?<![A-Za-z0-9_-])"
# Known token formats, each with the length its issuer gives it, so that a path or a word
# (hf_cache, sk-learn) is no match. Sources: Hugging Face (hf_ + 34), OpenAI (sk-, sk-proj-,
# sk-svcacct-), Anthropic (sk-ant-api03-), GitHub (ghp_/gho_/ghu_/ghs_/ghr_ + 36,
# github_pat_), GitLab (glpat- + 20), Slack (xoxb-/xoxp-/xoxa-/xoxr-/xoxs-), AWS access key ids
# (AKIA/ASIA + 16), Google API keys (AIza + 35), JSON Web Tokens.
# Each with the literal every match holds: a text without it is not scanned (a substring
# search runs at memory speed; the patterns' leading lookbehind keeps re from searching for
# their literal prefix itself, ~30 ns a character per pattern).
_TOKEN_FORMATS: tuple[tuple[str, tuple[str, ...], re.Pattern[str]], ...] = tuple(
    (what, markers, re.compile(_BOUNDARY + pattern))
    for what, markers, pattern in (
        ("a Hugging Face token", ("hf_",), r"hf_[A-Za-z0-9]{30,}"),
        ("an Anthropic API key", ("sk-ant-",), r"sk-ant-[A-Za-z0-9_-]{20,}"),
        ("an OpenAI API key", ("sk-",), r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
        ("a GitHub token", ("github_pat_",), r"github_pat_[A-Za-z0-9_]{22,}"),
        ("a GitHub token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), r"gh[pousr]_[A-Za-z0-9]{30,}"),
        ("a GitLab token", ("glpat-",), r"glpat-[A-Za-z0-9_-]{20,}"),
        ("a Slack token", ("xox",), r"xox[abprs]-[A-Za-z0-9-]{10,}"),
        (
            "an AWS access key id",
            ("AKIA", "ASIA"),
            r"(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])",
        ),
        ("a Google API key", ("AIza",), r"AIza[A-Za-z0-9_-]{35}"),
        (
            "a JSON Web Token",
            ("eyJ",),
            r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
        ),
    )
)
# Every repetition below is bounded, or starts only where a boundary allows one start per run:
# the scanner reads up to 4 MiB of anyone's text, and must stay linear in it.
_PEM_RE = re.compile(
    r"-----BEGIN ([A-Z0-9 ]{0,32}PRIVATE KEY)-----([A-Za-z0-9+/=\s]{0,16384}+)"
    r"(?:-----END \1-----)?"
)
_BEARER_RE = re.compile(r"\b(?:Bearer|Basic)[ \t]{1,8}([A-Za-z0-9._~+/=-]{8,})")
# scheme://user:password@host: the password (a user alone, user@host, is no secret)
_URL_PASSWORD_RE = re.compile(
    r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,31}://[^/\s:@]{0,256}:([^/\s@]{1,256})@"
)
# key=value or key: value inside a value (a query string, a header, a config list)
# (a lookahead: pairs may overlap, as ``s3://b/x?token=...`` where ``s3:`` is read first; not
# the shell's ``${NAME:-default}``, read by _DEFAULT_RE, nor ``${NAME:?message}``)
_PAIR_RE = re.compile(
    r"""(?<![A-Za-z0-9_])(?=((?i:[A-Za-z0-9_]{0,40}?(?:token|secret|pass|pwd|key|cred|auth|cookie)"""
    r"""[A-Za-z0-9_]{0,40}+))["']?[ \t]{0,8}+(?:=|:(?![-=?+]))"""
    r"""[ \t]{0,8}+["']?([^\s"',;&}{=]{1,256}+))"""
)
# a password by its place in a command that orch does not read as a launch
_PASSWORD_OPTION_RE = re.compile(r"""\bsshpass[ \t]{1,8}-p[ \t]{0,8}["']?([^\s"']{1,256})""")
_DEFAULT_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]{0,63}+):?[-=]([^}${]{0,1024}+)\}")
_AUTH_SCHEMES = frozenset({"Bearer", "Basic", "Digest", "Token"})


def secrets_in(text: str) -> tuple[Hit, ...]:
    """Every secret inside ``text`` by its shape or by what surrounds it (a URL's password, a
    JSON or ``key=value`` credential), in order, each once."""
    hits: list[Hit] = []
    for what, markers, pattern in _TOKEN_FORMATS:
        if any(marker in text for marker in markers):
            hits.extend(Hit(what, m.group(0)) for m in pattern.finditer(text))
    if "-----BEGIN " in text:
        for match in _PEM_RE.finditer(text):
            hits.append(Hit(f"a PEM {match.group(1).lower()}", match.group(0).strip()))
    if "Bearer" in text or "Basic" in text:
        hits.extend(Hit("a bearer token", m.group(1)) for m in _BEARER_RE.finditer(text))
    if "://" in text:
        hits.extend(Hit("a password in a URL", m.group(1)) for m in _URL_PASSWORD_RE.finditer(text))
    if "sshpass" in text:
        hits.extend(
            Hit("sshpass -p's value", m.group(1)) for m in _PASSWORD_OPTION_RE.finditer(text)
        )
    document = _json(text)
    if document is not None:
        with contextlib.suppress(RecursionError):  # deeper than any configuration: not read
            hits.extend(_json_secrets(document))
    else:
        pairs = [(m.group(1), m.group(2)) for m in _PAIR_RE.finditer(text)]
        pairs += [(m.group(1), m.group(2).strip("\"'")) for m in _DEFAULT_RE.finditer(text)]
        hits.extend(
            Hit(f"{name}=...", value)
            for name, value in pairs
            if secret_name(name)
            and not value.startswith(("$", "<"))  # a variable, or a placeholder: nothing held
            and value not in _AUTH_SCHEMES  # Authorization: Bearer ...: _BEARER_RE's
        )
    unique: dict[str, Hit] = {}
    for hit in hits:
        if hit.value:
            unique.setdefault(hit.value, hit)
    if len(unique) <= _FEW:  # a value inside another (a JWT in a bearer token) is said once
        unique = {
            value: hit
            for value, hit in unique.items()
            if not any(value in other for other in unique if other != value)
        }
    return tuple(unique.values())


_FEW = 64  # more hits than a script has secrets: each one as it is, not compared


def _json(text: str) -> Any:
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return None
    try:
        return json.loads(stripped)
    except (ValueError, RecursionError):
        return None


def _json_secrets(document: Any, key: str = "") -> Iterator[Hit]:
    if isinstance(document, dict):
        for name, value in document.items():
            yield from _json_secrets(value, str(name))
    elif isinstance(document, list):
        for value in document:
            yield from _json_secrets(value, key)
    elif isinstance(document, str) and document and key and secret_name(key):
        yield Hit(f"the JSON key {key!r}", document)


# -- a value, by name and by shape ----------------------------------------------------------------


def why_secret(name: str | None, text: str | None) -> str | None:
    """Why the value ``text`` given to ``name`` (None: no name, or the value is not known here)
    is a secret, or None. An empty value is no secret: there is nothing to hide."""
    if text == "":
        return None
    if name is not None and secret_name(name):
        return f"{name.lstrip('-')} names a credential"
    if text is None:
        return None
    hits = secrets_in(text)
    return hits[0].what if hits else None


def placeholder_value(text: str) -> bool:
    """A value a document writes to be replaced (``<secret>``, ``YOUR_API_KEY``, ``hf_xxx``)."""
    return bool(
        re.fullmatch(r"<[^<>]*>|\{[^{}]*\}|(?i:your[_-]?.*|.*[_-]here|x+|\.\.\.|\*+)", text)
        or re.fullmatch(r"[a-z]{2,4}[_-](x+|\.\.\.|\*+)", text, re.I)
    )
