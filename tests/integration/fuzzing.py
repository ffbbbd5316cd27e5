"""Adversarial values and generic message mutation for the ESS fuzz test
(``test_ess_fuzz.py``).

Requests start from a valid template and get a few random fields replaced by hostile
values (int edges, NUL, unicode, long text, unknown enum numbers, out-of-range
timestamps), chosen by walking the message's descriptor, so every field of every nested
message is reachable without per-field code. Everything is driven by one
``random.Random``: the same seed builds the same requests.
"""

from __future__ import annotations

import random
import string
from collections.abc import Sequence

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
UINT32_MAX, UINT64_MAX = 2**32 - 1, 2**64 - 1

EDGE_INTS = (
    0, 1, -1, 2, 7, 100, 2**15 - 1, 2**15, -(2**15) - 1, 2**16, INT32_MAX, INT32_MAX + 1,
    INT32_MIN, INT32_MIN - 1, UINT32_MAX, 2**53 + 1, 2**62, INT64_MAX - 1, INT64_MAX,
    INT64_MIN, INT64_MIN + 1, 10**18,
)  # fmt: skip

HOSTILE_STRINGS = (
    "",
    " ",
    "a",
    "\x00",
    "a\x00b",
    "\x00" * 3,
    "\x01\x1f\x7f",
    "\n",
    "é",
    "🙂",
    "日本語のテキスト",
    "\u202eevil",
    "\ufeff",
    "\uffff",
    "\U0010ffff",
    "x" * 300,
    "y" * 70_000,
    "%",
    "_",
    "\\",
    "'",
    '"',
    "*",
    "NULL",
    "'; DROP TABLE experiments; --",
    "experiments/1",
    "experiments/9223372036854775808",
    "artifacts/1",
    "status.state",
    "1",
    "-1",
    "99999999999999999999",
)

#: Names with ids on and past every integer edge, and near-misses of the grammar.
HOSTILE_IDS = (
    "0", "-1", "1", "01", "+1", " 1", "1 ", "1\n", "1\x00", "١٢", "²", "1e3", "0x10",
    "2147483647", "2147483648", "9223372036854775806", "9223372036854775807",
    "9223372036854775808", "9999999999999999999", "10000000000000000000",
    "18446744073709551616", "1" * 40, "",
)  # fmt: skip

_PRINTABLE = string.ascii_letters + string.digits + " -_./:*\"'()=<>!\\"


def random_text(rng: random.Random) -> str:
    """A hostile string, or random characters (including NUL and non-BMP ones)."""
    if rng.random() < 0.6:
        return rng.choice(HOSTILE_STRINGS)
    alphabet = _PRINTABLE + "\x00éß日🙂\u202e\t"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))


def hostile_id(rng: random.Random) -> str:
    return rng.choice(HOSTILE_IDS)


_INT32_TYPES = (
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_SINT32,
    FieldDescriptor.TYPE_SFIXED32,
    FieldDescriptor.TYPE_ENUM,
)


def _int_range(field: FieldDescriptor) -> tuple[int, int]:
    kind = field.type
    if kind in _INT32_TYPES:
        return INT32_MIN, INT32_MAX
    if kind in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return 0, UINT32_MAX
    if kind in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return 0, UINT64_MAX
    return INT64_MIN, INT64_MAX


def random_int(rng: random.Random, low: int = INT64_MIN, high: int = INT64_MAX) -> int:
    """An integer edge (or a random value) within [low, high]."""
    if rng.random() < 0.7:
        fitting = [v for v in EDGE_INTS if low <= v <= high]
        if fitting:
            return rng.choice(fitting)
    return rng.randint(low, high)


def random_enum(field: FieldDescriptor, rng: random.Random) -> int:
    """A defined number of the enum, or an unknown one (proto3 enums are open)."""
    assert field.enum_type is not None
    if rng.random() < 0.5:
        return int(rng.choice(field.enum_type.values).number)
    return random_int(rng, INT32_MIN, INT32_MAX)


def scalar_value(field: FieldDescriptor, rng: random.Random) -> object:
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        return random_text(rng)
    if kind == FieldDescriptor.TYPE_BYTES:
        return rng.randbytes(rng.randint(0, 16))
    if kind == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return rng.choice((0.0, -1.0, 1e300, float("inf"), float("nan")))
    if kind == FieldDescriptor.TYPE_ENUM:
        return random_enum(field, rng)
    return random_int(rng, *_int_range(field))


def hostile_timestamp(message: Message, rng: random.Random) -> None:
    """Seconds and nanos of a Timestamp or Duration: valid, edge or out of any range."""
    seconds = rng.choice(
        (0, 1, -1, 1_700_000_000, 253402300799, 253402300800, -62135596800, -62135596801,
         315576000000, 315576000001, -315576000001, INT64_MAX, INT64_MIN)
    )  # fmt: skip
    nanos = rng.choice((0, 1, 999_999_999, 1_000_000_000, -1, INT32_MAX, INT32_MIN))
    message.seconds = seconds  # type: ignore[attr-defined]
    message.nanos = nanos  # type: ignore[attr-defined]


_TIME_TYPES = ("google.protobuf.Timestamp", "google.protobuf.Duration")


def _is_map(field: FieldDescriptor) -> bool:
    message_type = field.message_type
    return message_type is not None and message_type.GetOptions().map_entry


