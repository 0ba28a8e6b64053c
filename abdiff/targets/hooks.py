"""Check, from source alone, that the places a probe hooks into still exist.

A probe reaches into the benchmark's live objects by name: a module path, a
class, a method and its parameters, an attribute the metadata assigns. When a
commit renames or moves one of them, the probe records nothing (or None facts)
and the comparison would look like a behaviour change. `abdiff doctor` runs
these checks on both checkouts *before* anything is launched, with the `ast`
module only: no import, no GPU, no installed benchmark needed.

Hooks are data (`Hook`), so every target brings its own list; the checker is
generic. A problem names the file and says what moved, and where it went when
the name is found elsewhere in the same package.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

MAX_BASE_DEPTH = 8  # inheritance chains deeper than this are not followed


@dataclass(frozen=True)
class Hook:
    """One thing a probe relies on in a source tree.

    `paths` are candidate files relative to the repository root: the first one
    that exists is checked (upstream moves modules between releases, e.g.
    `sparse/dsa.py` became `sparse/dsa/metadata.py`). Exactly what is checked
    depends on the fields set:

    - only `paths`: the file exists and parses;
    - `calls`: the module calls something named so (`x.create_run_pack(...)`);
    - `function`: a module-level function of that name;
    - `cls`: the class is defined there;
    - `cls` + `method`: the class or one of its bases defines the method;
      with `params`, the method takes those parameters (or `**kwargs`);
      with `closes_over`, a function nested in the method reads that local;
    - `cls` + `attribute`: the class or one of its bases assigns
      `self.<attribute>` in a method, declares it as a class-level field
      (dataclass style) or defines a property of that name.
    """

    paths: tuple[str, ...]
    cls: str | None = None
    method: str | None = None
    params: tuple[str, ...] = ()
    closes_over: str | None = None
    attribute: str | None = None
    function: str | None = None
    calls: str | None = None
    why: str = ""



def run_pack_hooks(runner: str, trtllm_files: tuple[str, ...],
                   dsa_files: tuple[str, ...]) -> tuple[Hook, ...]:
    """What every layer-wise target relies on in a checkout: the Runner's
    `create_run_pack` signature and closure, and the attention metadata fields
    the built-in suites record as facts."""
    return (
        Hook((runner,), cls="Runner", method="create_run_pack",
             params=("run_type", "batch_size", "seq_len_q", "seq_len_kv_cache"),
             why="one run pack per config, identified by these arguments"),
        Hook((runner,), cls="Runner", method="create_run_pack", closes_over="attn_metadata",
             why="facts are read from the attn_metadata the run pack closes over"),
        Hook(trtllm_files, cls="TrtllmAttentionMetadata", attribute="max_total_draft_tokens",
             why="fact attn_metadata.max_total_draft_tokens"),
        Hook(trtllm_files, cls="TrtllmAttentionMetadata", attribute="is_spec_decoding_enabled",
             why="fact attn_metadata.is_spec_decoding_enabled"),
        Hook(dsa_files, cls="DSAtrtllmAttentionMetadata", attribute="max_draft_tokens",
             why="fact attn_metadata.max_draft_tokens"),
        Hook(dsa_files, cls="DSAtrtllmAttentionMetadata", attribute="kv_lens_cuda_2d",
             why="fact attn_metadata.kv_lens_cuda_2d.shape; also how DSA metadata is told apart"),
    )

@dataclass
class _Module:
    path: str
    tree: ast.Module
    classes: dict[str, ast.ClassDef]


class SourceTree:
    """Parsed Python files of one checkout, cached, addressed by repository-relative path."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._modules: dict[str, _Module | None] = {}
        self._errors: dict[str, str] = {}

    def exists(self, rel: str) -> bool:
        return (self.root / rel).is_file()

    def module(self, rel: str) -> _Module | None:
        """The parsed file, or None when it is missing or does not parse (see `error`)."""
        if rel in self._modules:
            return self._modules[rel]
        parsed: _Module | None = None
        path = self.root / rel
        if path.is_file():
            try:
                tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"), filename=rel)
            except SyntaxError as exc:
                self._errors[rel] = f"does not parse (line {exc.lineno}: {exc.msg})"
            else:
                classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
                parsed = _Module(rel, tree, classes)
        self._modules[rel] = parsed
        return parsed

    def error(self, rel: str) -> str | None:
        return self._errors.get(rel)

    def module_file(self, dotted: str) -> str | None:
        """`a.b.c` -> `a/b/c.py` or `a/b/c/__init__.py`, whichever exists here."""
        base = dotted.replace(".", "/")
        for rel in (f"{base}.py", f"{base}/__init__.py"):
            if self.exists(rel):
                return rel
        return None

    def files_mentioning(self, under: str, word: str) -> Iterator[str]:
        """Python files below `under` whose text contains `word` (a cheap filter before ast)."""
        top = self.root / under
        if not top.is_dir():
            return
        for folder, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                full = Path(folder) / name
                try:
                    text = full.read_text(encoding="utf-8", errors="replace")
                except OSError:
                    continue
                if word in text:
                    yield full.relative_to(self.root).as_posix()


