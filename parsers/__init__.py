"""One module per input format, and :data:`FORMATS`, the one registry that says what a file is.

Each :class:`InputFormat` record holds everything about one format: the names it is written
under, how its content is recognised, the parser (``module:function``, imported on first use),
the limits its files are held to and the bounds outside which a recorded time is impossible.
Detection (:func:`detect_format`), the folder search of ``analyze`` (:func:`is_profile`) and the
runner's "did this launch leave a profile?" all ask the registry. A new input format is one
parser module plus one record. Records without a parser name files that are given by mistake
(a PyTorch execution trace, a gzip-compressed SQLite export) and say what to do instead.
"""

from __future__ import annotations

import codecs
import importlib
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from profreport import inputs
from profreport.errors import InputError, UnsupportedFormatError
from profreport.inputs import EVENT_TIMES, Limit, TimeBounds, open_input
from profreport.model import Profile, SourceKind

SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"
PICKLE_MAGIC = b"\x80"
#: The first bytes of every Nsight Systems report (``.nsys-rep`` and the older ``.qdrep``).
NSYS_REPORT_MAGIC = b"NVIDIA Tegra Profiler Report"
#: Names an Nsight Systems report is written under; a report whose header is damaged is still
#: handed to nsys by its name, so that nsys says what is wrong with it.
NSYS_REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
#: Bytes of a file's start (inflated when it is gzip) that detection looks at: Kineto writes its
#: ``traceEvents`` key after a few kB of header members, an execution trace its ``nodes`` key
#: after a few hundred bytes.
HEAD_BYTES = 64 << 10
#: A top-level member only a Kineto / Chrome trace has.
_KINETO_KEY = re.compile(rb'^\s*\{.*?"(?:traceEvents|schemaVersion|deviceProperties)"\s*:',
                         re.DOTALL)
#: PyTorch's execution trace (ExecutionTraceObserver, the Chakra input): a ``schema`` member
#: and the ``nodes`` array of the recorded graph, never ``traceEvents``.
_EXECUTION_TRACE_KEYS = (re.compile(rb'"schema"\s*:'), re.compile(rb'"nodes"\s*:\s*\['))


@dataclass(frozen=True)
class Head:
    """The start of a file as detection sees it: its name, and its first bytes (inflated)."""

    name: str
    data: bytes
    compressed: bool


@dataclass(frozen=True)
class ParseOptions:
    """Settings that change how files are read."""

    #: Where ``.nsys-rep`` exports are cached (default: the user cache folder).
    cache_dir: Path | None = None
    #: Extra folder to look for line_profiler sources in.
    source_root: Path | None = None
    #: The nsys that exports reports (default: the newest one found, see parsers.nsys).
    nsys: Path | None = None


@dataclass(frozen=True)
class InputFormat:
    """One input format: names, recognition, parser, limits and impossible-value bounds."""

    name: str
    kind: SourceKind | None
    description: str
    #: Names files of this format are written under (a folder search keeps these).
    suffixes: tuple[str, ...]
    #: Whether a file's start is this format's.
    recognises: Callable[[Head], bool]
    #: ``module:function`` of the parser, a function ``(path, options) -> Profile``; None for a
    #: format that is recognised only to be refused with :attr:`refusal`.
    entry_point: str | None = None
    refusal: str = ""
    limits: tuple[Limit, ...] = ()
    #: Times outside these bounds are dropped and counted (None: the format records no times).
    bounds: TimeBounds | None = None

    def parse(self, path: Path, options: ParseOptions) -> Profile:
        """Read ``path`` with this format's parser (imported here, on first use)."""
        if self.entry_point is None:
            raise UnsupportedFormatError(self.refusal, path)
        module, function = self.entry_point.split(":")
        return getattr(importlib.import_module(module), function)(path, options)


def _is_json_object(head: Head) -> bool:
    """Whether the start is a JSON object."""
    return head.data.lstrip()[:1] == b"{"


def _is_kineto(head: Head) -> bool:
    """A JSON object with a Kineto member near its start, or named as a torch.profiler trace
    (a trace whose header is damaged still gets the Kineto parser's own error line)."""
    named = head.name.endswith((".pt.trace.json", ".pt.trace.json.gz"))
    return bool(_KINETO_KEY.match(head.data)) or (named and _is_json_object(head))


def _is_execution_trace(head: Head) -> bool:
    """A JSON object with an execution trace's ``schema`` and ``nodes`` and no Kineto member."""
    return (_is_json_object(head) and not _KINETO_KEY.match(head.data)
            and all(key.search(head.data) for key in _EXECUTION_TRACE_KEYS))


