"""Students' submissions: found in the class folder, hashed, and copied into a private staging
folder under the output folder before anything reads them.

A submission is a folder or a ``.zip`` / ``.tar.gz`` / ``.tgz`` / ``.tar`` archive. Nothing is
read in place: every regular file is copied (or extracted) into ``staging/NAME`` with a byte
budget: an entry whose declared size (zip central directory, tar header, a folder file's lstat)
does not fit in what is left is refused unread, and one that holds more than it declares stops
at the limit whatever its headers claim. Entries that are absolute,
climb out with ``..``, hold a ``\\`` (one name on Linux: refused, never guessed; only in a name
without ``/`` of a zip made on MS-DOS or Windows is it the folder separator, as unzip reads it),
are symlinks, hard links, devices or FIFOs, or come after the file-count or size limit are
refused with a reason and the rest is still graded. Files are created with
``O_EXCL | O_NOFOLLOW`` under a folder the grader made, so nothing lands outside it.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import re
import shutil
import stat
import tarfile
import unicodedata
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from profreport.errors import InputError
from profreport.inputs import BoundedReader, Limit, not_regular_reason

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
#: Files per submission.
MAX_FILES = Limit("files in the submission", 2000,
                  "a student hands in a few profiles and scripts; thousands is an archive bomb")
#: Unpacked bytes per submission.
MAX_UNPACKED_BYTES = Limit("unpacked bytes", 1 << 30,
                           "a student's largest real profile (an nsys report of a few minutes) "
                           "is a few hundred MB; more is a zip bomb")
#: Longest path component most file systems accept.
MAX_NAME_BYTES = 255
#: Bytes copied per read while staging.
CHUNK_BYTES = 1 << 20
#: Entries archivers add that are not the student's files.
IGNORED_PARTS = frozenset({"__MACOSX", ".DS_Store"})
#: What a student's name may keep: letters and digits of any script, ``.``, ``-``, ``_``.
_SAFE_NAME = re.compile(r"[^\w.-]+")
#: Why a name holding a backslash is refused: on Linux it is a character of one name, never a
#: folder separator (archives separate folders with "/"), and neither reading is safe to guess.
BACKSLASH_REASON = ("a '\\' in the name: on Linux it is part of one name, never a folder "
                    "separator (archives separate folders with '/'); rename the file, or make "
                    "the archive again with '/' between folders")
#: Characters of a name kept at most (a folder name must stay under 255 bytes in UTF-8).
MAX_NAME_CHARS = 60
#: The host a zip entry's "version made by" names for MS-DOS and Windows (FAT) tools (APPNOTE
#: 4.4.2), whose names separate folders with "\\" (PowerShell 5's Compress-Archive): unzip
#: reads a "\\" in such a name holding no "/" as a folder separator, with a warning.
ZIP_HOST_FAT = 0
#: The note a zip whose "\\" were read as folder separators adds to the student's result.
BACKSLASH_NOTE = ("zip made on MS-DOS/Windows: '\\' in {count} entry name(s) read as the folder "
                  "separator, as unzip does")


@dataclass(frozen=True)
class Submission:
    """One entry of the class folder."""

    student: str
    path: Path
    #: What intake decided about this student's entries ("newest of 2 submissions: ...").
    note: str = ""
    #: The student's own name when ``student`` is an anonymous code (anonymous mode).
    named: str = ""

    @property
    def own_name(self) -> str:
        """The name the student's files go by (their folder or archive name, made safe)."""
        return self.named or self.student

    @property
    def is_archive(self) -> bool:
        """Whether the entry is an archive (else a folder)."""
        return self.path.is_file()


@dataclass(frozen=True)
class Refusal:
    """An entry of a submission that was not staged, and why."""

    #: The entry's name as the archive or folder gives it (``X and every entry after it``,
    #: ``the rest of the archive`` when ``rest``).
    entry: str
    reason: str
    #: Whether the entries after it were refused with it (a limit reached, a damaged tar).
    rest: bool = False

    def line(self) -> str:
        """``NAME: reason``, as the gradebook and the feedback list it."""
        return f"{self.entry[:200]!s}: {self.reason}"

    def takes(self, path: str) -> bool:
        """Whether the file ``path`` (relative, ``/``-separated) may be this refusal's: the
        entry named so (inside a wrapping folder too), or anything past a limit."""
        wanted = [part for part in path.split("/") if part not in ("", ".")]
        try:
            parts = entry_parts(self.entry)
        except InputError:
            parts = []
        return self.rest or (bool(wanted) and parts[-len(wanted):] == wanted)


