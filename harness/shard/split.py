"""The split of a selection into N shards: the same on every machine, balanced, shapes kept whole.

`plan_shards(cells, count, costs)` returns, for each shard, the positions (0-based, ascending)
of its cells in the selection: a shard runs its cells in the selection's order, and the merge
puts the shards' cells back into that order. Only the cells' ids, their order and the costs
decide (never the host: a CUDA cell costs the same on a machine that would skip it), and every
tie is broken by a key or an index, so any machine computes the same split.

Cost model: a shard costs its cells' seconds plus one start-up for each launch shape it holds
(`harness.run.runner.launch_group_key`: its cells share one launch; resume cells count as one
shape of their own, their launches being shared between them). A start-up (7-10 s) outweighs
dozens of cells (0.1-0.6 s), so spreading every shape over every shard, as a longest-first
greedy over single cells would, pays it N times per shape. Hence two candidate splits:

1. Whole shapes, longest first: each shape (costliest first, ties by key) onto the cheapest
   shard so far (ties: the lowest index). No launch is added.
2. Cut shapes: every cell in one fixed sequence (shapes by key, cells by id), cut into N runs
   of consecutive cells at the smallest maximum that filling shard after shard can reach (found
   by bisection). At most N-1 shapes are cut, each cut adding one start-up, and the shards end
   within about one cell of each other. Then each cut shape's cells are dealt again, longest
   first (ties by id), each to the least loaded of the shards that shape spans: a few costly
   cells (measured ones, --shard-costs) no longer land together because their ids are close.
   The better of the two (the cheaper costliest shard) is the cut split.

The whole-shape split is kept when its costliest shard is within SLACK of the cut split's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.plan.cell import Cell, ResumeCell
from harness.run.runner import launch_group_key
from harness.shard.costs import CostModel

SLACK = 0.10  # 10% longer wall time is worth a launch (and its 7-10 s of machine time) saved
_BISECTIONS = 60  # halvings of the capacity interval: far below a millisecond at the end


@dataclass(frozen=True)
class Plan:
    shards: tuple[tuple[int, ...], ...]  # each shard's positions in the selection, ascending
    seconds: tuple[float, ...]  # each shard's estimated cost (cells + start-ups)


def shape_of(cell: Cell) -> str:
    return "resume" if isinstance(cell, ResumeCell) else launch_group_key(cell)


class _Costs:
    def __init__(self, cells: Sequence[Cell], costs: CostModel) -> None:
        self.ids = [cell.id for cell in cells]
        self.shapes = [shape_of(cell) for cell in cells]
        self.seconds = [costs.cell_seconds(cell) for cell in cells]
        self.startup = costs.startup_s

    def of(self, positions: Sequence[int]) -> float:
        # Summed in id order: the same float, to the last bit, whatever order the cells came in.
        ordered = sorted(positions, key=lambda i: (self.ids[i], i))
        shapes = {self.shapes[i] for i in ordered}
        return sum(self.seconds[i] for i in ordered) + self.startup * len(shapes)


def _whole_shapes(cells: Sequence[Cell], count: int, costs: _Costs) -> list[list[int]]:
    groups: dict[str, list[int]] = {}
    for position, cell in enumerate(cells):
        groups.setdefault(shape_of(cell), []).append(position)
    units = sorted(groups.items(), key=lambda unit: (-costs.of(unit[1]), unit[0]))
    shards: list[list[int]] = [[] for _ in range(count)]
    loads = [0.0] * count
    for _, positions in units:
        cheapest = min(range(count), key=lambda k: (loads[k], k))
        shards[cheapest] += positions
        loads[cheapest] = costs.of(shards[cheapest])
    return shards


def _fill(sequence: Sequence[int], count: int, costs: _Costs, capacity: float) -> list[list[int]] | None:
    """Consecutive cells into shard after shard, each up to `capacity` (a cell always goes into
    an empty shard); None when more than `count` shards would be needed."""
    shards: list[list[int]] = [[]]
    load, shapes = 0.0, set[str]()
    for position in sequence:
        shape = costs.shapes[position]
        added = costs.seconds[position] + (0.0 if shape in shapes else costs.startup)
        if shards[-1] and load + added > capacity:
            if len(shards) == count:
                return None
            shards.append([])
            load, shapes = 0.0, set()
            added = costs.seconds[position] + costs.startup
        shards[-1].append(position)
        load += added
        shapes.add(shape)
    return shards


def _cut_shapes(cells: Sequence[Cell], count: int, costs: _Costs) -> list[list[int]]:
    sequence = sorted(range(len(cells)), key=lambda i: (costs.shapes[i], cells[i].id, i))
    high = costs.of(sequence)  # everything in one shard always fits
    low = high / count
    for _ in range(_BISECTIONS):
        middle = (low + high) / 2
        if _fill(sequence, count, costs, middle) is None:
            low = middle
        else:
            high = middle
    shards = _fill(sequence, count, costs, high) or [list(sequence)]
    return shards + [[] for _ in range(count - len(shards))]


def _redeal(shards: list[list[int]], costs: _Costs) -> list[list[int]]:
    """Each shape's cells dealt again, longest first, over the shards that already hold it."""
    spans: dict[str, list[int]] = {}
    for k, shard in enumerate(shards):
        for shape in sorted({costs.shapes[i] for i in shard}):
            spans.setdefault(shape, []).append(k)
    dealt: list[list[int]] = [[] for _ in shards]
    for shape in sorted(spans):
        pool = sorted((i for k in spans[shape] for i in shards[k]),
                      key=lambda i: (-costs.seconds[i], costs.ids[i], i))
        loads = {k: costs.of(dealt[k]) + costs.startup for k in spans[shape]}
        for position in pool:
            k = min(spans[shape], key=lambda k: (loads[k], k))
            dealt[k].append(position)
            loads[k] += costs.seconds[position]
    return dealt


def plan_shards(cells: Sequence[Cell], count: int, costs: CostModel) -> Plan:
    """Split `cells` (the selection, in order) into `count` disjoint shards covering it."""
    model = _Costs(cells, costs)
    whole = _whole_shapes(cells, count, model)
    cut = _cut_shapes(cells, count, model) if cells else whole
    redealt = _redeal(cut, model)
    if max(model.of(s) for s in redealt) < max(model.of(s) for s in cut):
        cut = redealt
    worst_whole = max(model.of(s) for s in whole)
    chosen = whole if worst_whole <= max(model.of(s) for s in cut) * (1 + SLACK) else cut
    return Plan(tuple(tuple(sorted(s)) for s in chosen), tuple(round(model.of(s), 3) for s in chosen))