#: Every input format profreport knows, most specific first.
FORMATS: tuple[InputFormat, ...] = (
    InputFormat(
        "nsys-report", "nsys", "Nsight Systems report (.nsys-rep, .qdrep)", NSYS_REPORT_SUFFIXES,
        lambda head: head.data.startswith(NSYS_REPORT_MAGIC) and not head.compressed,
        "profreport.parsers.nsys:parse_input", bounds=EVENT_TIMES),
    InputFormat(
        "nsys-sqlite", "nsys", "Nsight Systems SQLite export (nsys export --type sqlite)",
        (".sqlite",), lambda head: head.data.startswith(SQLITE_MAGIC) and not head.compressed,
        "profreport.parsers.nsys:parse_input", bounds=EVENT_TIMES),
    InputFormat(
        "sqlite-gz", None, "gzip-compressed SQLite file", (".sqlite.gz",),
        lambda head: head.data.startswith(SQLITE_MAGIC) and head.compressed,
        refusal="a gzip-compressed SQLite file: decompress it first (gunzip -k FILE) and pass "
                "the .sqlite"),
    InputFormat(
        "execution-trace", None, "PyTorch execution trace (Chakra ET)", (),
        _is_execution_trace,
        refusal="this is a PyTorch execution trace (ExecutionTraceObserver / Chakra ET), not a "
                "Kineto trace: pass the torch.profiler trace (.pt.trace.json) of the same run"),
    InputFormat(
        "kineto", "kineto", "torch.profiler (Kineto) trace (.json, .json.gz)",
        (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json"), _is_kineto,
        "profreport.parsers.kineto:parse_input",
        limits=(inputs.MAX_DECOMPRESSED_BYTES, inputs.MAX_EVENTS, inputs.MAX_NAME_CHARS,
                inputs.MAX_JSON_DEPTH, inputs.MAX_HEADER_BYTES, inputs.MAX_EVENT_BYTES),
        bounds=EVENT_TIMES),
    InputFormat(
        "lprof", "lprof", "line_profiler output (.lprof)", (".lprof",),
        lambda head: head.data.startswith(PICKLE_MAGIC) and not head.compressed,
        "profreport.parsers.lprof:parse_input",
        limits=(inputs.MAX_LINE_ENTRIES, inputs.MAX_NAME_CHARS)),
)
#: Every name a profile may be written under, longest first (to strip run names).
PROFILE_SUFFIXES = tuple(sorted({s for f in FORMATS if f.entry_point for s in f.suffixes},
                                key=len, reverse=True))
_KNOWN = ", ".join(f.description for f in FORMATS if f.entry_point)


def read_head(path: Path) -> Head:
    """The first :data:`HEAD_BYTES` of ``path``, inflated when it is gzip-compressed, without
    the UTF-8 byte order mark a text file may open with (Windows editors and PowerShell write
    one before JSON; RFC 8259 lets a reader ignore it)."""
    try:
        with open_input(path) as handle:
            data = handle.read(HEAD_BYTES)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path) from None
    if not data.startswith(GZIP_MAGIC):
        return Head(path.name, data.removeprefix(codecs.BOM_UTF8), compressed=False)
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = inflater.decompress(data, HEAD_BYTES)
    except zlib.error as exc:
        raise InputError(f"damaged gzip file: {exc}", path) from None
    return Head(path.name, data.removeprefix(codecs.BOM_UTF8), compressed=True)


def detect_format(path: Path) -> InputFormat:
    """The registry record of ``path``, judged from its content and then its name."""
    path = Path(path)
    head = read_head(path)
    if not head.data and not head.compressed:
        raise InputError("empty file", path)
    found = next((fmt for fmt in FORMATS if fmt.recognises(head)), None)
    if found is None and path.name.endswith(NSYS_REPORT_SUFFIXES):
        found = FORMATS[0]
    if found is None:
        json = head.data.lstrip()[:1] in (b"{", b"[")
        what = "a JSON file without traceEvents" if json else "unknown content"
        raise InputError(f"not a profile profreport knows ({what}); it reads: {_KNOWN}", path)
    return found


def is_profile(path: Path) -> bool:
    """Whether a file found in a run folder is to be read as a profile: named like one, and,
    for a plain ``.json``, holding a trace (the runner's results and configs are skipped).
    A file that cannot be read counts, so that it gets its own failure line."""
    if not path.name.endswith(PROFILE_SUFFIXES):
        return False
    if not path.name.endswith((".json", ".json.gz")):
        return True
    try:
        head = read_head(path)
    except InputError:
        return True
    return not _is_json_object(head) or any(
        fmt.recognises(head) for fmt in FORMATS if fmt.name in ("kineto", "execution-trace"))


def is_execution_trace(path: Path) -> bool:
    """Whether a file holds a PyTorch execution trace (ExecutionTraceObserver's output, which
    records the operators' graph, not their times); False when it cannot be read."""
    try:
        return _is_execution_trace(read_head(path))
    except InputError:
        return False


def parse_file(path: Path, options: ParseOptions | None = None) -> Profile:
    """Parse one profile file of any supported kind."""
    path = Path(path)
    return detect_format(path).parse(path, options or ParseOptions())

