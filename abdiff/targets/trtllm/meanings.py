"""What a fact means at a commit: a fact recorded under one name across upstream's history.

`attn_metadata.kv_lens_cuda_2d.shape` was `[max_num_sequences, 1 + max_draft_tokens]` at
the seed (its columns were the draft length the pack announced) and is
`[max_num_sequences, 1 + _draft_sizing_cap]` in today's dsa.py, where `_draft_sizing_cap`
is a capacity that only grows (the largest draft length announced in the process). The
same value means something else on each side, so a difference of values across such a
change is neither a regression nor a match: compare.py reports the change of meaning and
leaves the values uncompared.

Each side's meanings are read from its checkout with the ast module (no import), into the
run file's env (`fact_meanings`, by TrtllmTarget.env_info).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

ATTENTION = "tensorrt_llm/_torch/attention_backend"
DSA_FILES = (f"{ATTENTION}/sparse/dsa.py", f"{ATTENTION}/sparse/dsa/metadata.py")


@dataclass(frozen=True)
class Meaning:
    """The fact means `what` where the attribute's assignment reads `marker`."""

    marker: str
    what: str


@dataclass(frozen=True)
class FactMeanings:
    """The meanings one attribute's facts have had, newest first (the first marker found
    in the assignment wins)."""

    attribute: str
    files: tuple[str, ...]
    meanings: tuple[Meaning, ...]


KV_LENS_2D = FactMeanings("kv_lens_cuda_2d", DSA_FILES, (
    Meaning("_draft_sizing_cap", "columns = 1 + _draft_sizing_cap: a capacity that only grows "
                                 "(the largest draft length announced in the process)"),
    Meaning("max_draft_tokens", "columns = 1 + max_draft_tokens: the draft length announced "
                                "for this pack"),
))
FACTS: MappingProxyType[str, FactMeanings] = MappingProxyType({
    "attn_metadata.kv_lens_cuda_2d": KV_LENS_2D,
    "attn_metadata.kv_lens_cuda_2d.shape": KV_LENS_2D,
})


def _assigned_names(tree: ast.AST, attribute: str) -> set[str] | None:
    """Names and attributes read by the assignments of `self.<attribute>`; None if none."""
    found: set[str] | None = None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign | ast.AnnAssign):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if not any(isinstance(t, ast.Attribute) and t.attr == attribute for t in targets):
            continue
        found = found if found is not None else set()
        for part in ast.walk(node.value) if node.value is not None else ():
            if isinstance(part, ast.Attribute):
                found.add(part.attr)
            elif isinstance(part, ast.Name):
                found.add(part.id)
    return found


def meaning_at(checkout: Path, entry: FactMeanings) -> str | None:
    """The meaning of `entry`'s facts in this checkout; None when no file assigns it or no
    known meaning matches (then values are compared as they always were)."""
    names: set[str] = set()
    for rel in entry.files:
        try:
            tree = ast.parse((Path(checkout) / rel).read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        names |= _assigned_names(tree, entry.attribute) or set()
    return next((m.what for m in entry.meanings if m.marker in names), None)


def fact_meanings(checkout: Path, facts: list[str] | None = None) -> dict[str, str]:
    """fact -> its meaning at this checkout, for the facts whose meaning is known to vary."""
    wanted = dict(FACTS) if facts is None else {f: FACTS[f] for f in facts if f in FACTS}
    out = {}
    for fact, entry in wanted.items():
        meaning = meaning_at(checkout, entry)
        if meaning is not None:
            out[fact] = meaning
    return out