@dataclass
class Staged:
    """A submission's files as copied into its staging folder, and what was refused."""

    root: Path
    files: int = 0
    bytes: int = 0
    refusals: list[Refusal] = field(default_factory=list)
    #: How names were read that a teacher should know of (a Windows zip's "\\").
    notes: list[str] = field(default_factory=list)

    @property
    def refused(self) -> list[str]:
        """One line for each entry that was not staged, with the reason."""
        return [refusal.line() for refusal in self.refusals]


class _Budget(Exception):
    """The submission ran past a limit at ``entry``: that entry and every later one are
    refused, for the reason given."""

    def __init__(self, reason: str, entry: str) -> None:
        super().__init__(reason)
        self.entry = entry


def student_name(path: Path) -> str:
    """The entry's name without archive extension, made safe for a folder and a CSV cell:
    letters of every script kept (NFC), spaces and punctuation as ``_``."""
    return _SAFE_NAME.sub("_", _stem(path.name)).strip("._")[:MAX_NAME_CHARS] or "unnamed"


def _distinct(name: str, taken: set[str]) -> str:
    """``name``, or ``name~2``, ``name~3``... when another entry already has it: two entries
    whose names differ only in what was replaced stay two students."""
    candidate, number = name, 1
    while candidate in taken:
        number += 1
        candidate = f"{name}~{number}"
    return candidate


def unwrap(root: Path, student: str) -> Path:
    """The submission's own folder when the archive wraps everything in one named after the
    student (``alice.zip`` holding ``alice/...``, ``José Núñez.zip`` holding ``José Núñez/``)."""
    entries = [entry for entry in root.iterdir() if entry.name not in IGNORED_PARTS]
    if (len(entries) == 1 and entries[0].is_dir()
            and student_name(entries[0]).lower() == student.split("~")[0].lower()):
        return entries[0]
    return root


def find_submissions(folder: Path) -> tuple[list[Submission], list[str]]:
    """Every folder and archive in ``folder`` (sorted), and a reason for each entry skipped."""
    if not folder.is_dir():
        raise InputError("not a folder of submissions", folder)
    skipped: list[str] = []
    by_stem: dict[str, list[Path]] = {}
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        kind = os.lstat(entry).st_mode
        is_archive = stat.S_ISREG(kind) and entry.name.lower().endswith(ARCHIVE_SUFFIXES)
        if not (stat.S_ISDIR(kind) or is_archive):
            skipped.append(f"{entry.name}: not a folder nor a .zip/.tar.gz/.tgz/.tar archive"
                           + (" (a symlink)" if stat.S_ISLNK(kind) else ""))
            continue
        by_stem.setdefault(_stem(entry.name), []).append(entry)
    found: list[Submission] = []
    taken: set[str] = set()
    for entries in by_stem.values():
        newest = max(entries, key=lambda path: (os.lstat(path).st_mtime_ns, path.name))
        name = _distinct(student_name(newest), taken)
        taken.add(name)
        older = [entry.name for entry in entries if entry != newest]
        note = (f"newest of {len(entries)} submissions: {newest.name} (not graded: "
                f"{', '.join(older)})" if older else "")
        skipped += [f"{entry}: an older submission of {name} than {newest.name}"
                    for entry in older]
        found.append(Submission(name, newest, note))
    return sorted(found, key=lambda submission: submission.path.name), skipped


def _stem(name: str) -> str:
    """An entry's name without its archive suffix (NFC): ``alice.zip`` and ``alice/`` are two
    submissions of one student."""
    name = unicodedata.normalize("NFC", name)
    for suffix in ARCHIVE_SUFFIXES:
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def content_hash(submission: Submission) -> str:
    """SHA-256 of the archive's bytes, or of a folder's file names and contents."""
    digest = hashlib.sha256()
    if submission.is_archive:
        with open(submission.path, "rb") as handle:
            for chunk in iter(lambda: handle.read(CHUNK_BYTES), b""):
                digest.update(chunk)
        return digest.hexdigest()
    for path in sorted(_walk(submission.path)):
        info = os.lstat(path)
        digest.update(f"{path.relative_to(submission.path).as_posix()}\0{info.st_mode}\0"
                      .encode())
        if stat.S_ISREG(info.st_mode):
            digest.update(file_hash(path).encode())
    return digest.hexdigest()


