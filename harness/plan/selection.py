"""`-k` and `-m` over cells, with pytest's own expression grammar.

We reuse `_pytest.mark.expression.Expression` (the parser behind pytest's -k and -m) rather than
writing a second parser, so `python -m harness run -k ...` and `pytest -k ...` accept exactly the
same expressions (and/or/not, parentheses). It is a private pytest module, hence the narrow
import here and the clear error if it moves.

-k: a name matches when it is a case-insensitive substring of the cell id (as pytest matches
item names), or equals one of the cell's markers. -m: a name matches one of the cell's markers.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.errors import SelectionError, explain
from harness.plan.cell import CORE, RESUME_SEPARATOR, Cell


def _compile(expr: str, flag: str) -> Callable[[Callable[..., bool]], bool]:
    try:
        from _pytest.mark.expression import Expression
    except ImportError as exc:  # pragma: no cover - pytest is a test dependency
        raise SelectionError(f"{flag} needs pytest installed (pip install pytest): {exc}") from None
    try:
        compiled = Expression.compile(expr)
    except Exception as exc:  # pytest raises its own ParseError type (private, moves between versions)
        raise SelectionError(
            explain(
                f"{flag} {expr!r}",
                f"it does not parse ({exc})",
                "names joined by and / or / not, with parentheses, as in pytest",
                f"e.g. {flag} 'zero3 and not bf16'",
            )
        ) from None
    return compiled.evaluate


def keyword_matches(cell: Cell, expr: str) -> bool:
    evaluate = _compile(expr, "-k")
    cell_id = cell.id.lower()
    markers = set(cell.markers)

    def matcher(name: str, /, **kwargs: object) -> bool:
        return name.lower() in cell_id or name in markers

    return evaluate(matcher)


def marker_matches(cell: Cell, expr: str) -> bool:
    evaluate = _compile(expr, "-m")
    markers = set(cell.markers)

    def matcher(name: str, /, **kwargs: object) -> bool:
        return name in markers

    return evaluate(matcher)


def select(cells: list[Cell], keyword: str | None, markexpr: str | None) -> list[Cell]:
    """Cells matching both expressions (None or "" = no filter), in their given order."""
    if keyword:
        _compile(keyword, "-k")  # parse once up front so a bad expression fails even with no cells
    if markexpr:
        _compile(markexpr, "-m")
    return [
        cell
        for cell in cells
        if (not keyword or keyword_matches(cell, keyword))
        and (not markexpr or marker_matches(cell, markexpr))
    ]


def opt_in_requested(keyword: str | None, word: str) -> bool:
    """Opt-in cells (the canaries) join the candidates only when the -k text names their word."""
    return bool(keyword) and word.lower() in (keyword or "").lower()


def resume_requested(keyword: str | None, markexpr: str | None) -> bool:
    """Whether the resume cells join the candidates: in every run without -k (the whole matrix,
    or a -m selection, which their markers answer like any cell's: `-m "not resume"` leaves them
    out), and with a -k only when it names `resume` or a resume id (only those hold the ':'
    between source and destination). A -k of a cell id is a substring of the resume ids that
    start from that cell, so without this rule `-k lm-cpu2-zero3-fp32` would run resume cells too."""
    if not keyword:
        return True
    words = f"{keyword} {markexpr or ''}".lower()
    return "resume" in words or RESUME_SEPARATOR in keyword


def of_implementations(cells: list[Cell], axis: list[str], asked: list[str] | None) -> list[Cell]:
    """The cells of the implementations asked for (`--implementation`, repeatable, or "all";
    default: the core's), checked against the matrix's implementation axis."""
    axis = axis or [CORE]
    wanted = set(axis) if asked and "all" in asked else set(asked or [CORE])
    unknown = sorted(wanted - set(axis))
    if unknown:
        raise SelectionError(explain(f"--implementation {', '.join(unknown)}",
                                     "it is not a value of the matrix's implementation axis",
                                     [*axis, "all"], "pick from these, or add it to [axes] implementation"))
    return [cell for cell in cells if cell.implementation in wanted]
