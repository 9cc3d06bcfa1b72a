"""Plain values on a pipe between the judge and the program under test (agents/judge/harness/judge.py
and agents/judge/harness/candidate.py, each of which starts with this file's text).

A value crosses as tagged JSON, `[tag, payload]`, with exact types only: None, bool, int, float,
complex, str, bytes, range, datetime's date, time, datetime and timedelta, Decimal, builtin types
(`int`, `list`, ...), and lists, tuples, sets, frozensets, dicts, OrderedDicts, Counters,
defaultdicts (of a builtin type) and deques of them, at most `MAX_DEPTH` deep and `MAX_NODES`
items in all (a list of ints crosses as one string of hex numbers, so a million of them fit in a
message). A subclass, a generator, a lying object or a recursive or oversized structure is not
plain: `encode` and `decode` raise NotPlain, unless they are given a `handle` function, which
turns such an object into a handle (`["h", payload]`: the program keeps the object, the judge
gets a stand-in that equals only itself; agents/judge/harness/judge.py).
"""

import builtins
import collections
import datetime
import decimal

MAX_DEPTH = 50
MAX_NODES = 1_000_000
MAX_MESSAGE_CHARS = 16_000_000  # one line on the pipe

_SEQUENCE_TAGS = {list: "l", tuple: "t", set: "S", frozenset: "F"}
_SEQUENCE_TYPES = {tag: kind for kind, tag in _SEQUENCE_TAGS.items()}
_MAPPING_TAGS = {dict: "d", collections.OrderedDict: "od", collections.Counter: "ct"}
_MAPPING_TYPES = {tag: kind for kind, tag in _MAPPING_TAGS.items()}
_ISO_TAGS = {datetime.datetime: "dt", datetime.date: "da", datetime.time: "tm"}
_ISO_TYPES = {tag: kind for kind, tag in _ISO_TAGS.items()}
_FACTORIES = {None, list, int, set, dict, str, float, tuple}


class NotPlain(Exception):
    """A value that is not plain data, or a message that is not the codec's tagged form."""


def _builtin_type(value):
    return isinstance(value, type) and getattr(builtins, value.__name__, None) is value


def encode(value, handle=None):
    """`value` as tagged JSON-ready lists; raises NotPlain for anything but exact plain types, or
    calls `handle(obj)` for the payload of a handle when given."""
    budget = [MAX_NODES]

    def walk(value, depth):
        budget[0] -= 1
        if budget[0] < 0:
            raise NotPlain(f"more than {MAX_NODES} items")
        if depth > MAX_DEPTH:
            raise NotPlain(f"nested deeper than {MAX_DEPTH}")
        kind = type(value)
        if value is None:
            return ["N", None]
        if kind is bool:
            return ["b", value]
        if kind is int:
            return ["i", hex(value)]  # hex: no limit on the digits of a large int
        if kind is float:
            return ["f", repr(value)]
        if kind is complex:
            return ["c", [repr(value.real), repr(value.imag)]]
        if kind is str:
            return ["s", value]
        if kind is bytes:
            return ["y", value.hex()]
        if kind is range:
            return ["r", [hex(value.start), hex(value.stop), hex(value.step)]]
        if kind is list and value and all(type(item) is int for item in value):
            budget[0] -= len(value)
            if budget[0] < 0:
                raise NotPlain(f"more than {MAX_NODES} items")
            return ["I", ",".join(hex(item) for item in value)]
        if kind in _SEQUENCE_TAGS:
            return [_SEQUENCE_TAGS[kind], [walk(item, depth + 1) for item in value]]
        if kind in _MAPPING_TAGS:
            pairs = [[walk(k, depth + 1), walk(v, depth + 1)] for k, v in value.items()]
            return [_MAPPING_TAGS[kind], pairs]
        if kind is collections.defaultdict and value.default_factory in _FACTORIES:
            factory = value.default_factory.__name__ if value.default_factory else None
            pairs = [[walk(k, depth + 1), walk(v, depth + 1)] for k, v in value.items()]
            return ["dd", [factory, pairs]]
        if kind is collections.deque:
            return ["q", [value.maxlen, [walk(item, depth + 1) for item in value]]]
        if kind in _ISO_TAGS:
            return [_ISO_TAGS[kind], value.isoformat()]
        if kind is datetime.timedelta:
            return ["td", [value.days, value.seconds, value.microseconds]]
        if kind is decimal.Decimal:
            return ["D", str(value)]
        if _builtin_type(value):
            return ["T", value.__name__]
        if handle is not None:
            return ["h", handle(value)]
        raise NotPlain(f"a {kind.__name__} is not plain data")

    return walk(value, 0)