def file_hash(path: Path) -> str:
    """SHA-256 of one file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _walk(folder: Path) -> Iterator[Path]:
    """Every entry under ``folder`` (symlinks listed, never followed)."""
    for parent, dirs, files in os.walk(folder, followlinks=False):
        dirs.sort()
        for name in sorted(dirs + files):
            yield Path(parent) / name


def entry_parts(name: str) -> list[str]:
    """An archive entry's path components; InputError with the reason when it is unsafe."""
    if "\x00" in name:
        raise InputError("name holds a NUL character")
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        raise InputError("absolute path")
    if "\\" in name:
        raise InputError(BACKSLASH_REASON)
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise InputError("path climbs out of the submission with '..'")
    if any(len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES for part in parts):
        raise InputError(f"a name longer than {MAX_NAME_BYTES} bytes")
    return parts


class _Stager:
    """Copies entries into the staging folder under the limits."""

    def __init__(self, root: Path) -> None:
        self.staged = Staged(root=root)

    def refuse(self, name: str, reason: str, rest: bool = False) -> None:
        """Record an entry that was not staged (with every later one when ``rest``)."""
        self.staged.refusals.append(Refusal(name, reason, rest))

    def add(self, name: str, source: IO[bytes], size: int, mtime: float | None = None) -> None:
        """Copy one regular file's bytes to its place, within the limits, keeping the time the
        archive or folder records (a regrade's copy then keys the same nsys export). ``size``
        is what the archive or folder says the file holds: an entry that says it holds more
        than the budget has left is refused before a byte of it is read."""
        try:
            parts = entry_parts(name)
        except InputError as exc:
            self.refuse(name, str(exc))
            return
        if not parts or parts[0] in IGNORED_PARTS or parts[-1] in IGNORED_PARTS:
            return
        if self.staged.files >= MAX_FILES.value:
            raise _Budget(_beyond(MAX_FILES), name)
        if size > MAX_UNPACKED_BYTES.value - self.staged.bytes:
            raise _Budget(_beyond(MAX_UNPACKED_BYTES), name)
        target = self.staged.root.joinpath(*parts)
        try:
            self._write(target, source, name)
            if mtime is not None:
                os.utime(target, (mtime, mtime))
        except FileExistsError:
            self.refuse(name, "a second entry with the same path")
        except (NotADirectoryError, IsADirectoryError):
            self.refuse(name, "a file and a folder with the same path")
        self.staged.files += 1

    def _write(self, target: Path, source: IO[bytes], name: str) -> None:
        """Write ``target`` (never following a link; the entry ``name``) until the byte budget
        runs out, whatever size the entry said it has; a file not copied whole is removed."""
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        reader = BoundedReader(source, MAX_UNPACKED_BYTES.value - self.staged.bytes)
        try:
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(reader, out, CHUNK_BYTES)
        except InputError:
            target.unlink()
            raise _Budget(_beyond(MAX_UNPACKED_BYTES), name) from None
        except BaseException:
            target.unlink()
            raise
        finally:
            self.staged.bytes += reader.consumed


def _beyond(limit: Limit) -> str:
    """Why the rest of a submission is not staged."""
    return f"more than {limit.value:,} {limit.what} ({limit.reason})"


def stage(submission: Submission, root: Path) -> Staged:
    """Copy or extract ``submission`` into the empty folder ``root``; InputError when the
    archive cannot be opened at all."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    stager = _Stager(root)
    try:
        if not submission.is_archive:
            _stage_folder(submission.path, stager)
        elif submission.path.name.lower().endswith(".zip"):
            _stage_zip(submission.path, stager)
        else:
            _stage_tar(submission.path, stager)
    except _Budget as exc:
        verb = "not unpacked" if submission.is_archive else "not copied"
        stager.refuse(f"{exc.entry[:150]} and every entry after it", f"{verb}: {exc}",
                      rest=True)
    return stager.staged


def _stage_folder(folder: Path, stager: _Stager) -> None:
    """Copy a folder's regular files; symlinks and special files are refused."""
    for path in _walk(folder):
        name = path.relative_to(folder).as_posix()
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            stager.refuse(name, "a symbolic link (links are not followed)")
        elif stat.S_ISREG(info.st_mode):
            _add_folder_file(path, name, info, stager)
        elif not stat.S_ISDIR(info.st_mode):
            stager.refuse(name, not_regular_reason(info.st_mode) or "not a regular file")


