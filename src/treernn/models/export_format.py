"""The exported model's format, read as data: one reader per file, each checking kind, type and
size against the format before anything is built from it (`treernn.models.export` builds the
model from what these readers return, and writes the format).

An export is a folder of plain files (``config.json``, ``model.safetensors``, ``vocab.txt``,
``README.md`` and, where the run recorded one, ``kernel_choices.json``). Someone may hand you one
that is damaged or hostile, so every reader here

- reads regular files only, never through a symbolic link, each within a size for its kind
  (`LIMITS`): a FIFO never blocks, ``/dev/zero`` never fills memory, a link never leads outside;
- checks the file against the format's schema: ``config.json``'s keys and types, finite numbers
  and a bounded nesting; ``vocab.txt`` as UTF-8 lines, unique, as many as the model's vocabulary
  size; ``model.safetensors``' header (names, dtypes, shapes, offsets inside the file) before a
  byte of weights is read; ``kernel_choices.json`` as a map of names to choices;
- checks the folder whole: format 2 records every file's size and SHA-256 in ``config.json``,
  which is written last (`treernn.models.export` writes a new export into a temporary folder beside
  its target and renames it into place), so a folder cut short or altered does not load.

Every refusal is one `treernn.errors.CheckpointError` line naming the folder, the file, what is
wrong and what to do. Nothing here imports torch.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treernn.errors import CheckpointError
from treernn.files import GB, MB, RefusedFile, file_kind, read_limited
from treernn.models.kinds import KINDS

log = logging.getLogger("treernn")

FORMAT = "treernn-model"
#: the export format this code writes and reads (1: no record of the files; 2: ``config.json``
#: records each file's size and SHA-256 and is written last); a newer one is refused
FORMAT_VERSION = 2
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
VOCAB_FILE = "vocab.txt"
CARD_FILE = "README.md"
CHOICES_FILE = "kernel_choices.json"
#: every file an export may hold: what ``from_pretrained`` downloads from a Hub repository
EXPORT_FILES = [CONFIG_FILE, WEIGHTS_FILE, VOCAB_FILE, CARD_FILE, CHOICES_FILE]
#: the files format 2 must record (``kernel_choices.json`` only where the run made choices)
REQUIRED_FILES = (WEIGHTS_FILE, VOCAB_FILE, CARD_FILE)
#: the most bytes each file may hold
LIMITS = {
    CONFIG_FILE: 1 * MB,
    WEIGHTS_FILE: 256 * GB,
    VOCAB_FILE: 256 * MB,
    CARD_FILE: 1 * MB,
    CHOICES_FILE: 4 * MB,
}
#: the most bytes a safetensors header may hold (the library's own limit is 100 MB)
HEADER_LIMIT = 100 * MB
#: how deeply ``config.json``'s values may nest (the writer's deepest is four)
MAX_DEPTH = 32
#: safetensors dtype names -> bytes per element
DTYPE_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1,
}  # fmt: skip
#: what to do about an export that is not whole or not as written
FIX = "export the model again (python -m treernn export), or ask whoever shared it for a whole copy"


def refused(folder: Path, what: str, todo: str = FIX) -> CheckpointError:
    return CheckpointError(f"exported model {folder}: {what}; {todo}")


@dataclass(frozen=True)
class Tensor:
    """One tensor as a safetensors header describes it."""

    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int


# ----------------------------------------------------------------------------- files
def read_file(folder: Path, name: str, follow_links: bool = False) -> bytes:
    """The bytes of ``folder/name``: a regular file, not a link (unless ``follow_links``: a Hub
    cache's snapshot links to its blobs), within `LIMITS`; else one line."""
    try:
        return read_limited(folder / name, LIMITS[name], follow_links=follow_links)
    except FileNotFoundError:
        raise refused(folder, f"it has no {name}") from None
    except RefusedFile as refusal:
        raise refused(folder, f"{name} {refusal.what}") from None
    except OSError as error:
        raise refused(folder, f"{name} cannot be read ({error.strerror})") from None


def utf8(folder: Path, name: str, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise refused(
            folder, f"{name} is not UTF-8 text (byte {error.start} is {data[error.start]:#04x})"
        ) from None


def check_links(folder: Path, links_within: Path | None = None) -> None:
    """An export's folder holds no symbolic link, except, for a Hub cache's snapshot
    (``links_within``: the repository's cache folder), links to files inside that folder."""
    try:
        entries = list(os.scandir(folder))
    except OSError as error:
        raise refused(folder, f"the folder cannot be listed ({error.strerror})") from None
    for entry in entries:
        if not entry.is_symlink():
            continue
        if links_within is not None:
            target = Path(entry.path).resolve()
            if target.is_relative_to(Path(links_within).resolve()) and target.is_file():
                continue
        raise refused(
            folder,
            f"{entry.name} is a symbolic link (to {os.readlink(entry.path)}); an export's files "
            "are read as themselves, never through a link",
            "copy the files themselves into the folder",
        )


def sha256_of(path: Path, follow_links: bool = False) -> tuple[int, str]:
    """The size and SHA-256 of a regular file, read in blocks."""
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow_links else os.O_NOFOLLOW)
    digest = hashlib.sha256()
    size = 0
    descriptor = os.open(path, flags)
    with os.fdopen(descriptor, "rb") as handle:
        while block := handle.read(1 << 22):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()


def check_whole(folder: Path, config: dict[str, Any], follow_links: bool = False) -> None:
    """Format 2: every file ``config.json`` records is there, a regular file of the recorded size
    and SHA-256, and no export file it does not record lies beside it. Format 1 recorded nothing
    to check: it loads with a warning."""
    if config["format_version"] < 2:
        log.warning(
            "exported model %s has format version 1, which records no sizes or hashes of its "
            "files: it cannot be checked whole. Save it again (save_pretrained) to check it",
            folder,
        )
        return
    recorded = config["files"]
    for name in EXPORT_FILES:
        if name != CONFIG_FILE and name not in recorded and os.path.lexists(folder / name):
            raise refused(folder, f"{name} is not one of the files its {CONFIG_FILE} records")
    for name, record in recorded.items():
        try:
            size, digest = _size_and_hash(folder, name, follow_links)
        except FileNotFoundError:
            raise refused(folder, f"{name} is missing (the export is not whole)") from None
        if size != record["bytes"]:
            raise refused(
                folder,
                f"{name} holds {size} bytes, not the {record['bytes']} recorded in "
                f"{CONFIG_FILE} (cut short or altered)",
            )
        if digest != record["sha256"]:
            raise refused(
                folder,
                f"{name} does not match the SHA-256 recorded in {CONFIG_FILE} (altered since it "
                "was exported)",
            )


def _size_and_hash(folder: Path, name: str, follow_links: bool) -> tuple[int, str]:
    path = folder / name
    info = os.stat(path) if follow_links else os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        raise refused(folder, f"{name} is {file_kind(info.st_mode)}, not a regular file")
    if info.st_size > LIMITS[name]:
        raise refused(folder, f"{name} is larger than a file of its kind may be")
    return sha256_of(path, follow_links)


def file_record(path: Path) -> dict[str, Any]:
    """What format 2 records of a file it writes: its size and SHA-256."""
    size, digest = sha256_of(path)
    return {"bytes": size, "sha256": digest}


# ----------------------------------------------------------------------------- config.json
def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_json(folder: Path, name: str, text: str) -> Any:
    """JSON without NaN or infinities, nested at most `MAX_DEPTH` deep."""
    depth = deepest = 0
    for char in re.sub(r'"(?:\\.|[^"\\])*"', '""', text):  # strings cannot nest
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    if deepest > MAX_DEPTH:
        raise refused(folder, f"{name} nests {deepest} levels deep (at most {MAX_DEPTH})")
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except ValueError as error:
        raise refused(folder, f"{name} is not valid JSON ({error})") from None
    _check_finite(folder, name, value)
    return value


def _check_finite(folder: Path, name: str, value: Any) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise refused(folder, f"{name} holds {item}, a number too large for a float")
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _kind_of(value: Any) -> str:
    kinds = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    return "null" if value is None else kinds.get(type(value), "a number")


def _expect(folder: Path, value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        wanted = {dict: "an object", list: "a list", str: "a string", bool: "true or false"}
        name = wanted.get(kind, "an integer") if isinstance(kind, type) else "a value"
        raise refused(folder, f"{CONFIG_FILE}: {where} is {_kind_of(value)}, not {name}")
    return value


def read_config(folder: str | Path, follow_links: bool = False) -> dict[str, Any]:
    """The ``config.json`` of an export, checked against the format: one line where it cannot be
    read, is not an export's, has a newer format version, or a key of the wrong kind."""
    folder = Path(folder)
    text = utf8(folder, CONFIG_FILE, read_file(folder, CONFIG_FILE, follow_links))
    config = parse_json(folder, CONFIG_FILE, text)
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise CheckpointError(
            f"{folder} is not an exported treernn model: its {CONFIG_FILE} is not of format "
            f"{FORMAT!r}"
        )
    version = config.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise refused(folder, f"{CONFIG_FILE} has no format_version (a whole number from 1)")
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"exported model {folder} has format version {version}; this treernn reads versions "
            f"up to {FORMAT_VERSION}: upgrade treernn"
        )
    for key in ("kind", "task", "encoder"):
        if key not in config:
            raise refused(folder, f"{CONFIG_FILE} has no {key!r}")
    kind = config["kind"]
    if kind not in KINDS:
        raise refused(
            folder,
            f"{CONFIG_FILE}: kind {kind!r} is not one of {', '.join(KINDS)}",
        )
    for part in ("task", "encoder"):
        node = _expect(folder, config[part], dict, part)
        if "class" not in node:
            raise refused(folder, f"{CONFIG_FILE}: {part} has no 'class'")
        _expect(folder, node["class"], str, f"{part}.class")
        _expect(folder, node.setdefault("arguments", {}), dict, f"{part}.arguments")
    _expect(folder, config.setdefault("meta", {}), dict, "meta")
    _expect(folder, config.setdefault("provenance", {}), dict, "provenance")
    _expect(folder, config.setdefault("flush_denormal", True), bool, "flush_denormal")
    vocabulary = _expect(folder, config.setdefault("vocabulary", {}), dict, "vocabulary")
    if vocabulary.get("file", VOCAB_FILE) != VOCAB_FILE:
        raise refused(folder, f"{CONFIG_FILE}: vocabulary.file must be {VOCAB_FILE!r}")
    if vocabulary.setdefault("form", "vocabulary") not in ("vocabulary", "list"):
        raise refused(
            folder,
            f"{CONFIG_FILE}: vocabulary.form is {vocabulary['form']!r}, not vocabulary or list",
        )
    if vocabulary["form"] == "list" and kind != "dependency_lm":
        raise refused(
            folder,
            f"{CONFIG_FILE}: vocabulary.form is 'list', but a {kind.replace('_', ' ')} reads "
            "its words through a vocabulary (form 'vocabulary')",
        )
    if version >= 2:
        _check_files_record(folder, config)
    return config


def _check_files_record(folder: Path, config: dict[str, Any]) -> None:
    files = _expect(folder, config.get("files"), dict, "files")
    for name in REQUIRED_FILES:
        if name not in files:
            raise refused(folder, f"{CONFIG_FILE}: files records no {name}")
    for name, record in files.items():
        if name not in EXPORT_FILES or name == CONFIG_FILE:
            raise refused(folder, f"{CONFIG_FILE}: files names {name!r}, not a file of an export")
        _expect(folder, record, dict, f"files.{name}")
        size, digest = record.get("bytes"), record.get("sha256")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise refused(folder, f"{CONFIG_FILE}: files.{name}.bytes is not a size in bytes")
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise refused(folder, f"{CONFIG_FILE}: files.{name}.sha256 is not a SHA-256 in hex")


def config_bytes(folder: Path) -> bytes:
    """``config.json``'s bytes (what identifies an export of format 2: it records the others')."""
    return read_file(folder, CONFIG_FILE)


# ----------------------------------------------------------------------------- vocab.txt
def read_vocabulary(folder: Path, config: dict[str, Any], follow_links: bool = False) -> list[str]:
    """``vocab.txt``'s tokens in id order: UTF-8, one per line (``\\n`` only), each once, as many
    as the model's ``vocab_size``; a language model's has ``<eos>``."""
    text = utf8(folder, VOCAB_FILE, read_file(folder, VOCAB_FILE, follow_links))
    tokens = text.split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    seen: dict[str, int] = {}
    for line, token in enumerate(tokens, start=1):
        if "\r" in token:
            raise refused(folder, f"{VOCAB_FILE}:{line} ends in a carriage return (\\r\\n lines)")
        if token in seen:
            raise refused(
                folder,
                f"{VOCAB_FILE}:{line} repeats {token!r} of line {seen[token]}: every later "
                "word would read another word's id",
            )
        seen[token] = line
    expected = config["task"]["arguments"].get("vocab_size")
    if expected is not None and expected != len(tokens):
        raise refused(
            folder,
            f"{VOCAB_FILE} holds {len(tokens)} tokens, but the model's vocab_size is {expected} "
            f"({CONFIG_FILE}): ids would read the wrong words",
        )
    if config["kind"] == "language_model" and "<eos>" not in seen:
        raise refused(folder, f"{VOCAB_FILE} has no <eos>, which a language model reads after")
    return tokens


# ----------------------------------------------------------------------------- model.safetensors
def read_header(folder: Path, follow_links: bool = False) -> dict[str, Tensor]:
    """The tensors ``model.safetensors``' header describes, checked to lie inside the file (each
    tensor's bytes as its dtype and shape say, in order, without overlap), read without the
    weights."""
    path = folder / WEIGHTS_FILE
    try:
        flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow_links else os.O_NOFOLLOW)
        descriptor = os.open(path, flags)
    except FileNotFoundError:
        raise refused(folder, f"it has no {WEIGHTS_FILE}") from None
    except OSError:
        read_file(folder, WEIGHTS_FILE, follow_links)  # says what it is (a link, a FIFO)
        raise
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise refused(
                folder, f"{WEIGHTS_FILE} is {file_kind(info.st_mode)}, not a regular file"
            )
        size = info.st_size
        start = handle.read(8)
        if len(start) < 8:
            raise refused(folder, f"{WEIGHTS_FILE} holds {size} bytes, too few for a header")
        (length,) = struct.unpack("<Q", start)
        if length > min(HEADER_LIMIT, size - 8):
            raise refused(
                folder, f"{WEIGHTS_FILE}'s header claims {length} bytes, more than the file holds"
            )
        text = utf8(folder, WEIGHTS_FILE, handle.read(length))
    header = parse_json(folder, f"{WEIGHTS_FILE}'s header", text)
    if not isinstance(header, dict):
        raise refused(folder, f"{WEIGHTS_FILE}'s header is not an object")
    data_size = size - 8 - length
    tensors: dict[str, Tensor] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        tensors[name] = _tensor(folder, name, entry, data_size)
    end = 0
    for name, tensor in sorted(tensors.items(), key=lambda item: item[1].start):
        if tensor.start < end:
            raise refused(folder, f"{WEIGHTS_FILE}: tensor {name} overlaps another")
        end = tensor.end
    return tensors


