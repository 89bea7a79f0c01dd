"""Find every place a Python file reads, writes or merely mentions an environment variable.

Reads: ``os.getenv(N)``, ``os.environ.get(N)``, ``os.environ[N]``, ``N in os.environ``, the same
through ``from os import environ/getenv`` or an alias (``env = os.environ``), and calls of small
wrapper helpers (a function whose parameter flows into one of those) with ``N`` as an argument.
Writes: ``os.environ[N] = v``, ``setdefault``, ``pop``, ``del``, ``update``, ``putenv``, ``unsetenv``.
Mentions: docstrings, comments, other strings (messages), name constants; kept apart from reads.
``N`` may be the literal or a name/attribute bound to the literal in the same file.
The file is searched for the name as bytes first and parsed only when it is there.
"""
from __future__ import annotations

import ast
import hashlib
import io
import re
import tokenize
from dataclasses import asdict, dataclass, field
from typing import Any

READ, WRITE, MENTION, UNRESOLVED = "read", "write", "mention", "unresolved"
_ENV_READ_METHODS = {"get"}
_ENV_WRITE_METHODS = {"setdefault", "pop", "update", "__setitem__", "__delitem__"}
_FEED_WIDTH = 160


@dataclass
class PyFinding:
    """One occurrence of the knob in a Python file."""

    file: str
    line: int
    kind: str  # read | write | mention | unresolved
    form: str  # e.g. "os.getenv", "os.environ[...] =", "docstring", "comment"
    scope: str  # enclosing qualified function/class, "<module>" at top level
    default: str | None = None  # the default a read falls back to (source text)
    feeds: str | None = None  # the statement/expression the read feeds (source text, one line)
    note: str | None = None  # e.g. "via constant CUBLAS_VAR (line 3)", "helper env_flag (line 9)"

    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class PyFileResult:
    """Everything found in one file (``findings`` empty when the name is absent)."""

    file: str
    findings: list[PyFinding] = field(default_factory=list)
    parse_error: str | None = None
    #: calls the file makes with the name as an argument to an imported function it cannot see:
    #: (line, callee as written, module it was imported from, attribute name)
    imported_calls: list[tuple[int, str, str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "findings": [asdict(f) for f in self.findings],
                "parse_error": self.parse_error, "imported_calls": [list(c) for c in self.imported_calls]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "PyFileResult":
        return cls(d["file"], [PyFinding(**f) for f in d["findings"]], d.get("parse_error"),
                   [tuple(c) for c in d.get("imported_calls", [])])


def digest_bytes(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


def contains_name(data: bytes, name: str) -> bool:
    """The pre-filter: the knob name as a whole word (letters, digits, ``_`` around it break it)."""
    needle = name.encode()
    start = data.find(needle)
    while start >= 0:
        end = start + len(needle)
        if (start == 0 or not _is_word(data[start - 1])) and (end >= len(data) or not _is_word(data[end])):
            return True
        start = data.find(needle, start + 1)
    return False


def _is_word(byte: int) -> bool:
    return byte == 95 or 48 <= byte <= 57 or 65 <= byte <= 90 or 97 <= byte <= 122


def scan_python_source(data: bytes, name: str, file: str = "<string>") -> PyFileResult:
    """Scan one file's bytes for ``name`` (no pre-filter here; see :func:`scan_python_bytes`)."""
    result = PyFileResult(file)
    try:
        tree = ast.parse(data, filename=file)
        _Scanner(tree, name, file, data, result).run()
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:  # Python 2 files, templates, NUL bytes
        result = PyFileResult(file, parse_error=f"{type(e).__name__}: {getattr(e, 'msg', e)}")
        text = data.decode("utf-8", "replace")
        for i, line in enumerate(text.splitlines(), 1):
            if _line_has(line, name):
                result.findings.append(PyFinding(file, i, MENTION, "unparsed file", "?", feeds=line.strip()[:_FEED_WIDTH]))
    return result


def scan_python_bytes(data: bytes, name: str, file: str) -> PyFileResult:
    """Pre-filter then scan; a file without the name costs one ``bytes.find``."""
    if not contains_name(data, name):
        return PyFileResult(file)
    return scan_python_source(data, name, file)


def _line_has(line: str, name: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", line) is not None


class _Scanner:
    """One pass over a parsed module: aliases, constants and helpers first, then occurrences."""

    def __init__(self, tree: ast.Module, name: str, file: str, data: bytes, result: PyFileResult):
        self.tree, self.name, self.file, self.data, self.result = tree, name, file, data, result
        self.parents: dict[ast.AST, ast.AST] = {}
        self.scopes: dict[ast.AST, str] = {}
        self.os_names: set[str] = set()
        self.environ_names: set[str] = set()
        self.getenv_names: set[str] = set()
        self.putenv_names: set[str] = set()
        self.unsetenv_names: set[str] = set()
        self.constants: dict[str, tuple[str, int]] = {}  # identifier -> (value, line)
        self.helpers: dict[str, int] = {}  # function name -> line of its def
        self.imports: dict[str, tuple[str, str]] = {}  # local name -> (module, attribute)
        self.consumed: set[int] = set()  # id() of Constant nodes used by a read/write/helper call
        self.used_constants: set[str] = set()
        self._nodes: list[ast.AST] | None = None

    # -- preparation -----------------------------------------------------------------------
    def run(self) -> None:
        self._index(self.tree, "<module>")
        self._collect_aliases()
        self._collect_helpers()
        for node in self.nodes:
            self._visit(node)
        self._mentions()
        self.result.findings.sort(key=lambda f: (f.line, f.kind))

    @property
    def nodes(self) -> list[ast.AST]:
        """Every node once: the module and the parent map's keys (filled by ``_index``)."""
        if self._nodes is None or len(self._nodes) != len(self.parents) + 1:
            self._nodes = [self.tree, *self.parents]
        return self._nodes

    def _index(self, node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            self.parents[child] = node
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = child.name if scope == "<module>" else f"{scope}.{child.name}"
                self.scopes[child] = scope
                self._index(child, inner)
            else:
                self.scopes[child] = scope
                self._index(child, scope)

    def _collect_aliases(self) -> None:
        nodes = self.nodes
        for node in nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == "os" or (a.name.startswith("os.") and not a.asname):  # import os.path binds os
                        self.os_names.add(a.asname or "os")
                    else:
                        local = a.asname or a.name.split(".")[0]
                        self.imports[local] = (a.name if a.asname else a.name.split(".")[0], "")
            elif isinstance(node, ast.ImportFrom):
                module = "." * node.level + (node.module or "")
                for a in node.names:
                    local = a.asname or a.name
                    if node.module == "os" and node.level == 0:
                        {"environ": self.environ_names, "getenv": self.getenv_names,
                         "putenv": self.putenv_names, "unsetenv": self.unsetenv_names}.get(a.name, set()).add(local)
                    else:
                        self.imports[local] = (module, a.name)
        for node in nodes:  # env = os.environ ; NAME = "KNOB"
            targets, value = _assign_parts(node)
            if value is None:
                continue
            if self._is_environ(value):
                for t in targets:
                    if isinstance(t, ast.Name):
                        self.environ_names.add(t.id)
            elif isinstance(value, ast.Constant) and value.value == self.name:
                for t in targets:
                    ident = t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else None
                    if ident:
                        self.constants[ident] = (self.name, node.lineno)

    def _collect_helpers(self) -> None:
        """A helper: a function one of whose parameters is the name in an environment read."""
        for node in self.nodes:
            key = self._env_read_key(node)
            if not isinstance(key, ast.Name):
                continue
            fn = self.parents.get(node)
            while fn is not None and not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                fn = self.parents.get(fn)
            if fn is None or fn.name in self.helpers:
                continue
            if key.id in {a.arg for a in fn.args.args + fn.args.posonlyargs + fn.args.kwonlyargs}:
                self.helpers[fn.name] = fn.lineno

    # -- recognisers -----------------------------------------------------------------------
    def _is_os(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id in self.os_names

    def _is_environ(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute) and node.attr == "environ" and self._is_os(node.value):
            return True
        return isinstance(node, ast.Name) and node.id in self.environ_names

    def _os_func(self, func: ast.AST) -> str | None:
        """``getenv``/``putenv``/``unsetenv`` when ``func`` names one of them."""
        if isinstance(func, ast.Attribute) and self._is_os(func.value) and func.attr in ("getenv", "putenv", "unsetenv"):
            return func.attr
        if isinstance(func, ast.Name):
            for label, names in (("getenv", self.getenv_names), ("putenv", self.putenv_names), ("unsetenv", self.unsetenv_names)):
                if func.id in names:
                    return label
        return None

    def _env_read_key(self, node: ast.AST) -> ast.AST | None:
        """The key expression of an environment read at ``node`` (any key), else None."""
        if isinstance(node, ast.Call) and node.args:
            if self._os_func(node.func) == "getenv":
                return node.args[0]
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in ("get", "setdefault", "pop") and self._is_environ(f.value):
                return node.args[0]
        if isinstance(node, ast.Subscript) and self._is_environ(node.value):
            return node.slice
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            if self._is_environ(node.comparators[0]):
                return node.left
        return None

    def _resolves(self, node: ast.AST | None) -> str | None:
        """``""`` for the literal itself, ``"via constant X (line N)"`` for a bound name, else None."""
        if isinstance(node, ast.Constant) and node.value == self.name:
            self.consumed.add(id(node))
            return ""
        ident = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if ident and ident in self.constants:
            self.used_constants.add(ident)
            return f"via constant {ident} (line {self.constants[ident][1]})"
        return None

    # -- occurrences -----------------------------------------------------------------------
    def _visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Call):
            self._visit_call(node)
        elif isinstance(node, ast.Subscript) and self._is_environ(node.value):
            via = self._resolves(node.slice)
            if via is None:
                return
            if isinstance(node.ctx, ast.Load):
                self._add(node, READ, "os.environ[...]", via, default="(none: KeyError if unset)")
            elif isinstance(node.ctx, ast.Store):
                self._add(node, WRITE, "os.environ[...] =", via)
            else:
                self._add(node, WRITE, "del os.environ[...]", via)
        elif isinstance(node, ast.Compare) and self._env_read_key(node) is not None:
            via = self._resolves(node.left)
            if via is not None:
                form = "in os.environ" if isinstance(node.ops[0], ast.In) else "not in os.environ"
                self._add(node, READ, form, via)

    def _visit_call(self, node: ast.Call) -> None:
        f = node.func
        osf = self._os_func(f)
        if osf and node.args:
            via = self._resolves(node.args[0])
            if via is not None:
                if osf == "getenv":
                    self._add(node, READ, "os.getenv", via, default=_src(node.args[1]) if len(node.args) > 1 else _kw(node, "default") or "None")
                else:
                    self._add(node, WRITE, f"os.{osf}", via)
            return
        if isinstance(f, ast.Attribute) and self._is_environ(f.value):
            if f.attr == "get" and node.args:
                via = self._resolves(node.args[0])
                if via is not None:
                    self._add(node, READ, "os.environ.get", via, default=_src(node.args[1]) if len(node.args) > 1 else "None")
            elif f.attr in ("setdefault", "pop") and node.args:
                via = self._resolves(node.args[0])
                if via is not None:
                    value = _src(node.args[1]) if len(node.args) > 1 else None
                    note = "sets it only if unset, then reads it" if f.attr == "setdefault" else "removes it"
                    self._add(node, WRITE, f"os.environ.{f.attr}", via, default=value, extra=note)
            elif f.attr == "update":
                self._visit_update(node)
            return
        if node.args or node.keywords:  # helper calls and unknown callees
            for arg in list(node.args) + [k.value for k in node.keywords]:
                via = self._resolves(arg)
                if via is None:
                    continue
                callee = _src(f)
                short = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
                if short in self.helpers:
                    self._add(node, READ, "helper call", via, extra=f"{callee}() reads its argument from the environment (def at line {self.helpers[short]})",
                              default=_src(node.args[1]) if len(node.args) > 1 and arg is node.args[0] else None)
                elif isinstance(f, ast.Name) and f.id in self.imports:
                    module, attr = self.imports[f.id]
                    self.result.imported_calls.append((node.lineno, callee, module, attr or f.id))
                    self._add(node, UNRESOLVED, "argument to imported function", via, extra=f"{callee}() from {module or '?'}")
                elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in self.imports:
                    module, attr = self.imports[f.value.id]
                    module = f"{module}.{attr}" if attr else module
                    self.result.imported_calls.append((node.lineno, callee, module, f.attr))
                    self._add(node, UNRESOLVED, "argument to imported function", via, extra=f"{callee}() from {module}")
                else:
                    self._add(node, UNRESOLVED, "argument to a call", via, extra=f"{callee}() is not known to read the environment")
                break

    def _visit_update(self, node: ast.Call) -> None:
        for arg in node.args:
            if isinstance(arg, ast.Dict):
                for k, v in zip(arg.keys, arg.values):
                    via = self._resolves(k) if k is not None else None
                    if via is not None:
                        self._add(node, WRITE, "os.environ.update", via, default=_src(v))
        for kw in node.keywords:
            if kw.arg == self.name:
                self._add(node, WRITE, "os.environ.update", "", default=_src(kw.value))

    def _add(self, node: ast.AST, kind: str, form: str, via: str, *, default: str | None = None, extra: str | None = None) -> None:
        note = "; ".join(x for x in (via, extra) if x) or None
        self.result.findings.append(PyFinding(
            self.file, node.lineno, kind, form, self._scope(node), default, self._feeds(node), note))

    def _scope(self, node: ast.AST) -> str:
        while node in self.parents and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            node = self.parents[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            outer = self.scopes.get(node, "<module>")
            return node.name if outer == "<module>" else f"{outer}.{node.name}"
        return "<module>"

    def _scope_at(self, line: int) -> str:
        """The innermost function/class whose source spans ``line``."""
        best: ast.AST | None = None
        for node in self.scopes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if node.lineno <= line <= (node.end_lineno or node.lineno) and (best is None or node.lineno >= best.lineno):
                    best = node
        if best is None:
            return "<module>"
        outer = self.scopes.get(best, "<module>")
        return best.name if outer == "<module>" else f"{outer}.{best.name}"

    def _feeds(self, node: ast.AST) -> str:
        """The statement the occurrence sits in (for compound statements: their header)."""
        child, parent = node, self.parents.get(node)
        while parent is not None and not isinstance(child, ast.stmt):
            child, parent = parent, self.parents.get(parent)
        stmt = child
        if isinstance(stmt, (ast.If, ast.While)):
            text = f"{type(stmt).__name__.lower()} {_src(stmt.test)}:"
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            text = f"def {stmt.name}({_src(stmt.args)}):"
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            text = "with " + ", ".join(_src(i) for i in stmt.items) + ":"
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            text = f"for {_src(stmt.target)} in {_src(stmt.iter)}:"
        elif isinstance(stmt, (ast.ClassDef, ast.Try)):
            text = _src(node)
        else:
            text = _src(stmt)
        text = " ".join(text.split())
        return text if len(text) <= _FEED_WIDTH else text[: _FEED_WIDTH - 3] + "..."

    # -- mentions ----------------------------------------------------------------------------
    def _mentions(self) -> None:
        covered = {f.line for f in self.result.findings}
        text = self.data.decode("utf-8", "replace").splitlines()
        docstrings = _docstring_nodes(self.nodes)
        for node in self.nodes:
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in self.consumed:
                continue
            if not _line_has(node.value, self.name):
                continue
            parent = self.parents.get(node)
            if node.value == self.name and parent is not None and _bound_constant(parent, node):
                ident = next(iter(_target_names(parent)), "?")
                used = ident in self.used_constants
                form, note = "name constant", f"bound to {ident}" + (" (used by reads/writes in this file)" if used else "")
            elif id(node) in docstrings:
                form, note = "docstring", None
            elif node.value == self.name and isinstance(parent, ast.Dict) and any(k is node for k in parent.keys):
                form, note = "dict key", "e.g. an environment built for a child process (not this process's environment)"
            elif isinstance(parent, ast.JoinedStr) or (parent is not None and isinstance(self.parents.get(parent), ast.JoinedStr)):
                form, note = "string (f-string)", None
            else:
                form, note = "string", None
            span = range(node.lineno, (node.end_lineno or node.lineno) + 1)
            # every source line of a (multi-line) string that holds the name is a mention of this
            # string's kind: a docstring line is documentation, never "other"
            lines = [i for i in span if 0 < i <= len(text) and _line_has(text[i - 1], self.name)]
            if not lines:
                lines = [node.lineno + _offset_in(node.value, self.name)]
            scope = self._scope(node)
            for line in lines:
                if line in covered and len(lines) > 1:
                    continue  # another string or finding on this line already reported it
                feeds = self._feeds(node)
                if len(span) > 1 and 0 < line <= len(text):
                    feeds = text[line - 1].strip()[:_FEED_WIDTH]  # the source line that holds the name
                self.result.findings.append(PyFinding(self.file, line, MENTION, form, scope, feeds=feeds, note=note))
                covered.add(line)
        tokens = []
        if any("#" in line and _line_has(line, self.name) for line in text):  # tokenize only when needed
            try:
                tokens = list(tokenize.tokenize(io.BytesIO(self.data).readline))
            except (tokenize.TokenError, SyntaxError, UnicodeDecodeError):
                tokens = []
        for tok in tokens:
            if tok.type == tokenize.COMMENT and _line_has(tok.string, self.name):
                self.result.findings.append(PyFinding(self.file, tok.start[0], MENTION, "comment", self._scope_at(tok.start[0]), feeds=tok.string.strip()[:_FEED_WIDTH]))
                covered.add(tok.start[0])
        # anything left (identifiers, bytes literals...) is still reported: no occurrence goes missing
        for i, line in enumerate(text, 1):
            if i not in covered and _line_has(line, self.name):
                self.result.findings.append(PyFinding(self.file, i, MENTION, "other (not a string or comment)", self._scope_at(i), feeds=line.strip()[:_FEED_WIDTH]))


def _offset_in(text: str, name: str) -> int:
    """Line offset of ``name`` inside a (multi-line) string constant."""
    idx = text.find(name)
    return text.count("\n", 0, idx) if idx >= 0 else 0


def _assign_parts(node: ast.AST) -> tuple[list[ast.AST], ast.AST | None]:
    if isinstance(node, ast.Assign):
        return list(node.targets), node.value
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        return [node.target], node.value
    return [], None


def _bound_constant(parent: ast.AST, node: ast.AST) -> bool:
    targets, value = _assign_parts(parent)
    return value is node and bool(targets)


def _target_names(parent: ast.AST) -> list[str]:
    targets, _ = _assign_parts(parent)
    return [t.id if isinstance(t, ast.Name) else t.attr for t in targets if isinstance(t, (ast.Name, ast.Attribute))]


def _docstring_nodes(nodes: list[ast.AST]) -> set[int]:
    out = set()
    for node in nodes:
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


def _src(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # pragma: no cover - unparse of exotic nodes
        return "?"


def _kw(node: ast.Call, name: str) -> str | None:
    return next((_src(k.value) for k in node.keywords if k.arg == name), None)


def helpers_in_source(data: bytes) -> dict[str, int]:
    """Functions of a module that read the environment through one of their parameters."""
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return {}
    scanner = _Scanner(tree, "\0", "<helpers>", data, PyFileResult("<helpers>"))
    scanner._index(tree, "<module>")
    scanner._collect_aliases()
    scanner._collect_helpers()
    return dict(scanner.helpers)
