"""flow/config.yaml read as data: a HyperPyYAML file, parsed without importing or running
anything, in bounded time and memory.

Upstream's file is HyperPyYAML (``!new:`` / ``!ref`` tags). Our loader is PyYAML's SafeLoader
with every ``!`` tag read as plain data; ``!ref`` arithmetic (``<a> * <b>``) is evaluated over
numbers only. Hostile input is refused with one error naming the file: a YAML alias bomb (a
380-byte file once expanded to 2.5 GB in 125 s) by counting the nodes the document expands to
before anything is built; deep nesting (RecursionError), 10,000-digit numbers, circular or
exponential ``!ref`` chains and results that overflow.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from app.engine.file_limits import MAX_YAML_BYTES, MAX_YAML_NODES, check_size

WHERE = "flow/config.yaml"
MAX_REF_DEPTH = 20
MAX_NUMBER = 2.0**53  # any size in the file is far smaller; larger results are refused


class YamlError(ValueError):
    """The YAML file cannot be used; the message says why (the caller names the file)."""


def _expanded_size(root: yaml.Node) -> int:
    """Nodes the document would have with every alias expanded (iterative; a node shared
    through an alias counts once per use), or YamlError past MAX_YAML_NODES or on a cycle."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    open_nodes: set[int] = set()
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        children = _children(node)
        if children_done:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in children)
            if sizes[key] > MAX_YAML_NODES:
                raise YamlError(f"it expands to more than {MAX_YAML_NODES:,} values (a YAML "
                                "alias bomb?)")
            continue
        if key in open_nodes:
            raise YamlError("a YAML alias refers to itself")
        open_nodes.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in open_nodes:
                raise YamlError("a YAML alias refers to itself")
            stack.append((child, False))
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


class TaggedLoader(yaml.SafeLoader):
    """SafeLoader that reads HyperPyYAML tags as plain data and refuses documents that expand
    past MAX_YAML_NODES (nothing is imported or called)."""

    def compose_document(self) -> yaml.Node:
        node = super().compose_document()
        if node is not None:
            _expanded_size(node)
        return node


class Ref(str):
    """A ``!ref`` expression such as ``<chunk_size> * <token_mel_ratio>``, resolved later."""


def _construct_tagged(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if suffix.startswith("ref"):
        return Ref(loader.construct_scalar(node))
    if isinstance(node, yaml.MappingNode):
        data = loader.construct_mapping(node, deep=True)
        return {**data, "_class": suffix.split(":", 1)[-1]}
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return {"_class": suffix.split(":", 1)[-1], "_value": loader.construct_scalar(node)}


TaggedLoader.add_multi_constructor("!", _construct_tagged)

_OPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv}


def eval_arith(expr: str) -> float:
    """+ − × ÷ over number literals; every intermediate result must stay below 2**53."""
    def bounded(value: Any) -> Any:
        if not math.isfinite(value) or abs(value) > MAX_NUMBER:
            raise YamlError(f"!ref {expr[:60]!r} gives a number too large to be a size")
        return value

    def walk(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not (
                isinstance(node.value, bool)):
            return bounded(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return bounded(_OPS[type(node.op)](walk(node.left), walk(node.right)))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return bounded(-walk(node.operand))
        raise ValueError(f"unsupported expression {expr!r}")

    return walk(ast.parse(expr, mode="eval"))


class _Resolver:
    """Resolves ``!ref`` values; each top-level name is resolved once (memo), so a chain of
    references costs linear time, and a cycle is an error."""

    def __init__(self, top: Mapping[str, Any]) -> None:
        self.top, self.memo, self.active = top, {}, set()  # type: ignore[var-annotated]

    def name(self, name: str, depth: int) -> Any:
        if name in self.memo:
            return self.memo[name]
        if name in self.active or depth > MAX_REF_DEPTH:
            raise YamlError(f"circular !ref through <{name}>")
        self.active.add(name)
        value = self.value(self.top.get(name), depth + 1)
        self.active.discard(name)
        self.memo[name] = value
        return value

    def value(self, value: Any, depth: int = 0) -> Any:
        if depth > MAX_REF_DEPTH + 64:
            raise YamlError("nested too deeply")
        if isinstance(value, Ref):
            return self.ref(value, depth)
        if isinstance(value, dict):
            return {k: self.value(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v, depth + 1) for v in value]
        return value

    def ref(self, value: Ref, depth: int) -> Any:
        names = re.findall(r"<([^<>]+)>", value)
        if len(names) == 1 and value.strip() == f"<{names[0]}>":
            return self.name(names[0], depth)
        expr = str(value)
        for name in names:
            resolved = self.name(name, depth)
            if not isinstance(resolved, (int, float)) or isinstance(resolved, bool):
                return None  # a reference to something that is not a number: not needed here
            expr = expr.replace(f"<{name}>", repr(resolved))
        try:
            result = eval_arith(expr)
        except (ValueError, SyntaxError, ZeroDivisionError, RecursionError) as exc:
            if isinstance(exc, YamlError):
                raise
            return None
        return int(result) if float(result).is_integer() else result


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """One line: what PyYAML found and where (its own message spans several lines)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{problem}{where}"


def load_flow_yaml(path: Path) -> dict[str, Any]:
    """The YAML mapping with every ``!ref`` resolved; YamlError (or OSError) when unusable."""
    check_size(path, MAX_YAML_BYTES, WHERE)
    text = path.read_text(encoding="utf-8")
    try:
        # TaggedLoader is a SafeLoader subclass: plain data only
        raw = yaml.load(text, Loader=TaggedLoader)  # nosec B506
    except YamlError:
        raise
    except yaml.YAMLError as exc:
        raise YamlError(f"not readable YAML ({_yaml_problem(exc)})") from exc
    except RecursionError as exc:
        raise YamlError("nested too deeply") from exc
    except (ValueError, OverflowError) as exc:  # e.g. an integer of 10,000 digits
        raise YamlError(f"a value cannot be read ({str(exc)[:120]})") from exc
    if not isinstance(raw, dict):
        raise YamlError("not a YAML mapping")
    try:
        resolved = _Resolver(raw).value(raw)
    except RecursionError as exc:
        raise YamlError("nested too deeply") from exc
    return resolved


def find_section(tree: Any, key: str, class_suffix: str) -> dict[str, Any]:
    """The mapping stored under ``key`` or tagged with a class ending in ``class_suffix``
    (depth first, as written; at most MAX_YAML_NODES values are looked at, since ``!ref``
    values shared between places would otherwise be walked once per place)."""
    budget = [MAX_YAML_NODES]

    def search(tree: Any, depth: int) -> dict[str, Any]:
        budget[0] -= 1
        if budget[0] < 0:
            raise YamlError(f"no '{key}' section found within {MAX_YAML_NODES:,} values")
        if depth > 64:
            return {}
        if isinstance(tree, dict):
            if str(tree.get("_class", "")).endswith(class_suffix):
                return tree
            if isinstance(tree.get(key), dict):
                return tree[key]
            children: list[Any] = list(tree.values())
        elif isinstance(tree, list):
            children = tree
        else:
            return {}
        for value in children:
            found = search(value, depth + 1)
            if found:
                return found
        return {}

    return search(tree, 0)