def _pairs(payload, walk, depth):
    pairs = []
    for pair in payload:
        if not (type(pair) is list and len(pair) == 2):
            raise NotPlain("a dict entry is not a pair")
        pairs.append((walk(pair[0], depth + 1), walk(pair[1], depth + 1)))
    return pairs


def decode(encoded, handle=None):
    """Rebuild a value from `encode`'s form with exact plain types; NotPlain for anything else,
    handles included unless `handle(payload)` is given to make their stand-ins."""
    budget = [MAX_NODES]

    def walk(node, depth):
        budget[0] -= 1
        if budget[0] < 0 or depth > MAX_DEPTH:
            raise NotPlain("too large or too deep")
        if not (type(node) is list and len(node) == 2 and type(node[0]) is str):
            raise NotPlain("not a [tag, payload] pair")
        tag, payload = node
        try:
            if tag == "N" and payload is None:
                return None
            if tag == "b" and type(payload) is bool:
                return payload
            if tag == "i" and type(payload) is str:
                return int(payload, 16)
            if tag == "f" and type(payload) is str:
                return float(payload)
            if tag == "c" and type(payload) is list and len(payload) == 2:
                return complex(float(payload[0]), float(payload[1]))
            if tag == "s" and type(payload) is str:
                return payload
            if tag == "y" and type(payload) is str:
                return bytes.fromhex(payload)
            if tag == "r" and type(payload) is list and len(payload) == 3:
                if not all(type(part) is str for part in payload):
                    raise NotPlain("a range's bounds are not numbers")
                return range(*(int(part, 16) for part in payload))
            if tag == "I" and type(payload) is str and payload:
                items = payload.split(",")
                budget[0] -= len(items)
                if budget[0] < 0:
                    raise NotPlain("too large or too deep")
                return [int(item, 16) for item in items]
            if tag in _SEQUENCE_TYPES and type(payload) is list:
                return _SEQUENCE_TYPES[tag](walk(item, depth + 1) for item in payload)
            if tag in _MAPPING_TYPES and type(payload) is list:
                return _MAPPING_TYPES[tag](dict(_pairs(payload, walk, depth)))
            if tag == "dd" and type(payload) is list and len(payload) == 2:
                factory = payload[0]
                if not (factory is None or (type(factory) is str and factory.isidentifier())):
                    raise NotPlain("a defaultdict's factory is not a name")
                made = getattr(builtins, factory) if factory else None
                if made not in _FACTORIES or type(payload[1]) is not list:
                    raise NotPlain("a defaultdict's factory is not a plain type")
                return collections.defaultdict(made, _pairs(payload[1], walk, depth))
            if tag == "q" and type(payload) is list and len(payload) == 2:
                maxlen, items = payload
                if not (maxlen is None or type(maxlen) is int) or type(items) is not list:
                    raise NotPlain("a bad deque")
                return collections.deque((walk(i, depth + 1) for i in items), maxlen)
            if tag in _ISO_TYPES and type(payload) is str:
                return _ISO_TYPES[tag].fromisoformat(payload)
            if tag == "td" and type(payload) is list and len(payload) == 3:
                if not all(type(part) is int for part in payload):
                    raise NotPlain("a timedelta's parts are not ints")
                return datetime.timedelta(*payload)
            if tag == "D" and type(payload) is str:
                return decimal.Decimal(payload)
            if tag == "T" and type(payload) is str and payload.isidentifier():
                found = getattr(builtins, payload, None)
                if _builtin_type(found):
                    return found
            if tag == "h" and handle is not None:
                return handle(payload)
        except (TypeError, ValueError, ArithmeticError, OverflowError) as e:  # int('x'), ...
            raise NotPlain(f"bad {tag[:10]!r} payload: {str(e)[:100]}") from e
        raise NotPlain(f"unknown tag {tag[:10]!r}")

    return walk(encoded, 0)
