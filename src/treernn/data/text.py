"""Reading dataset text files line by line, with errors that name the file and line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from treernn.errors import DataError


def utf8_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number from 1, line without its newline) of a UTF-8 file.

    A byte sequence that is not UTF-8 raises `DataError` naming ``path:line``, the byte and
    its column, instead of Python's position in a decoding buffer.
    """
    path = Path(path)
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise DataError(
                    f"{path}:{number}: invalid UTF-8 (byte 0x{raw[error.start]:02x} at column "
                    f"{error.start + 1}); the file is damaged or in another encoding: replace it "
                    "with the original UTF-8 file"
                ) from None
            yield number, line.rstrip("\r\n")
