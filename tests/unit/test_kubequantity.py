"""The one quantity parser kubesim and the Actuator share: one named case per form."""

from __future__ import annotations

from decimal import Decimal

import pytest

from kubequantity import format_quantity, parse_quantity


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("8", Decimal(8), id="plain integer"),
        pytest.param("500m", Decimal("0.5"), id="milli"),
        pytest.param("100u", Decimal("0.0001"), id="micro"),
        pytest.param("5n", Decimal("0.000000005"), id="nano"),
        pytest.param("1k", Decimal(1000), id="decimal kilo"),
        pytest.param("2M", Decimal(2 * 10**6), id="decimal mega"),
        pytest.param("1G", Decimal(10**9), id="decimal giga"),
        pytest.param("2E", Decimal(2 * 10**18), id="exa is a suffix, not an exponent"),
        pytest.param("1Ki", Decimal(1024), id="kibi"),
        pytest.param("16Gi", Decimal(16 * 2**30), id="gibi"),
        pytest.param("1.5Gi", Decimal(3 * 2**29), id="fractional binary"),
        pytest.param("1Ei", Decimal(2**60), id="exbi"),
        pytest.param("1e3", Decimal(1000), id="exponent"),
        pytest.param("1E-3", Decimal("0.001"), id="negative exponent"),
        pytest.param("1.5", Decimal("1.5"), id="decimal fraction"),
        pytest.param(".5", Decimal("0.5"), id="leading dot"),
        pytest.param("2.", Decimal(2), id="trailing dot"),
        pytest.param("-1", Decimal(-1), id="negative kept for the caller"),
        pytest.param("+4", Decimal(4), id="explicit plus"),
        pytest.param(" 4 ", Decimal(4), id="surrounding space, as the API server trims it"),
        pytest.param(4, Decimal(4), id="JSON integer"),
        pytest.param(0.25, Decimal("0.25"), id="JSON float"),
    ],
)
def test_parse_quantity(value: object, expected: Decimal) -> None:
    assert parse_quantity(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("", id="empty"),
        pytest.param("8 cores", id="words"),
        pytest.param("1 Gi", id="space inside"),
        pytest.param("1Gb", id="unknown suffix"),
        pytest.param("1Gx", id="unknown suffix letter"),
        pytest.param("Gi", id="suffix without a number"),
        pytest.param("1e", id="exponent without digits"),
        pytest.param("١", id="non-ASCII digit"),
        pytest.param(True, id="boolean"),
        pytest.param(None, id="null"),
        pytest.param(["1"], id="list"),
    ],
)
def test_parse_quantity_rejects_non_quantities(value: object) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(value)


@pytest.mark.parametrize(
    ("value", "resource", "text"),
    [
        pytest.param(Decimal(4), "cpu", "4", id="whole cpus"),
        pytest.param(Decimal(0), "memory", "0", id="zero stays plain"),
        pytest.param(Decimal("0.25"), "cpu", "250m", id="fractional cpus in millis"),
        pytest.param(Decimal("0.0001"), "cpu", "0.0001", id="below a milli"),
        pytest.param(Decimal(16 * 2**30), "memory", "16Gi", id="memory in binary units"),
        pytest.param(Decimal(1536 * 2**20), "memory", "1536Mi", id="largest exact unit"),
        pytest.param(Decimal(10 * 2**40), "ephemeral-storage", "10Ti", id="storage too"),
        pytest.param(Decimal(1000), "memory", "1000", id="bytes not a binary multiple"),
        pytest.param(Decimal(2048), "nvidia.com/gpu", "2048", id="counts stay plain"),
    ],
)
def test_format_quantity(value: Decimal, resource: str, text: str) -> None:
    assert format_quantity(value, resource) == text


@pytest.mark.parametrize("text", ["500m", "16Gi", "4", "1536Mi"])
def test_format_round_trips(text: str) -> None:
    resource = "memory" if text.endswith("i") else "cpu"
    assert format_quantity(parse_quantity(text), resource) == text