def _functions(body: list[ast.stmt]) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {n.name: n for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def _self_name(func: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    args = func.args.posonlyargs + func.args.args
    return args[0].arg if args else None


def _target_names(target: ast.expr) -> Iterator[ast.expr]:
    if isinstance(target, ast.Tuple | ast.List):
        for elt in target.elts:
            yield from _target_names(elt)
    elif isinstance(target, ast.Starred):
        yield from _target_names(target.value)
    else:
        yield target


def class_assigns(node: ast.ClassDef, attribute: str) -> bool:
    """Does this class body provide `attribute`? (self.X = ..., class-level field, property)."""
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if stmt.target.id == attribute:
                return True
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                names = _target_names(target)
                if any(isinstance(t, ast.Name) and t.id == attribute for t in names):
                    return True
    for func in _functions(node.body).values():
        if func.name == attribute:  # a property (or method) of that name
            return True
        me = _self_name(func)
        if me is None:
            continue
        for sub in ast.walk(func):
            targets: list[ast.expr] = []
            if isinstance(sub, ast.Assign):
                targets = list(sub.targets)
            elif isinstance(sub, ast.AnnAssign | ast.AugAssign):
                targets = [sub.target]
            elif (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name)
                  and sub.func.id == "setattr" and len(sub.args) >= 2
                  and isinstance(sub.args[0], ast.Name) and sub.args[0].id == me
                  and isinstance(sub.args[1], ast.Constant) and sub.args[1].value == attribute):
                return True
            for target in targets:
                for t in _target_names(target):
                    if (isinstance(t, ast.Attribute) and t.attr == attribute
                            and isinstance(t.value, ast.Name) and t.value.id == me):
                        return True
    return False


def _imports(module: _Module) -> dict[str, tuple[str, str]]:
    """Local name -> (absolute module, imported name) for `from X import Y [as Z]`."""
    package = module.path.rsplit("/", 1)[0].replace("/", ".") if "/" in module.path else ""
    if module.path.endswith("/__init__.py"):
        package = module.path[: -len("/__init__.py")].replace("/", ".")
    found: dict[str, tuple[str, str]] = {}
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            parts = package.split(".") if package else []
            keep = len(parts) - (node.level - 1)
            if keep < 0:
                continue
            base = ".".join(parts[:keep])
            absolute = f"{base}.{node.module}" if node.module else base
        else:
            absolute = node.module or ""
        for alias in node.names:
            found[alias.asname or alias.name] = (absolute, alias.name)
    return found


class HookChecker:
    """Checks hooks against one source tree; `problems()` returns one line per missing hook."""

    def __init__(self, root: Path) -> None:
        self.tree = SourceTree(root)

    # -- class lookup and inheritance ------------------------------------------------
    def _find_class(self, rel: str, name: str, depth: int = 0) -> tuple[str, ast.ClassDef] | None:
        """The class `name` as seen from file `rel`: defined there, or imported into it."""
        module = self.tree.module(rel)
        if module is None or depth > MAX_BASE_DEPTH:
            return None
        if name in module.classes:
            return rel, module.classes[name]
        imported = _imports(module).get(name)
        if imported:
            target = self.tree.module_file(imported[0])
            if target and target != rel:
                return self._find_class(target, imported[1], depth + 1)
        return None

    def lineage(self, rel: str, node: ast.ClassDef) -> list[tuple[str, ast.ClassDef]]:
        """The class and the bases that can be resolved in this tree, nearest first."""
        chain = [(rel, node)]
        queue = [(rel, node)]
        seen = {(rel, node.name)}
        while queue and len(chain) < MAX_BASE_DEPTH * 4:
            where, cls = queue.pop(0)
            for base in cls.bases:
                name = base.id if isinstance(base, ast.Name) else (
                    base.attr if isinstance(base, ast.Attribute) else None)
                if not name:
                    continue
                found = self._find_class(where, name)
                if found and (found[0], found[1].name) not in seen:
                    seen.add((found[0], found[1].name))
                    chain.append(found)
                    queue.append(found)
        return chain

    def _elsewhere(self, under: str, word: str,
                   test: Callable[[ast.ClassDef], bool]) -> list[str]:
        """`path: class C` for the classes below `under` that pass `test` (at most three)."""
        hits = []
        for rel in self.tree.files_mentioning(under, word):
            module = self.tree.module(rel)
            if module is None:
                continue
            for node in ast.walk(module.tree):
                if isinstance(node, ast.ClassDef) and test(node):
                    hits.append(f"{rel}: class {node.name}")
        return hits[:3]

    # -- the checks ------------------------------------------------------------------
    def problem(self, hook: Hook) -> str | None:
        """What is wrong with one hook here, or None when it holds."""
        rel = next((p for p in hook.paths if self.tree.exists(p)), None)
        package = hook.paths[0].split("/", 1)[0]
        if rel is None:
            wanted = " or ".join(hook.paths)
            moved = ""
            if hook.cls:
                hits = self._elsewhere(package, f"class {hook.cls}",
                                       lambda n: n.name == hook.cls)
                moved = f"; class {hook.cls} is now in {', '.join(hits)}" if hits else ""
            return f"{wanted}: missing{moved}{self._why(hook)}"
        module = self.tree.module(rel)
        if module is None:
            return f"{rel}: {self.tree.error(rel) or 'cannot be read'}{self._why(hook)}"
        if hook.calls and not self._calls(module, hook.calls):
            return f"{rel}: no longer calls {hook.calls}(){self._why(hook)}"
        if hook.function and hook.function not in _functions(module.tree.body):
            return f"{rel}: function {hook.function}() is gone{self._why(hook)}"
        if not hook.cls:
            return None
        found = self._find_class(rel, hook.cls)
        if found is None:
            hits = [h for h in self._elsewhere(package, f"class {hook.cls}",
                                               lambda n: n.name == hook.cls)
                    if not h.startswith(f"{rel}:")]
            moved = f" (now in {', '.join(hits)})" if hits else ""
            return f"{rel}: class {hook.cls} is gone{moved}{self._why(hook)}"
        chain = self.lineage(*found)
        bases = [c.name for _, c in chain[1:]]
        nor = f" (nor do its bases {', '.join(bases)})" if bases else ""
        if hook.method:
            owner = next((c for _, c in chain if hook.method in _functions(c.body)), None)
            if owner is None:
                hits = self._elsewhere(package, f"def {hook.method}",
                                       lambda n: hook.method in _functions(n.body))
                moved = f"; defined in {', '.join(hits)}" if hits else ""
                return (f"{rel}: class {hook.cls} no longer defines {hook.method}(){nor}"
                        f"{moved}{self._why(hook)}")
            func = _functions(owner.body)[hook.method]
            missing = self._missing_params(func, hook.params)
            if missing:
                return (f"{rel}: {hook.cls}.{hook.method}() no longer takes "
                        f"{', '.join(missing)}{self._why(hook)}")
            if hook.closes_over and not self._closes_over(func, hook.closes_over):
                return (f"{rel}: {hook.cls}.{hook.method}() no longer returns a closure over "
                        f"{hook.closes_over}{self._why(hook)}")
        attribute = hook.attribute
        if attribute and not any(class_assigns(c, attribute) for _, c in chain):
            hits = [h for h in self._elsewhere(package, attribute,
                                               lambda n: class_assigns(n, attribute))
                    if not any(h == f"{r}: class {c.name}" for r, c in chain)]
            moved = f"; assigned in {', '.join(hits)}" if hits else ""
            return (f"{rel}: class {hook.cls} no longer assigns {hook.attribute}{nor}"
                    f"{moved}{self._why(hook)}")
        return None

    @staticmethod
    def _why(hook: Hook) -> str:
        return f" [{hook.why}]" if hook.why else ""

    @staticmethod
    def _calls(module: _Module, name: str) -> bool:
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Call):
                func = node.func
                if (isinstance(func, ast.Attribute) and func.attr == name) or (
                        isinstance(func, ast.Name) and func.id == name):
                    return True
        return False

    @staticmethod
    def _missing_params(func: ast.FunctionDef | ast.AsyncFunctionDef,
                        params: tuple[str, ...]) -> list[str]:
        if func.args.kwarg is not None:
            return []
        names = {a.arg for a in func.args.posonlyargs + func.args.args + func.args.kwonlyargs}
        return [p for p in params if p not in names]

    @staticmethod
    def _closes_over(func: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> bool:
        """A function (or lambda) nested in `func` reads `name`, which `func` binds locally."""
        bound = False
        for node in ast.walk(func):
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
                bound = True
        bound = bound or name in {a.arg for a in func.args.args + func.args.kwonlyargs}
        if not bound:
            return False
        for node in ast.walk(func):
            if node is func or not isinstance(
                    node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and sub.id == name and isinstance(sub.ctx, ast.Load):
                    return True
        return False

    def problems(self, hooks: Iterable[Hook]) -> list[str]:
        return [p for p in (self.problem(h) for h in hooks) if p]


def missing_hooks(root: Path, hooks: Iterable[Hook]) -> list[str]:
    """One line per hook that does not hold in the source tree at `root` (empty: all there)."""
    return HookChecker(Path(root)).problems(hooks)
