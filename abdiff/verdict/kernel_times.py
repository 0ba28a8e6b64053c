"""Which kernels account for a config's change: the per-kernel times of the capture pass.

Workers record, for each config in the kernel rounds, every kernel's (on the CPU:
operator's) total time in one profiled call (`RoundRecord.kernel_us`). A side's
time per kernel is the median over its rounds that have them; the difference B - A
per kernel, largest first, names what made a config slower or faster, or what a
new kernel costs. A kernel whose template arguments changed (`softmax<float>` on A,
`softmax<BFloat16>` on B) is one line, `softmax<float> -> <BFloat16>`, not one
removed and one added; the full names stay in the JSON.
"""

from __future__ import annotations

import re
import statistics

from abdiff.store.records import KernelDelta, RoundRecord

ROOT_CAUSE_SHARE = 0.8  # name the kernels that together account for this much of |B - A|
ROOT_CAUSE_LIMIT = 5
_TEMPLATE = re.compile(r"<.*>")  # greedy: the outermost template argument list
_ARGUMENTS = re.compile(r"\(.*\)$")  # a demangled name's parameter list


def kernel_family(name: str) -> str:
    """A kernel's name without its template arguments and parameter list."""
    return _TEMPLATE.sub("<>", _ARGUMENTS.sub("", name))


def side_kernel_us(rounds: list[RoundRecord],
                   field: str = "kernel_us") -> dict[str, float] | None:
    """Per kernel (with `field="module_us"`: per module), the median of its total time over
    the side's rounds that recorded times (one a round did not run counts 0 there); None
    when no round has them."""
    timed = [getattr(r, field) for r in rounds if r.status == "ok" and getattr(r, field)]
    if not timed:
        return None
    names = sorted({name for times in timed for name in times})
    return {name: statistics.median(times.get(name, 0.0) for times in timed) for name in names}


def lacks_times(rounds: list[RoundRecord]) -> bool:
    """Whether a side named its kernels without their times (from its timed graphs: the
    worker's graph_kernels): `root_cause` needs a capture of their times."""
    return any(r.kernels for r in rounds if r.status == "ok") and side_kernel_us(rounds) is None


def _renamed(name_a: str, name_b: str) -> str:
    """`softmax<float> -> <BFloat16>`: B's name from where it starts to differ in brackets."""
    cut = 0
    for i, (x, y) in enumerate(zip(name_a, name_b, strict=False)):
        if x != y:
            break
        if x in "<(":
            cut = i
    return f"{name_a} -> {name_b[cut:]}" if cut else f"{name_a} -> {name_b}"


def kernel_deltas(a: dict[str, float], b: dict[str, float]) -> list[KernelDelta]:
    """Per kernel, A's and B's time and the difference, largest |difference| first, cut to
    the kernels that account for ROOT_CAUSE_SHARE of the total (at most ROOT_CAUSE_LIMIT)."""
    only_a = [n for n in a if n not in b]
    only_b = [n for n in b if n not in a]
    deltas = [KernelDelta(n, a[n], b[n], b[n] - a[n]) for n in a if n in b]
    paired: set[str] = set()
    for family in {kernel_family(n) for n in only_a}:
        in_a = [n for n in only_a if kernel_family(n) == family]
        in_b = [n for n in only_b if kernel_family(n) == family]
        if len(in_a) == 1 and len(in_b) == 1:  # one instantiation replaced by another
            deltas.append(KernelDelta(_renamed(in_a[0], in_b[0]), a[in_a[0]], b[in_b[0]],
                                      b[in_b[0]] - a[in_a[0]]))
            paired.update((in_a[0], in_b[0]))
    deltas += [KernelDelta(n, a[n], 0.0, -a[n]) for n in only_a if n not in paired]
    deltas += [KernelDelta(n, 0.0, b[n], b[n]) for n in only_b if n not in paired]
    deltas.sort(key=lambda d: (-abs(d.delta_us), d.kernel))
    total = sum(abs(d.delta_us) for d in deltas)
    kept: list[KernelDelta] = []
    covered = 0.0
    for delta in deltas:
        if len(kept) == ROOT_CAUSE_LIMIT or covered >= ROOT_CAUSE_SHARE * total or \
                delta.delta_us == 0:
            break
        kept.append(delta)
        covered += abs(delta.delta_us)
    return [KernelDelta(d.kernel, round(d.a_us, 3), round(d.b_us, 3), round(d.delta_us, 3))
            for d in kept]


def root_cause(rounds_a: list[RoundRecord], rounds_b: list[RoundRecord]) -> list[KernelDelta]:
    """The kernels behind a config's difference; empty where a side recorded no times."""
    a, b = side_kernel_us(rounds_a), side_kernel_us(rounds_b)
    if a is None or b is None:
        return []
    return kernel_deltas(a, b)


def module_cause(rounds_a: list[RoundRecord], rounds_b: list[RoundRecord]) -> list[KernelDelta]:
    """The modules (NVTX ranges) behind a config's difference, as `root_cause` for kernels."""
    a, b = side_kernel_us(rounds_a, "module_us"), side_kernel_us(rounds_b, "module_us")
    if a is None or b is None:
        return []
    return kernel_deltas(a, b)


def profiled_total(rounds: list[RoundRecord]) -> float | None:
    """A side's total kernel time in the profiled call (the sum of `side_kernel_us`), what
    the shares of `root_cause` are shares of; None when no round has kernel times."""
    times = side_kernel_us(rounds)
    return None if times is None else round(sum(times.values()), 3)
