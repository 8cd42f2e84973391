"""``effective.sync``: each deployment's state by its precedence, and the apply order driven
through a recording double of the work (canary, halt, --max-failures, --max-unavailable, the
restore of a failed relaunch, the reasons a deployment is skipped)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from orchestrator.effective import sync
from orchestrator.effective.sync import (
    Acted,
    Options,
    Reviewed,
    Row,
    Seen,
    Unit,
    Verdict,
    Wanted,
    classify,
)
from orchestrator.model import RunState

WANTED = Wanted("b" * 40, "digest-new", "0.5.23", "git:team/profiles")


def running(
    digest: str = "digest-new",
    *,
    state: str = "READY",
    commit: str = "a" * 40,
    dirty: bool = False,
    repo: str = "git:team/profiles",
    **more: object,
) -> RunState:
    return RunState(
        deployed=True,
        state=state,
        agent_alive=True,
        ready=state == "READY",
        launch_digest=digest,
        git_commit=commit,
        git_dirty=dirty,
        profiles_repo=repo,
        **more,  # type: ignore[arg-type]
    )


# -- the states ------------------------------------------------------------------------------


def test_the_wanted_launch_ready_is_clean() -> None:
    verdict = classify(WANTED, Seen(running(), history=sync.ANCESTOR))
    assert (verdict.state, verdict.action, verdict.notes) == (sync.CLEAN, None, ())


@pytest.mark.parametrize(
    ("state", "seen", "why"),
    [
        ("none", Seen(RunState(deployed=False)), "not deployed"),
        ("exited", Seen(running(state="EXITED")), "stopped (EXITED)"),
        ("fatal", Seen(running(state="FATAL", message="start limit hit")), "FATAL: start limit"),
        ("backoff", Seen(running(state="BACKOFF")), "BACKOFF"),
        ("starting", Seen(running(state="STARTING")), "STARTING: not READY yet"),
        ("unreachable", Seen(None, "connection refused"), "host unreachable: connection refused"),
        ("stale", Seen(running(stale=True)), "its supervisor died"),
    ],
)
def test_down_says_which(state: str, seen: Seen, why: str) -> None:
    verdict = classify(WANTED, seen)
    assert verdict.state == sync.DOWN, state
    assert verdict.why.startswith(why)
    assert verdict.action == sync.START


def test_down_wins_over_every_other_state() -> None:
    # a dirty, other-version, other-launch server that has stopped is first of all down
    seen = Seen(running("old", state="EXITED", dirty=True), host_sglang="0.5.11")
    assert classify(WANTED, seen).state == sync.DOWN


@pytest.mark.parametrize(
    ("seen", "why"),
    [
        (Seen(running("old", dirty=True), history=sync.ANCESTOR), "dirty tree"),
        (Seen(running("old"), history=sync.DIVERGED), "not in the wanted commit's history"),
        (Seen(running("old"), history=sync.UNKNOWN), "does not have"),
        (Seen(running("old"), history=sync.NO_COMMIT), "not committed"),
        (
            Seen(running("old", repo="git:lab/serving"), history=sync.ANCESTOR),
            "another profiles repository",
        ),
    ],
)
def test_out_of_band_when_the_running_launch_is_not_from_the_history(seen: Seen, why: str) -> None:
    verdict = classify(WANTED, seen)
    assert verdict.state == sync.OUT_OF_BAND
    assert why in verdict.why


def test_out_of_band_wins_over_version_skew_and_pending() -> None:
    seen = Seen(running("old", dirty=True), history=sync.ANCESTOR, host_sglang="0.5.11")
    review = Reviewed("restart", ("mem_fraction_static",))
    assert classify(WANTED, seen, review).state == sync.OUT_OF_BAND


def test_a_dirty_launch_equal_to_the_wanted_one_is_clean_with_a_note() -> None:
    verdict = classify(WANTED, Seen(running(dirty=True), history=sync.ANCESTOR))
    assert verdict.state == sync.CLEAN
    assert verdict.notes == ("launched from a dirty tree; its launch is the wanted one",)


def test_version_skew_only_where_the_pin_and_the_host_are_known() -> None:
    skewed = classify(WANTED, Seen(running(), history=sync.SAME, host_sglang="0.5.11"))
    assert skewed.state == sync.VERSION_SKEW
    assert "0.5.11" in skewed.why
    assert "0.5.23" in skewed.why
    assert skewed.action is None
    unknown = classify(WANTED, Seen(running(), history=sync.SAME, host_sglang=None))
    assert unknown.state == sync.CLEAN
    unpinned = Wanted(WANTED.commit, WANTED.digest, None, WANTED.repo)
    assert classify(unpinned, Seen(running(), host_sglang="0.5.11")).state == sync.CLEAN


def test_version_skew_wins_over_pending() -> None:
    seen = Seen(running("old"), history=sync.ANCESTOR, host_sglang="0.5.11")
    assert classify(WANTED, seen, Reviewed("restart", ("x",))).state == sync.VERSION_SKEW


def test_pending_takes_the_reviews_action_and_fields() -> None:
    seen = Seen(running("old"), history=sync.ANCESTOR)
    verdict = classify(WANTED, seen, Reviewed("restart", ("mem_fraction_static",)))
    assert (verdict.state, verdict.action, verdict.forced_by) == (
        sync.PENDING,
        "restart",
        ("mem_fraction_static",),
    )
    assert verdict.why == "launch old -> digest-new"


def test_a_launch_that_differs_with_no_reviewed_change_is_a_restart_forced_by_the_launch() -> None:
    verdict = classify(WANTED, Seen(running("old"), history=sync.SAME))
    assert (verdict.state, verdict.action, verdict.forced_by) == (
        sync.PENDING,
        "restart",
        ("launch",),
    )


def test_the_same_launch_with_an_agent_only_change_is_pending() -> None:
    seen = Seen(running(), history=sync.ANCESTOR)
    verdict = classify(WANTED, seen, Reviewed("agent-only", ("restart.delay_s",)))
    assert (verdict.state, verdict.action) == (sync.PENDING, "agent-only")
    assert classify(WANTED, seen, Reviewed("none", ())).state == sync.CLEAN


# -- the plan ----------------------------------------------------------------------------------


def row(
    name: str,
    state: str,
    action: str | None,
    *,
    rank: int | None = None,
    replica: int | None = None,
    router: bool = False,
    profile: str | None = None,
) -> Row:
    deployment = name.split("[")[0]
    return Row(
        name,
        profile or deployment.split("@")[0],
        deployment,
        rank,
        replica,
        "gpu-1",
        Verdict(state, "why", action),
        behind_router=router,
    )


def test_plan_orders_in_place_then_starts_then_relaunches_and_says_why_it_skips() -> None:
    rows = [
        row("r1", sync.PENDING, "restart"),
        row("down1", sync.DOWN, sync.START),
        row("agent", sync.PENDING, "agent-only"),
        row("oob", sync.OUT_OF_BAND, "restart"),
        row("skew", sync.VERSION_SKEW, None),
        row("blocked", sync.PENDING, "blocked"),
        row("ok", sync.CLEAN, None),
        row("live", sync.PENDING, "live"),
    ]
    planned = sync.plan(rows, Options())
    assert [(u.name, u.kind) for u in planned.units] == [
        ("agent", sync.IN_PLACE),
        ("live", sync.IN_PLACE),
        ("down1", sync.STARTS),
        ("r1", sync.RELAUNCH),
    ]
    skipped = dict(planned.skipped)
    assert skipped["oob"].startswith("out-of-band")
    assert "--include-out-of-band" in skipped["oob"]
    assert skipped["skew"].startswith("version-skew")
    assert skipped["blocked"].startswith("blocked")
    assert planned.clean == ("ok",)
    included = sync.plan(rows, Options(include_out_of_band=True))
    assert "oob" in [u.name for u in included.units]


def test_a_groups_ranks_act_together_and_a_skipped_rank_holds_the_group() -> None:
    rows = [
        row("pair[0]", sync.PENDING, "agent-only", rank=0),
        row("pair[1]", sync.DOWN, sync.START, rank=1),
    ]
    (unit,) = sync.plan(rows, Options()).units
    assert (unit.name, unit.kind, unit.rows) == ("pair", sync.STARTS, ("pair[0]", "pair[1]"))
    held = [
        row("pair[0]", sync.PENDING, "restart", rank=0),
        row("pair[1]", sync.OUT_OF_BAND, "restart", rank=1),
    ]
    planned = sync.plan(held, Options())
    assert planned.units == ()
    assert dict(planned.skipped)["pair[0]"].startswith("another rank of the group is skipped")


def test_replicas_behind_a_router_roll_as_one_unit_others_one_by_one() -> None:
    rows = [
        row("web@0", sync.PENDING, "restart", replica=0, router=True),
        row("web@1", sync.PENDING, "restart", replica=1, router=True),
        row("web@2", sync.PENDING, "agent-only", replica=2, router=True),
        row("solo@0", sync.PENDING, "restart", replica=0),
        row("solo@1", sync.PENDING, "restart", replica=1),
    ]
    units = sync.plan(rows, Options()).units
    assert [(u.name, u.kind, u.replicas) for u in units] == [
        ("web@2", sync.IN_PLACE, ()),
        ("web", sync.ROLL, (0, 1)),
        ("solo@0", sync.RELAUNCH, ()),
        ("solo@1", sync.RELAUNCH, ()),
    ]


# -- the apply order ---------------------------------------------------------------------------


class Ops:
    """Records each batch; fails the units named in ``failing`` (and restores them unless in
    ``unrestorable``)."""

    def __init__(self, failing: Sequence[str] = (), unrestorable: Sequence[str] = ()) -> None:
        self.failing, self.unrestorable = set(failing), set(unrestorable)
        self.batches: list[list[str]] = []
        self.restored: list[str] = []

    def act(self, units: Sequence[Unit]) -> Sequence[Acted]:
        self.batches.append([u.name for u in units])
        return [Acted("not READY" if u.name in self.failing else None) for u in units]

    def restore(self, unit: Unit) -> str | None:
        self.restored.append(unit.name)
        return "FATAL again" if unit.name in self.unrestorable else None


def relaunches(n: int) -> list[Row]:
    return [row(f"s{i}", sync.PENDING, "restart") for i in range(n)]


def test_the_canary_goes_alone_then_max_unavailable_at_a_time() -> None:
    rows = [*relaunches(5), row("a", sync.PENDING, "agent-only"), row("d", sync.DOWN, sync.START)]
    options = Options(max_unavailable=2)
    ops = Ops()
    report = sync.apply(sync.plan(rows, options), ops, options)
    assert ops.batches == [["a"], ["d"], ["s0"], ["s1", "s2"], ["s3", "s4"]]
    assert report.ok
    assert {o.result for o in report.outcomes} == {sync.DONE}


def test_a_failed_canary_halts_whatever_max_failures_allows_and_is_restored() -> None:
    options = Options(max_failures=5)
    ops = Ops(failing=["s0"])
    report = sync.apply(sync.plan(relaunches(3), options), ops, options)
    assert ops.batches == [["s0"]]
    assert ops.restored == ["s0"]
    results = [(o.unit.name, o.result, o.restored) for o in report.outcomes]
    assert results == [
        ("s0", sync.FAILED, True),
        ("s1", sync.NOT_REACHED, None),
        ("s2", sync.NOT_REACHED, None),
    ]
    assert report.halted is not None
    assert "canary s0" in report.halted
    assert "put back on its previous launch" in report.outcomes[0].why


def test_the_first_failure_halts_by_default_and_what_was_not_reached_is_left() -> None:
    ops = Ops(failing=["s2"], unrestorable=["s2"])
    report = sync.apply(sync.plan(relaunches(5), Options()), ops, Options())
    assert ops.batches == [["s0"], ["s1"], ["s2"]]
    failed = report.outcomes[2]
    assert (failed.result, failed.restored) == (sync.FAILED, False)
    assert "did not come back: FATAL again" in failed.why
    assert [o.result for o in report.outcomes[3:]] == [sync.NOT_REACHED] * 2
    assert not report.ok


def test_max_failures_goes_on_until_the_nth_failure() -> None:
    options = Options(max_failures=2)
    ops = Ops(failing=["s1", "s3"])
    report = sync.apply(sync.plan(relaunches(6), options), ops, options)
    assert ops.batches == [["s0"], ["s1"], ["s2"], ["s3"]]
    assert report.failures == 2
    assert report.halted == "2 failure(s), the most --max-failures allows"
    assert [o.result for o in report.outcomes[4:]] == [sync.NOT_REACHED] * 2


def test_one_failure_under_max_failures_completes_the_rollout_but_is_not_ok() -> None:
    options = Options(max_failures=2)
    report = sync.apply(sync.plan(relaunches(3), options), Ops(failing=["s1"]), options)
    assert report.halted is None
    assert report.failures == 1
    assert not report.ok


def test_a_failed_start_or_in_place_change_is_not_restored() -> None:
    rows = [row("a", sync.PENDING, "agent-only"), row("d", sync.DOWN, sync.START)]
    options = Options(max_failures=3)
    ops = Ops(failing=["a", "d"])
    report = sync.apply(sync.plan(rows, options), ops, options)
    assert ops.restored == []
    assert [(o.result, o.restored) for o in report.outcomes] == [
        (sync.FAILED, None),
        (sync.FAILED, None),
    ]


def test_a_roll_restores_itself() -> None:
    class Rolling(Ops):
        def act(self, units: Sequence[Unit]) -> Sequence[Acted]:
            self.batches.append([u.name for u in units])
            return [Acted("replica 1 failed its soak", restored=True) for _ in units]

    rows = [row("web@0", sync.PENDING, "restart", replica=0, router=True)]
    ops = Rolling()
    report = sync.apply(sync.plan(rows, Options()), ops, Options())
    assert ops.restored == []
    assert (report.outcomes[0].result, report.outcomes[0].restored) == (sync.FAILED, True)


def test_a_relaunch_refused_by_another_orchs_lock_is_a_failure_with_nothing_to_put_back() -> None:
    class Locked(Ops):
        def act(self, units: Sequence[Unit]) -> Sequence[Acted]:
            self.batches.append([u.name for u in units])
            return [Acted("s0 on gpu-1 is locked by alice@laptop's orch sync", touched=False)]

    ops = Locked()
    report = sync.apply(sync.plan(relaunches(2), Options()), ops, Options())
    assert ops.restored == []  # it was never touched: its running launch is another orch's now
    assert [(o.unit.name, o.result, o.restored) for o in report.outcomes] == [
        ("s0", sync.FAILED, None),
        ("s1", sync.NOT_REACHED, None),
    ]
    assert report.halted is not None
    assert "locked by alice@laptop" in report.halted
