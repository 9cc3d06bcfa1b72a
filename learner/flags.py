"""Command-line flags made from a config dataclass: one place per default, per help and per name.

A field that is a flag says so in its metadata (`flag("help", ...)`); `add_flags` gives a parser
one option per such field of the dataclass and of the dataclasses nested in it (their defaults
in the help, taken from the dataclass), and `from_flags` makes the config from the defaults
changed by the flags that were given. A flag that was not given keeps the dataclass's default:
the parser has none of its own.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any


def flag(
    help: str,
    name: str | None = None,
    *,
    parse: Callable[[str], Any] | None = None,
    shown: str | None = None,
    **argparse_options: Any,
) -> dict:
    """A field's metadata making it the flag `--name` (default: the field's name with dashes),
    with `help`; `parse` turns the flag's text into the field's value (default: the field's type),
    `shown` is the default as the help says it (default: the field's own)."""
    return {
        "flag": {"help": help, "name": name, "parse": parse, "shown": shown, **argparse_options}
    }


def _flagged(cls: type, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any, dict]]:
    """(path to the field, its type, its flag) for every flagged field, nested ones included."""
    hints = typing.get_type_hints(cls)
    defaults = cls()
    for field in dataclasses.fields(cls):
        value = getattr(defaults, field.name)
        if dataclasses.is_dataclass(value):
            yield from _flagged(type(value), (*path, field.name))
        elif "flag" in field.metadata:
            yield (
                (*path, field.name),
                hints[field.name],
                {**field.metadata["flag"], "default": value},
            )


def _dest(path: tuple[str, ...], spec: dict) -> str:
    return (spec["name"] or path[-1]).replace("-", "_")


def add_flags(parser: argparse.ArgumentParser, cls: type) -> None:
    """One option per flagged field of `cls` (and of the dataclasses in it), default None."""
    for path, kind, spec in _flagged(cls):
        options = {k: v for k, v in spec.items() if k not in ("name", "parse", "shown", "default")}
        shown = spec["shown"] if spec["shown"] is not None else spec["default"]
        options["help"] = (
            spec["help"] if options.get("required") else f"{spec['help']} (default {shown})"
        )
        base = _plain(kind)
        if base is bool:
            options.setdefault("action", argparse.BooleanOptionalAction)
        else:
            if typing.get_origin(base) is typing.Literal:
                options.setdefault("choices", typing.get_args(base))
            elif spec["parse"] is None:
                options.setdefault("type", base)
            else:
                options.setdefault("type", spec["parse"])
        flag_name = "--" + (spec["name"] or path[-1]).replace("_", "-")
        parser.add_argument(flag_name, dest=_dest(path, spec), default=None, **options)


def given_flags(args: argparse.Namespace, cls: type) -> list[str]:
    """The flags of `cls` that were given, as typed (`--lr`)."""
    return [
        "--" + (spec["name"] or path[-1]).replace("_", "-")
        for path, _, spec in _flagged(cls)
        if getattr(args, _dest(path, spec), None) is not None
    ]


def from_flags(args: argparse.Namespace, cls: type, **values: Any):
    """`cls`'s defaults changed by the flags that were given (and by `values`, e.g. a field
    with no flag), validated as the dataclass validates."""
    changes: dict[tuple[str, ...], Any] = {(k,): v for k, v in values.items()}
    for path, _, spec in _flagged(cls):
        value = getattr(args, _dest(path, spec), None)
        if value is not None:
            changes[path] = value
    return _replace(cls(), changes)


def _replace(config, changes: dict[tuple[str, ...], Any]):
    own = {path[0]: value for path, value in changes.items() if len(path) == 1}
    nested: dict[str, dict] = {}
    for path, value in changes.items():
        if len(path) > 1:
            nested.setdefault(path[0], {})[path[1:]] = value
    for name, inner in nested.items():
        own[name] = _replace(getattr(config, name), inner)
    return dataclasses.replace(config, **own)


def _plain(kind: Any) -> Any:
    """`int` for `int | None`; the type itself otherwise."""
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        inner = [k for k in typing.get_args(kind) if k is not type(None)]
        return inner[0] if len(inner) == 1 else kind
    return kind
