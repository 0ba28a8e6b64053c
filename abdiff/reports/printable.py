"""The one sanitizer for text that came from benchmark code or from a file a worker could
write (config ids, fact names and values, kernel names, error lines, notes), applied where
text is printed (terminal, log, report, PR comment), never where it is parsed.

A terminal obeys escape sequences (an OSC 52 clipboard write, a title change, a clear
screen), and a CI runner reads a log line starting with `::` (after blanks) as a workflow
command (`::add-mask::`, `::error::`, `::stop-commands::`) and `##[` anywhere as a legacy
one. So: C0 and C1 control characters (ESC, DEL and carriage return among them), Unicode
format characters (bidirectional overrides) and lone surrogates are dropped, newlines and
tabs kept only where the text may hold lines, and those command markers are broken up
(`: :`, `# #[`), visibly. Zero-width joiners and spaces stay: the Markdown report puts them
after `@` and `#` so that no name or issue is pinged or linked.
"""

from __future__ import annotations

import re
import unicodedata

_COMMAND_LINE = re.compile(r"^([^\S\n]*)::", re.MULTILINE)
ZERO_WIDTH = frozenset("\u200b\u200c\u200d\u2060")  # format characters that are kept


def printable(text: object, lines: bool = True) -> str:
    """`text` safe to print: see the module's docstring. With `lines` False, newlines and
    tabs become spaces too (one line)."""
    kept = []
    for ch in str(text):
        if ch in "\n\t":
            kept.append(ch if lines else " ")
        elif ch in ZERO_WIDTH or unicodedata.category(ch) not in ("Cc", "Cf", "Cs"):
            kept.append(ch)
    return no_ci_commands("".join(kept))


def no_ci_commands(text: str) -> str:
    """`text` with what a CI runner would read as a workflow command broken up; nothing
    else changed (for a rendered report whose colours are abdiff's own and whose fields
    went through `printable` already: wrapping can still start a line with `::`)."""
    return _COMMAND_LINE.sub(r"\1: :", text).replace("##[", "# #[")
