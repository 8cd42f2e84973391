"""What a condition leaves behind: the variables after an ``if``, a ``case`` or ``a && b``.

Conditions are not evaluated. The statement walker (``shell_script``) walks every arm from the
same variables, so that a launch in any of them is found, and ``settle`` says what each
variable is after the statement: the same in every outcome (kept), set in some arms to one
value and never before (taken, and said as a ``Choice``), the elements every arm's array
shares, or different (not guessed: an ``Unresolved`` placeholder until ``--set`` gives it).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Set

from orchestrator.importing.shell_words import Choice, Position, Unresolved, Variable, Word


def settle(
    before: dict[str, Variable],
    outcomes: list[dict[str, Variable]],
    where: Position,
    given: Set[str],
) -> tuple[dict[str, Variable], list[Choice]]:
    """The variables after a condition at ``where`` whose arms (and the way past it, when no
    arm must run) left ``outcomes``; ``given`` are the names ``--set`` settles. Returns them
    and the choices the condition makes."""
    settled: dict[str, Variable] = {}
    choices: list[Choice] = []
    for name in dict.fromkeys(n for outcome in outcomes for n in outcome):
        values = [outcome.get(name) for outcome in outcomes]
        if all(_same(v, values[0]) for v in values):
            if values[0] is not None:
                settled[name] = values[0]
            continue
        if name in given:  # --set settles it
            settled[name] = before[name]
            continue
        shown = tuple(
            dict.fromkeys(
                "unset" if v is None or v.value is None else repr(v.value.shown()) for v in values
            )
        )
        assigned = [v for v in values if v is not None]
        prefix = _common_elements(values)
        if prefix:  # an array the arms extend differently: the elements all arms share
            unknown = Word((Unresolved("variable", f"{name}[@]", where),), where, f"${{{name}[@]}}")
            settled[name] = Variable(
                prefix[0], any(v.exported for v in assigned), where, (*prefix, unknown)
            )
            choices.append(Choice(name, where, shown, None))
            continue
        if name not in before and all(_same(v, assigned[0]) for v in assigned):
            settled[name] = assigned[0]
            value = assigned[0].value
            choices.append(Choice(name, where, shown, value.shown() if value is not None else ""))
            continue
        settled[name] = Variable(
            Word((Unresolved("variable", name, where),), where, f"${{{name}}}"),
            any(v.exported for v in assigned),
            where,
        )
        choices.append(Choice(name, where, shown, None))
    return settled, choices


def _common_elements(values: list[Variable | None]) -> tuple[Word, ...]:
    """The first elements every outcome's array has alike (``ARGS+=(...)`` in some arms)."""
    arrays = [v.elements for v in values if v is not None]
    if len(arrays) != len(values) or any(a is None for a in arrays):
        return ()
    shortest = min(len(a) for a in arrays if a is not None)
    prefix: list[Word] = []
    for index in range(shortest):
        first = arrays[0][index]  # type: ignore[index]
        if any(a[index].parts != first.parts for a in arrays):  # type: ignore[index]
            break
        prefix.append(first)
    return tuple(prefix)


def _same(a: Variable | None, b: Variable | None) -> bool:
    if a is None or b is None:
        return a is b
    return (
        a.exported == b.exported
        and (a.value.parts if a.value else None) == (b.value.parts if b.value else None)
        and [w.parts for w in a.elements or ()] == [w.parts for w in b.elements or ()]
    )