def mutate(message: Message, rng: random.Random, *, depth: int = 0) -> None:
    """Replace (or add) one randomly chosen field somewhere in ``message``."""
    descriptor = message.DESCRIPTOR
    if descriptor.full_name in _TIME_TYPES:
        hostile_timestamp(message, rng)
        return
    fields: list[FieldDescriptor] = list(descriptor.fields)  # type: ignore[arg-type]
    if not fields:
        return
    field = rng.choice(fields)
    container = getattr(message, field.name)
    if _is_map(field):
        entry = field.message_type
        assert entry is not None
        key_field = entry.fields_by_name["key"]
        value_field = entry.fields_by_name["value"]
        key = scalar_value(key_field, rng)
        if value_field.message_type is not None:
            mutate(container[key], rng, depth=depth + 1)
        else:
            container[key] = scalar_value(value_field, rng)
    elif field.message_type is not None:
        if field.is_repeated:
            item = container.add() if not container or rng.random() < 0.5 else rng.choice(container)
        else:
            item = container
        item.SetInParent()
        if depth < 8:
            mutate(item, rng, depth=depth + 1)
    elif field.is_repeated:
        container.append(scalar_value(field, rng))
    else:
        setattr(message, field.name, scalar_value(field, rng))


def mutated(message: Message, rng: random.Random, *, most: int = 3) -> Message:
    """``message`` with 0..``most`` mutations (in place; returned for chaining)."""
    for _ in range(rng.randint(0, most)):
        mutate(message, rng)
    return message


def pick(rng: random.Random, items: Sequence[str], hostile: float = 0.3) -> str:
    """One of ``items`` (known-good names), or a hostile string with probability
    ``hostile``."""
    if not items or rng.random() < hostile:
        return random_text(rng)
    return rng.choice(items)


_FILTERS = (
    "",
    "state = RUNNING",
    "state = INITIALIZING OR state = RESTARTING",
    "NOT state = STOPPED",
    "-wid = 1",
    "wid > 1 AND wid <= 5",
    'tags:"a"',
    "tags:*",
    'notes:"x"',
    'title = "pre*"',
    "priority = HIGH",
    "priority = 3",
    'create_time > "2026-01-01T00:00:00Z"',
    'create_time < "0001-01-01T00:00:00Z"',
    'create_time > "9999-12-31T23:59:59Z"',
    'create_time > "0001-01-01T00:00:00+14:00"',
    'update_time < "9999-12-31T23:59:59-14:00"',
    "severity >= WARNING",
    "execution_id = 2",
    "done = true",
    "action_type = STOP",
    "data_type = URL",
    "wid = 9223372036854775807",
    "wid = 9223372036854775808",
    "wid = -9223372036854775809",
    "execution_id > 99999999999999999999999",
    "state = 99999",
    "priority = 40000",
    'title = "\x00"',
    'tags:"\x00"',
    "title = \x00",
    "(" * 200 + "wid = 1" + ")" * 200,
    "NOT " * 300 + "wid = 1",
    "wid = 1 AND " * 400 + "wid = 1",
    '"unterminated',
    "wid =",
    "= 1",
    "unknown_field = 1",
    "wid = 1e3",
    "create_time = yesterday",
    "wid = 0x10",
)

_ORDER_FIELDS = ("wid", "state", "create_time", "update_time", "title", "priority",
                 "severity", "execution_id", "tags", "name", "\x00", "")  # fmt: skip


def random_filter(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.5:
        return ""
    if roll < 0.6:
        return random_text(rng)
    parts = [rng.choice(_FILTERS) for _ in range(rng.randint(1, 3))]
    return f" {rng.choice(('AND', 'OR'))} ".join(parts)


def random_order_by(rng: random.Random) -> str:
    if rng.random() < 0.6:
        return ""
    if rng.random() < 0.1:
        return random_text(rng)
    keys = [
        f"{rng.choice(_ORDER_FIELDS)}{rng.choice(('', ' desc', ' asc', ' DESC', ' sideways'))}"
        for _ in range(rng.randint(1, 3))
    ]
    return ", ".join(keys)


def random_page_size(rng: random.Random) -> int:
    if rng.random() < 0.8:
        return rng.choice((0, 1, 2, 5, 100))
    return rng.choice((1000, 1001, -1, INT32_MAX, INT32_MIN))


def random_page_token(rng: random.Random, seen: Sequence[str]) -> str:
    """Empty, one seen in an earlier answer (possibly for another request), or forged."""
    roll = rng.random()
    if roll < 0.5:
        return ""
    if roll < 0.75 and seen:
        return rng.choice(seen)
    return rng.choice(
        (
            random_text(rng),
            "eyJmIjoiMCIsInYiOlsxXX0",  # {"f":"0","v":[1]}
            "eyJmIjoiMCIsInYiOls5OTk5OTk5OTk5OTk5OTk5OTk5OTk5XX0",
            "AAAA",
            "=" * 8,
            "A" * 5000,
        )
    )


def random_mask(rng: random.Random, allowed: Sequence[str]) -> list[str]:
    """Some allowed paths, sometimes with an invalid one."""
    paths = rng.sample(list(allowed), rng.randint(0, len(allowed)))
    if rng.random() < 0.25:
        paths.append(
            rng.choice(("name", "status", "", "\x00", "create_time", "executable.jobset", "a.b"))
        )
    return paths
