"""Units for display, written once: durations, shares and byte counts as text.

Times are integer nanoseconds everywhere inside profreport; they become text only here, so a
finding and a report table never disagree on a unit (bytes are binary: KiB, MiB, GiB).
"""

from __future__ import annotations

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


def duration(ns: float | None) -> str:
    """A duration in the unit that reads best: µs, ms or s."""
    if ns is None:
        return MISSING
    if ns == 0:
        return "0 ms"
    if abs(ns) < MICROSECOND_BELOW_NS:
        return f"{ns / 1e3:,.1f} µs"
    if abs(ns) < SECOND_FROM_NS:
        return f"{ns / 1e6:,.1f} ms"
    return f"{ns / 1e9:,.2f} s"


def ms(ns: float) -> str:
    """A duration for sentences: milliseconds, microseconds below MICROSECOND_SENTENCE_BELOW_NS
    (so that '0.0 ms' never hides a figure), seconds from SECOND_FROM_NS on."""
    if 0 < abs(ns) < MICROSECOND_SENTENCE_BELOW_NS:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns / 1e6:.1f} ms" if abs(ns) < SECOND_FROM_NS else f"{ns / 1e9:.1f} s"


def ordinal(n: int) -> str:
    """2 -> '2nd', 11 -> '11th', 23 -> '23rd'."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def pct(fraction: float) -> str:
    """A 0..1 share for sentences: 0.1734 -> '17%'; small shares keep a decimal ('0.5%')."""
    return f"{fraction * 100:.1f}%" if abs(fraction) < 0.1 else f"{fraction * 100:.0f}%"


def percent(fraction: float | None) -> str:
    """A 0..1 fraction as a percentage with one decimal, for tables."""
    return MISSING if fraction is None else f"{fraction * 100:.1f}%"


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
