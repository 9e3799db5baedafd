"""One module per input format; each returns a :class:`profreport.model.Profile`.

``parse_file`` detects the format by content (not only by extension) and dispatches to
``parsers.nsys`` (``.nsys-rep`` and its SQLite export), ``parsers.kineto`` (torch.profiler
``.json``/``.json.gz``) or ``parsers.lprof`` (line_profiler ``.lprof``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from profreport.errors import InputError
from profreport.inputs import open_input
from profreport.model import Profile, SourceKind

SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"
PICKLE_MAGIC = b"\x80"
#: Nsight's own container has no stable magic across versions: these names decide, once the
#: content is known to be none of the other formats.
NSYS_REPORT_SUFFIXES = (".nsys-rep", ".qdrep")


@dataclass(frozen=True)
class ParseOptions:
    """Settings that change how files are read."""

    #: Where ``.nsys-rep`` exports are cached (default: the user cache folder).
    cache_dir: Path | None = None
    #: Extra folder to look for line_profiler sources in.
    source_root: Path | None = None


def detect_kind(path: Path) -> SourceKind:
    """Which parser reads ``path``, judged from its first bytes and then its name."""
    try:
        with open_input(path) as handle:
            head = handle.read(64)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path) from None
    if not head:
        raise InputError("empty file", path)
    if head.startswith(SQLITE_MAGIC):
        return "nsys"
    if head.startswith(GZIP_MAGIC) or head.lstrip()[:1] in (b"{", b"["):
        return "kineto"
    if head.startswith(PICKLE_MAGIC):
        return "lprof"
    if path.name.endswith(NSYS_REPORT_SUFFIXES):
        return "nsys"
    raise InputError(
        "not a profile profreport knows (expected .nsys-rep, nsys .sqlite export, "
        "torch.profiler .json/.json.gz or line_profiler .lprof)", path)


def parse_file(path: Path, options: ParseOptions | None = None) -> Profile:
    """Parse one profile file of any supported kind."""
    from profreport.parsers import kineto, lprof, nsys

    options = options or ParseOptions()
    kind = detect_kind(path)
    if kind == "nsys":
        return nsys.parse(path, cache_dir=options.cache_dir)
    if kind == "kineto":
        return kineto.parse(path)
    return lprof.parse(path, source_root=options.source_root)
