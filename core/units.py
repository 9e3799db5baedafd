"""Units for display, written once: durations, shares and byte counts as text.

Times are integer nanoseconds everywhere inside profreport; they become text only here, so a
finding and a report table never disagree on a unit (bytes are binary: KiB, MiB, GiB). The scale
factors live here too: code elsewhere that converts a time or a size (JSON milliseconds, chart
data, a rate per second) divides by these names, never by a literal (tests/test_units.py).
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

import numpy as np

#: Nanoseconds per microsecond, millisecond and second.
NS_PER_US = 1_000
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
#: Bytes per mebibyte and gibibyte.
MIB = 2**20
GIB = 2**30
#: Bytes per decimal megabyte and gigabyte (device memory is sold in GB).
MB = 10**6
GB = 10**9
#: Shown where a figure is unknown (its sources cannot tell).
MISSING = "—"
#: Below this many nanoseconds a duration reads better in microseconds (1 ms).
MICROSECOND_BELOW_NS = 1_000_000
#: Below this many nanoseconds a sentence gives microseconds: 0.1 ms is the smallest figure
#: that keeps a significant digit as "x.x ms".
MICROSECOND_SENTENCE_BELOW_NS = 100_000
#: From this many nanoseconds on a duration reads better in seconds (10 s).
SECOND_FROM_NS = 10_000_000_000
_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def _in_unit(ns: float, per: int, decimals: int, spec: str = "") -> str:
    """``ns`` in the unit of ``per`` ns with ``decimals`` decimals (``spec`` adds format flags:
    ``,`` groups thousands, ``+`` signs), rounded half up exactly in decimal: integer ns are
    exact, so 118_050_000 ns is '118.1 ms' (a binary float rounded it to '118.0')."""
    exact = Decimal(int(ns)) if isinstance(ns, (int, np.integer)) else Decimal(float(ns))
    if not exact.is_finite():
        return f"{float(ns):{spec}.{decimals}f}"
    rounded = (exact / per).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)
    return f"{rounded:{spec}.{decimals}f}"


def duration(ns: float | None) -> str:
    """A duration in the unit that reads best: µs, ms or s."""
    if ns is None:
        return MISSING
    if ns == 0:
        return "0 ms"
    if abs(ns) < MICROSECOND_BELOW_NS:
        return f"{_in_unit(ns, NS_PER_US, 1, ',')} µs"
    if abs(ns) < SECOND_FROM_NS:
        return f"{_in_unit(ns, NS_PER_MS, 1, ',')} ms"
    return f"{_in_unit(ns, NS_PER_S, 2, ',')} s"


def ms(ns: float) -> str:
    """A duration for sentences: milliseconds, microseconds below MICROSECOND_SENTENCE_BELOW_NS
    (so that '0.0 ms' never hides a figure), seconds from SECOND_FROM_NS on."""
    if 0 < abs(ns) < MICROSECOND_SENTENCE_BELOW_NS:
        return f"{_in_unit(ns, NS_PER_US, 1)} µs"
    return f"{_in_unit(ns, NS_PER_MS, 1)} ms" if abs(ns) < SECOND_FROM_NS \
        else f"{_in_unit(ns, NS_PER_S, 1)} s"


def ms_range(low: float, high: float) -> str:
    """'1.2 s–1.6 s', or one figure when both ends read the same ('6.9 ms', not '6.9 ms–6.9 ms')."""
    return ms(low) if ms(low) == ms(high) else f"{ms(low)}–{ms(high)}"


def ms_value(ns: float) -> float:
    """Nanoseconds as milliseconds rounded to the microsecond: JSON fields and chart data."""
    return round(ns / NS_PER_MS, 3)


def whole_us(ns: int) -> str:
    """A threshold in whole microseconds: 10_000 -> '10 µs'."""
    return f"{ns // NS_PER_US} µs"


def delta_ms(ns: float | None) -> str:
    """A change per step in milliseconds whatever its size, so a column reads in one unit."""
    if ns is None:
        return MISSING
    if ns == 0:
        return "0 ms"
    digits = 1 if abs(ns) >= MICROSECOND_BELOW_NS else 2
    return f"{_in_unit(ns, NS_PER_MS, digits, '+,')} ms"


def ordinal(n: int) -> str:
    """2 -> '2nd', 11 -> '11th', 23 -> '23rd'."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def pct(fraction: float) -> str:
    """A 0..1 share for sentences: 0.1734 -> '17%'; small shares keep a decimal ('0.5%')."""
    return _percentage(fraction, 1 if abs(fraction) < 0.1 else 0)


def whole_pct(fraction: float) -> str:
    """A 0..1 share in whole percent, whatever its size: 0.873 -> '87%' (efficiencies, a
    device's memory); a share under 0.5% keeps its first significant digit (0.004 -> '0.4%')."""
    return _percentage(fraction, 0)


def percent(fraction: float | None) -> str:
    """A 0..1 fraction as a percentage with one decimal, for tables."""
    return MISSING if fraction is None else _percentage(fraction, 1)


def _percentage(fraction: float, decimals: int) -> str:
    """A 0..1 fraction as a percentage with ``decimals`` decimals, except that a share which
    is not 0 never reads 0: it keeps its first significant digit (0.00004 -> '0.004%')."""
    value = fraction * 100
    text = f"{value:.{decimals}f}"
    if value != 0 and math.isfinite(value) and float(text) == 0:
        digits = max(decimals, -math.floor(math.log10(abs(value))))
        text = f"{value:.{digits}f}".rstrip("0")  # 0.0996 rounds up: '0.1', not '0.10'
    return f"{text}%"


def nbytes(value: float | None) -> str:
    """A byte count in B, KiB, MiB, GiB or TiB (binary units)."""
    if value is None or value < 0:
        return MISSING
    size = float(value)
    for unit in _BYTE_UNITS:
        if size < 1024 or unit == _BYTE_UNITS[-1]:
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return MISSING


def knob_mb(value: float) -> str:
    """A byte count as the value of a knob counted in MiB that its name calls MB (DDP's
    bucket_cap_mb), two significant digits below 10, never in exponent form: '1.2 MB',
    '0.0000038 MB'."""
    if value >= 10 * MIB:
        return f"{value / MIB:.0f} MB"
    return np.format_float_positional(value / MIB, precision=2, unique=False, fractional=False,
                                      trim="-") + " MB"


def memory_size(value: float) -> str:
    """A device memory size in decimal and binary units: '34.09 GB (31.75 GiB)', or MB (MiB)
    below one GB (devices are sold in GB, the allocator counts GiB)."""
    if abs(value) >= GB:
        return f"{value / GB:.2f} GB ({value / GIB:.2f} GiB)"
    return f"{value / MB:.1f} MB ({value / MIB:.1f} MiB)"


def binary_unit(highest: float) -> tuple[str, int]:
    """The unit a series of byte counts reaching ``highest`` reads in: GiB from one, else MiB,
    with its size in bytes."""
    return ("GiB", GIB) if highest >= GIB else ("MiB", MIB)