def _add_folder_file(path: Path, name: str, info: os.stat_result, stager: _Stager) -> None:
    """Stage the regular file ``path`` whose lstat is ``info`` (the size the budget is checked
    against before a byte is read), opened without following a link or blocking: a file
    swapped for a link, a FIFO or another file since is refused, never read."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        stager.refuse(name, f"cannot read: {exc.strerror or exc}")
        return
    with os.fdopen(fd, "rb") as handle:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (info.st_dev, info.st_ino):
            stager.refuse(name, "replaced by another file while it was copied")
        else:
            stager.add(name, handle, info.st_size, info.st_mtime)


def _zip_mode(info: zipfile.ZipInfo) -> int:
    """The Unix file mode an entry records (0 when made on another OS)."""
    return info.external_attr >> 16 if info.create_system == 3 else 0


def _stage_zip(path: Path, stager: _Stager) -> None:
    """Extract a zip's regular files; links, special files and encrypted entries refused."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise InputError(f"not a readable zip archive: {exc}", path.name) from None
    separated = 0
    with archive:
        for info in archive.infolist():
            mode, name = _zip_mode(info), zip_entry_name(info)
            separated += name != info.filename
            if name.endswith("/"):  # a folder
                continue
            if stat.S_ISLNK(mode):
                stager.refuse(name, "a symbolic link (links are not followed)")
            elif stat.S_IFMT(mode) not in (0, stat.S_IFREG):  # 0: no file type recorded
                stager.refuse(name, not_regular_reason(mode) or "not a regular file")
            elif info.flag_bits & 0x1:
                stager.refuse(name, "encrypted")
            else:
                _add_zip_entry(archive, info, name, stager)
    if separated:
        stager.staged.notes.append(BACKSLASH_NOTE.format(count=separated))


def zip_entry_name(info: zipfile.ZipInfo) -> str:
    """The entry's name with "/" between folders: a "\\" is one when an MS-DOS or Windows tool
    made the entry and its name holds no "/" (as unzip reads it); otherwise the name as
    recorded. Either way :func:`entry_parts` checks the result."""
    if info.create_system == ZIP_HOST_FAT and "/" not in info.filename:
        return info.filename.replace("\\", "/")
    return info.filename


def _add_zip_entry(archive: zipfile.ZipFile, info: zipfile.ZipInfo, name: str,
                   stager: _Stager) -> None:
    """Stage one zip entry as ``name``; a damaged entry is refused, not fatal."""
    try:
        with archive.open(info) as handle:
            stager.add(name, handle, info.file_size, _zip_time(info))
    except (zipfile.BadZipFile, NotImplementedError, OSError, EOFError, ValueError) as exc:
        stager.refuse(name, f"damaged entry: {exc}")


def _zip_time(info: zipfile.ZipInfo) -> float | None:
    """The entry's recorded time (local, as zip stores it), or None when it is not a date."""
    try:
        return datetime.datetime(*info.date_time).timestamp()
    except (ValueError, OverflowError):
        return None


def _stage_tar(path: Path, stager: _Stager) -> None:
    """Extract a tar's regular files; links and special files refused."""
    try:
        archive = tarfile.open(path, "r:*")  # noqa: SIM115 (closed by the with below)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise InputError(f"not a readable tar archive: {exc}", path.name) from None
    with archive:
        try:
            for member in archive:
                _add_tar_member(archive, member, stager)
        except (tarfile.TarError, OSError, EOFError) as exc:
            stager.refuse("the rest of the archive", f"damaged: {exc}", rest=True)


#: The file type each special tar member stands for.
_TAR_MODES = {tarfile.CHRTYPE: stat.S_IFCHR, tarfile.BLKTYPE: stat.S_IFBLK,
              tarfile.FIFOTYPE: stat.S_IFIFO}


def _add_tar_member(archive: tarfile.TarFile, member: tarfile.TarInfo, stager: _Stager) -> None:
    """Stage one tar member, or refuse it with the reason."""
    if member.isdir():
        return
    if member.issym() or member.islnk():
        kind = "symbolic" if member.issym() else "hard"
        stager.refuse(member.name, f"a {kind} link to {member.linkname[:200]!r} "
                                   "(links are not followed)")
    elif not member.isfile():
        stager.refuse(member.name, not_regular_reason(_TAR_MODES.get(member.type, 0))
                      or "not a regular file")
    else:
        handle = archive.extractfile(member)
        if handle is not None:
            stager.add(member.name, handle, member.size, float(member.mtime))
