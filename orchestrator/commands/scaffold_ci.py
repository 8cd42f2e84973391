"""The CI workflow ``orch init`` writes for a team's profiles repository (GitHub Actions): on each
pull request that touches ``profiles/``, ``orch validate --strict``, then ``orch diff`` of the
change posted as comments that each push updates, and to the job summary. No secret: the
runner's own ``GITHUB_TOKEN`` posts. Checked by actionlint and GitHub's workflow schema, its
steps run by bash against a stand-in orch and gh (tests/unit/test_init_workflow.py)."""

from __future__ import annotations

import json
from importlib import metadata
from urllib.parse import urlsplit

import orchestrator

WORKFLOW_PATH = ".github/workflows/orch.yml"

# The line `orch diff --format markdown` writes between two comment bodies (docs/review.md).
DIFF_SEPARATOR = "<!-- orch diff: next comment -->"
# The first line the workflow gives each comment it posts: how a later run finds its own
# comments to update (orch's output needs no marker of its own).
COMMENT_MARKER = "<!-- orch ci: orch diff -->"

# Notes on the shell below (bash -eo pipefail, GitHub's `shell: bash`):
# - `${{ }}` never appears inside a `run:` script: values come in through `env:`, so nothing a
#   pull request controls is ever spliced into shell text.
# - `orch diff` exits 0 (no change) or 2 (changes) when it worked; anything else is an error,
#   posted with what it printed, and fails the job in the last step, after the comments.
# - Comments are matched by the marker AND the bot's login: a person quoting a comment is not
#   edited. Editing in place keeps the thread quiet on each push; surplus old ones are deleted.
WORKFLOW = """\
# Written by `orch init`. On each pull request that touches profiles/: `orch validate --strict`,
# then `orch diff` of the change, posted as a comment (updated on each push) and to the job
# summary. No secret to create: the runner's own GITHUB_TOKEN posts the comment. A pull request
# from a fork gets a read-only token: its report is in the job summary only.
name: orch

on:
  pull_request:
    paths:
      - "profiles/**"
      - ".github/workflows/orch.yml"

permissions:
  contents: read
  pull-requests: write

# One run per pull request: a new push cancels the run it supersedes (no two runs edit the
# same comments at once).
concurrency:
  group: orch-${{ github.event.pull_request.number }}
  cancel-in-progress: true

env:
  # What pip installs as orch, pinned to the orch that wrote this file. Point it at where your
  # team gets orch: a git URL ("orch @ git+https://git.example.net/you/orch@v@VERSION@"), a
  # wheel committed here ("./tools/orch-@VERSION@-py3-none-any.whl"), or your package index
  # (with PIP_INDEX_URL). "orch" on PyPI is another project: the install step checks.
  ORCH_PIP: "@ORCH_PIP@"
  ORCH_DIFF_SEPARATOR: "@SEPARATOR@"

defaults:
  run:
    shell: bash

jobs:
  review:
    runs-on: ubuntu-latest
    timeout-minutes: 20
    steps:
      - uses: actions/checkout@v5
        with:
          fetch-depth: 0  # every revision: orch diff reads the base of the change
          persist-credentials: false
      - uses: actions/setup-python@v6
        with:
          python-version: "3.12"
      - name: install orch
        id: install
        run: |
          python -m pip install --quiet "$ORCH_PIP"
          if ! python -c "import orchestrator"; then
            echo "::error::ORCH_PIP=$ORCH_PIP installed no orch: set ORCH_PIP (top of this file)"
            exit 1
          fi
          orch --version
      - name: orch validate --strict
        run: orch validate --strict
      - name: orch diff
        id: diff
        if: ${{ !cancelled() && steps.install.outcome == 'success' }}
        env:
          BASE_SHA: ${{ github.event.pull_request.base.sha }}
          HEAD_SHA: ${{ github.event.pull_request.head.sha }}
        run: |
          code=0
          # GitHub takes 65,536 characters a comment; the next step puts its marker line on each
          orch diff "$BASE_SHA...$HEAD_SHA" --format markdown --comment-limit 65000 \\
            > diff.md 2> diff.err || code=$?
          cat diff.err >&2
          if [ "$code" -ne 0 ] && [ "$code" -ne 2 ]; then
            if [ -s diff.md ]; then printf '%s\\n' "$ORCH_DIFF_SEPARATOR" >> diff.md; fi
            printf '**orch diff failed (exit %s)**\\n\\n~~~\\n%s\\n~~~\\n' \\
              "$code" "$(tail -c 4000 diff.err)" >> diff.md
          fi
          echo "exit=$code" >> "$GITHUB_OUTPUT"
          cat diff.md >> "$GITHUB_STEP_SUMMARY"
      - name: comment on the pull request
        if: >-
          ${{ !cancelled() && steps.diff.outcome == 'success'
          && github.event.pull_request.head.repo.full_name == github.repository }}
        continue-on-error: true  # a read-only token (Dependabot): the job summary has it all
        env:
          GH_TOKEN: ${{ github.token }}
          PR: ${{ github.event.pull_request.number }}
          MARKER: "@MARKER@"
        run: |
          rm -rf comments && mkdir comments
          awk -v sep="$ORCH_DIFF_SEPARATOR" -v marker="$MARKER" '
            NR == 1 || $0 == sep { n++; file = sprintf("comments/%03d.md", n); print marker > file }
            $0 != sep { print > file }' diff.md
          api="repos/$GITHUB_REPOSITORY/issues"
          mine=".[] | select(.user.login == \\"github-actions[bot]\\")"
          mine="$mine | select(.body | startswith(\\"$MARKER\\")) | .id"
          mapfile -t old < <(gh api --paginate "$api/$PR/comments" --jq "$mine")
          shopt -s nullglob
          posted=0
          for body in comments/*.md; do
            if [ "$posted" -lt "${#old[@]}" ]; then
              gh api --silent -X PATCH "$api/comments/${old[$posted]}" -F "body=@$body"
            else
              gh api --silent "$api/$PR/comments" -F "body=@$body"
            fi
            posted=$((posted + 1))
          done
          for id in "${old[@]:$posted}"; do
            gh api --silent -X DELETE "$api/comments/$id"
          done
      - name: orch diff's exit code
        if: ${{ !cancelled() && steps.diff.outcome == 'success' }}
        env:
          ORCH_DIFF_EXIT: ${{ steps.diff.outputs.exit }}
        run: |
          case "$ORCH_DIFF_EXIT" in
            0 | 2) echo "orch diff: exit $ORCH_DIFF_EXIT (0 no change, 2 changes)" ;;
            *) echo "::error::orch diff failed (exit $ORCH_DIFF_EXIT): see its report"; exit 1 ;;
          esac
"""


