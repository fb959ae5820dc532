"""Evaluate the part of Python that pytest tables build their strings with, without running the tests.

detect-secrets keeps its plugin cases as ``pytest.mark.parametrize`` tables
whose strings are built from module constants: ``'…{}'.format(SECRET)``,
f-strings, ``+``, ``*``, slices, ``textwrap.dedent`` and, for the keyword
plugin, a module generator that pairs each file type with each row of a
list. Reading them as the tests see them needs those expressions evaluated;
importing the test modules would run the peer's code (and its imports), so
this walks the AST instead and evaluates only that subset. Anything else (a
call to ``randint``, a class the test instantiates) is never guessed: it
becomes an ``Unreadable`` with the reason, kept in place so a table with one
such row still yields its other rows.
"""

from __future__ import annotations

import ast
import itertools
import textwrap
from dataclasses import dataclass

# Methods of str a table may call on a string it has already built; each is pure.
STR_METHODS = {"format", "strip", "lstrip", "rstrip", "lower", "upper", "replace", "join", "encode", "decode"}
PURE_CALLS = {"textwrap.dedent": textwrap.dedent, "str": str, "len": len}


@dataclass(frozen=True)
class Unreadable:
    """A value this reader cannot compute statically, and why."""
    reason: str


class NotRead(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Opaque:
    """A name that is no string the module binds (a plugin class, an enum member): passed through, never used."""
    name: str


def need(value):
    if isinstance(value, Unreadable):
        raise NotRead(value.reason)
    if isinstance(value, Opaque):
        raise NotRead(f"uses {value.name}")
    return value


class Reader:
    """The module's constants and generator functions, and ``value(node, env)`` over them."""

    def __init__(self, tree: ast.Module):
        self.env: dict[str, object] = {}
        self.functions: dict[str, ast.FunctionDef] = {}
        self.bind_block(tree.body, self.env)

    def bind_block(self, body: list[ast.stmt], env: dict) -> None:
        for stmt in body:
            if isinstance(stmt, ast.FunctionDef):
                self.functions[stmt.name] = stmt
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                self.assign(stmt.targets[0], self.lazy(stmt.value, env), env)

    def lazy(self, node: ast.expr, env: dict):
        try:
            return self.value(node, env)
        except NotRead as error:
            return Unreadable(error.reason)

    def assign(self, target: ast.expr, value, env: dict) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            parts = [value] * len(target.elts) if isinstance(value, Unreadable) else list(need(value))
            if len(parts) != len(target.elts):
                raise NotRead("unpacks a row of another length")
            for element, part in zip(target.elts, parts):
                self.assign(element, part, env)

    def value(self, node: ast.expr, env: dict):
        """The value of ``node``; a list or tuple keeps an element it cannot read as an ``Unreadable``."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return env.get(node.id, self.env.get(node.id, Opaque(node.id)))
        if isinstance(node, ast.Attribute):
            return Opaque(ast.unparse(node))
        if isinstance(node, (ast.Tuple, ast.List)):
            items = [self.lazy(e, env) for e in node.elts]
            return tuple(items) if isinstance(node, ast.Tuple) else items
        if isinstance(node, ast.JoinedStr):
            return "".join(self.value(part, env) for part in node.values)
        if isinstance(node, ast.FormattedValue):
            inner = need(self.value(node.value, env))
            inner = {115: str, 114: repr, 97: ascii}.get(node.conversion, lambda v: v)(inner)
            return format(inner, self.value(node.format_spec, env) if node.format_spec else "")
        if isinstance(node, ast.BinOp):
            return self.binop(node, env)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -need(self.value(node.operand, env))
        if isinstance(node, ast.Subscript):
            return need(self.value(node.value, env))[self.value(node.slice, env)]
        if isinstance(node, ast.Slice):
            return slice(*(need(self.value(p, env)) if p else None for p in (node.lower, node.upper, node.step)))
        if isinstance(node, ast.Call):
            return self.call(node, env)
        raise NotRead(f"a {type(node).__name__} expression")

    def binop(self, node: ast.BinOp, env: dict):
        left, right = need(self.value(node.left, env)), need(self.value(node.right, env))
        ops = {ast.Add: lambda a, b: a + b, ast.Mult: lambda a, b: a * b, ast.Mod: lambda a, b: a % b}
        if type(node.op) not in ops:
            raise NotRead(f"a {type(node.op).__name__} operation")
        try:
            return ops[type(node.op)](left, right)
        except (TypeError, ValueError) as error:
            raise NotRead(str(error)) from None

    def call(self, node: ast.Call, env: dict):
        args = [need(self.value(a, env)) for a in node.args if not isinstance(a, ast.Starred)]
        kwargs = {k.arg: need(self.value(k.value, env)) for k in node.keywords if k.arg}
        if len(args) != len(node.args) or len(kwargs) != len(node.keywords):
            raise NotRead("a call with * or ** arguments")
        func = node.func
        name = ast.unparse(func)
        if isinstance(func, ast.Attribute) and func.attr in STR_METHODS:
            owner = self.value(func.value, env)
            if isinstance(owner, (str, bytes)):
                try:
                    return getattr(owner, func.attr)(*args, **kwargs)
                except (IndexError, KeyError, ValueError, TypeError) as error:
                    raise NotRead(f"{name}: {error}") from None
        if name in PURE_CALLS:
            return PURE_CALLS[name](*args, **kwargs)
        if isinstance(func, ast.Name) and func.id in self.functions:
            return self.generate(self.functions[func.id], args, kwargs)
        raise NotRead(f"calls {name}")

    def generate(self, func: ast.FunctionDef, args: list, kwargs: dict) -> list:
        """What a module generator function yields: ``for`` loops, assignments and ``yield`` only."""
        params = [a.arg for a in func.args.args]
        if len(args) > len(params):
            raise NotRead(f"calls {func.name} with too many arguments")
        env = dict(self.env, **dict(zip(params, args)), **kwargs)
        out: list = []
        self.run(func.body, env, out)
        return out

    def run(self, body: list[ast.stmt], env: dict, out: list) -> None:
        for stmt in body:
            if isinstance(stmt, ast.For):
                for item in need(self.value(stmt.iter, env)):
                    self.assign(stmt.target, item, env)
                    self.run(stmt.body, env, out)
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                self.assign(stmt.targets[0], self.lazy(stmt.value, env), env)
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Yield) and stmt.value.value:
                out.append(self.lazy(stmt.value.value, env))
            elif not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
                raise NotRead(f"runs a {type(stmt).__name__} statement")


def parametrize_tables(node: ast.FunctionDef | ast.ClassDef) -> list[ast.Call]:
    return [d for d in node.decorator_list if isinstance(d, ast.Call)
            and ast.unparse(d.func).endswith("mark.parametrize") and len(d.args) >= 2]


def table_rows(reader: Reader, deco: ast.Call) -> tuple[list[str], list]:
    """(argument names, rows) of one parametrize decorator; a row is a tuple or an ``Unreadable``."""
    names = [n.strip() for n in need(reader.value(deco.args[0], {})).split(",") if n.strip()]
    try:
        rows = need(reader.value(deco.args[1], {}))
    except NotRead as error:
        return names, [Unreadable(error.reason)]
    out = []
    for row in rows:
        if isinstance(row, Unreadable) or len(names) > 1:
            out.append(row)
        else:
            out.append((row,))
    return names, out


def test_tables(tree: ast.Module):
    """(test function, argument names, rows) of every parametrized test, a class's tables crossed with
    its methods' as pytest crosses them; a row holding an ``Unreadable`` is passed on as that ``Unreadable``."""
    reader = Reader(tree)

    def tables_of(func, outer):
        decos = outer + parametrize_tables(func)
        if not decos:
            return
        parts = [table_rows(reader, d) for d in decos]
        names = [n for part in parts for n in part[0]]
        for combo in itertools.product(*(part[1] for part in parts)):
            bad = next((r for r in combo if isinstance(r, Unreadable)), None)
            if bad is None:
                bad = next((v for r in combo for v in r if isinstance(v, Unreadable)), None)
            row = bad if bad is not None else tuple(v for r in combo for v in r)
            if not isinstance(row, Unreadable) and len(row) != len(names):
                row = Unreadable("a row of another length than its names")
            yield row

    def walk(body, outer):
        for stmt in body:
            if isinstance(stmt, ast.FunctionDef):
                rows = list(tables_of(stmt, outer))
                if rows:
                    names = [n for d in outer + parametrize_tables(stmt) for n in table_rows(reader, d)[0]]
                    yield stmt, names, rows, reader
            elif isinstance(stmt, ast.ClassDef):  # a class's tables apply to its methods and its inner classes
                yield from walk(stmt.body, outer + parametrize_tables(stmt))

    yield from walk(tree.body, [])
