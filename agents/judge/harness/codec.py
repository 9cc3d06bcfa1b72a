"""Plain values on a pipe between the judge and the program under test (agents/judge/harness/judge.py
and agents/judge/harness/candidate.py, each of which starts with this file's text).

A value crosses as tagged JSON, `[tag, payload]`, with exact types only: None, bool, int, float,
complex, str, bytes, range, and lists, tuples, sets, frozensets and dicts of them, at most
`MAX_DEPTH` deep and `MAX_NODES` items in all (a list of ints crosses as one string of hex
numbers, so a million of them fit in a message). A subclass, a generator, a lying object or a recursive or
oversized structure is not plain and never crosses: `encode` and `decode` raise NotPlain.
"""

MAX_DEPTH = 50
MAX_NODES = 1_000_000
MAX_MESSAGE_CHARS = 16_000_000  # one line on the pipe

_SEQUENCE_TAGS = {list: "l", tuple: "t", set: "S", frozenset: "F"}
_SEQUENCE_TYPES = {tag: kind for kind, tag in _SEQUENCE_TAGS.items()}


class NotPlain(Exception):
    """A value that is not plain data, or a message that is not the codec's tagged form."""


def encode(value):
    """`value` as tagged JSON-ready lists; raises NotPlain for anything but exact plain types."""
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
        if kind is dict:
            return ["d", [[walk(k, depth + 1), walk(v, depth + 1)] for k, v in value.items()]]
        raise NotPlain(f"a {kind.__name__} is not plain data")

    return walk(value, 0)


def decode(encoded):
    """Rebuild a value from `encode`'s form with exact plain types; NotPlain for anything else."""
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
            if tag == "d" and type(payload) is list:
                pairs = []
                for pair in payload:
                    if not (type(pair) is list and len(pair) == 2):
                        raise NotPlain("a dict entry is not a pair")
                    pairs.append((walk(pair[0], depth + 1), walk(pair[1], depth + 1)))
                return dict(pairs)
        except (TypeError, ValueError) as e:  # int('x'), an unhashable set item, bad hex
            raise NotPlain(f"bad {tag[:10]!r} payload: {str(e)[:100]}") from e
        raise NotPlain(f"unknown tag {tag[:10]!r}")

    return walk(encoded, 0)