def workflow_text() -> str:
    """The workflow, its install line pinned to this orch."""
    return (
        WORKFLOW.replace("@ORCH_PIP@", orch_requirement())
        .replace("@VERSION@", orchestrator.__version__)
        .replace("@SEPARATOR@", DIFF_SEPARATOR)
        .replace("@MARKER@", COMMENT_MARKER)
    )


def orch_requirement() -> str:
    """What pip installs as this orch (see ``requirement_from``)."""
    try:
        recorded = metadata.distribution("orch").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        recorded = None
    return requirement_from(recorded, orchestrator.__version__)


def requirement_from(direct_url: str | None, version: str) -> str:
    """The git URL and commit orch was installed from (``pipx install git+https://...``: pip's
    ``direct_url.json``), else ``orch==VERSION`` for the team to point at its source. A URL that
    carries credentials is never written (the file is committed): the plain pin instead."""
    pinned = f"orch=={version}"
    try:
        direct = json.loads(direct_url) if direct_url else None
    except ValueError:
        return pinned
    if not isinstance(direct, dict):
        return pinned
    vcs, url = direct.get("vcs_info"), direct.get("url")
    if not isinstance(vcs, dict) or vcs.get("vcs") != "git" or not isinstance(url, str):
        return pinned
    commit = vcs.get("commit_id")
    parts = urlsplit(url)
    if not isinstance(commit, str) or parts.scheme != "https" or parts.username or parts.password:
        return pinned
    return f"orch @ git+{url}@{commit}"