def _tensor(folder: Path, name: str, entry: Any, data_size: int) -> Tensor:
    where = f"{WEIGHTS_FILE}: tensor {name}"
    if not isinstance(entry, dict):
        raise refused(folder, f"{where} is described by {_kind_of(entry)}, not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in DTYPE_BYTES:
        raise refused(folder, f"{where} has dtype {dtype!r}, which safetensors does not know")
    if not isinstance(shape, list) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape
    ):
        raise refused(folder, f"{where} has shape {shape!r}, not a list of sizes")
    if not (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(isinstance(n, int) and not isinstance(n, bool) for n in offsets)
        and 0 <= offsets[0] <= offsets[1] <= data_size
    ):
        raise refused(folder, f"{where} lies outside the file (offsets {offsets!r})")
    expected = math.prod(shape) * DTYPE_BYTES[dtype]
    if offsets[1] - offsets[0] != expected:
        raise refused(
            folder,
            f"{where} holds {offsets[1] - offsets[0]} bytes, but a {dtype} tensor of shape "
            f"{shape} needs {expected}",
        )
    return Tensor(dtype, tuple(shape), offsets[0], offsets[1])


# ----------------------------------------------------------------------------- kernel_choices.json
def read_choices(folder: Path, follow_links: bool = False) -> dict[str, str]:
    """``kernel_choices.json`` where the export has one: the kernels' choices the run made, a map
    of names to choices (`treernn.kernels.choices`); ``{}`` where it has none."""
    if not os.path.lexists(folder / CHOICES_FILE):
        return {}
    text = utf8(folder, CHOICES_FILE, read_file(folder, CHOICES_FILE, follow_links))
    record = parse_json(folder, CHOICES_FILE, text)
    if not isinstance(record, dict):
        raise refused(folder, f"{CHOICES_FILE} holds {_kind_of(record)}, not an object")
    choices = record.get("choices", {})
    if not isinstance(choices, dict) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in choices.items()
    ):
        raise refused(folder, f"{CHOICES_FILE}: choices is not a map of names to choices")
    return dict(choices)
