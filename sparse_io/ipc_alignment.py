"""Arrow IPC files with every record-batch buffer 64-byte aligned.

pyarrow's IPC writer pads buffers to 8 bytes and exposes no alignment
setting (its `IpcWriteOptions` has none). `AlignedIpcSink` sits between the
writer and the file: it takes the IPC file format as the writer streams it
(magic, schema message, record batch messages, end-of-stream marker, footer,
footer length, magic) and writes it with each record batch's body starting
at a multiple of 64 bytes in the file and each buffer at a multiple of 64
bytes in its body, so a memory-mapped shard (mappings start on a page) hands
out 64-byte-aligned buffers: whole cache lines, and the alignment SIMD loads
and DLPack consumers prefer. The Arrow format allows it: a message's
metadata may carry padding after its flatbuffer, and a buffer's place in the
body is its recorded offset, not its order. The flatbuffers are patched in
place (buffer offsets, body lengths, the footer's blocks), their sizes
unchanged; the bytes of every buffer are copied as they are, compressed ones
included. Any reader of Arrow IPC files reads the result.

Example:
  >>> import pyarrow as pa, pyarrow.ipc as ipc, io
  >>> raw = io.BytesIO()
  >>> sink = AlignedIpcSink(raw)
  >>> batch = pa.record_batch({"ids": pa.array([[1, 2], [3]], pa.list_(pa.int64()))})
  >>> with ipc.new_file(sink, batch.schema) as writer:
  ...     writer.write_batch(batch)
  >>> sink.close()
  >>> ipc.open_file(pa.py_buffer(raw.getvalue())).get_batch(0).equals(batch)
  True
"""

from __future__ import annotations

import struct
from typing import IO

__all__ = ["ALIGNMENT", "AlignedIpcSink"]

ALIGNMENT = 64
_MAGIC = b"ARROW1"
_CONTINUATION = b"\xff\xff\xff\xff"
# MessageHeader union members (Message.fbs) and the table fields used here.
_SCHEMA, _DICTIONARY_BATCH, _RECORD_BATCH = 1, 2, 3
_MESSAGE_HEADER_TYPE, _MESSAGE_HEADER, _MESSAGE_BODY_LENGTH = 1, 2, 3
_RECORD_BATCH_BUFFERS = 2
_DICTIONARY_BATCH_DATA = 1
_FOOTER_DICTIONARIES, _FOOTER_RECORD_BATCHES = 2, 3
_BUFFER_STRUCT = struct.Struct("<qq")  # Buffer: offset, length
_BLOCK_STRUCT = struct.Struct("<qi4xq")  # Block: offset, metaDataLength, (padding), bodyLength


def _aligned(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


# A minimal flatbuffer reader: tables through their vtables, vectors of structs.
def _field(buf, table: int, index: int) -> int | None:
    """Where field `index` of the table at `table` lies, or None when absent (its default)."""
    vtable = table - struct.unpack_from("<i", buf, table)[0]
    vtable_size = struct.unpack_from("<H", buf, vtable)[0]
    entry = 4 + 2 * index
    if entry + 2 > vtable_size:
        return None
    offset = struct.unpack_from("<H", buf, vtable + entry)[0]
    return table + offset if offset else None


def _follow(buf, at: int) -> int:
    return at + struct.unpack_from("<I", buf, at)[0]


def _table(buf, table: int, index: int) -> int:
    """The table that field `index` (a required table field) points to."""
    at = _field(buf, table, index)
    if at is None:
        raise ValueError(f"Arrow IPC metadata lacks required field {index}")
    return _follow(buf, at)


def _struct_vector(buf, table: int, index: int, size: int) -> list[int]:
    """Positions of the structs of `size` bytes in the vector field `index` ([] when absent)."""
    at = _field(buf, table, index)
    if at is None:
        return []
    vector = _follow(buf, at)
    count = struct.unpack_from("<I", buf, vector)[0]
    return [vector + 4 + i * size for i in range(count)]


class AlignedIpcSink:
    """A binary file-like object for `pyarrow.ipc.new_file`: writes the file to `raw` with aligned buffers.

    Holds one message at a time (a record batch's body is copied once).
    `close()` (or leaving `with`) writes the footer; it does not close `raw`.

    Raises:
      ValueError: the stream is not an Arrow IPC file as pyarrow writes it
        (legacy format, an unknown message type, a buffer outside its body).
    """

    def __init__(self, raw: IO[bytes]):
        self._raw = raw
        self._pending = bytearray()
        self._received = 0  # position in the stream as written to us
        self._written = 0  # position in `raw`
        self._state = "magic"
        self._blocks: dict[int, tuple[int, int, int]] = {}  # input offset -> (offset, metadata, body) in raw
        self.closed = False

    # File-like surface pyarrow uses.
    def write(self, data) -> int:
        """Takes the next bytes of the IPC stream; writes each message out once it is whole."""
        if self.closed:
            raise ValueError("write to a closed AlignedIpcSink")
        view = memoryview(data).cast("B")
        self._pending += view
        self._received += view.nbytes
        self._drain()
        return view.nbytes

    def tell(self) -> int:
        """Bytes taken so far (the position the writer knows; the footer's offsets are mapped on close)."""
        return self._received

    def flush(self) -> None:
        """Flushes the underlying file (a message not yet whole stays held)."""
        self._raw.flush()

    def writable(self) -> bool:
        """True: a sink."""
        return True

    def close(self) -> None:
        """Writes the footer with its blocks moved to where their messages went; ValueError if none came."""
        if self.closed:
            return
        self.closed = True
        if self._state != "trailer":
            raise ValueError(f"Arrow IPC stream ended before its footer (in {self._state})")
        self._write_trailer()

    def __enter__(self) -> AlignedIpcSink:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.closed = True

    # Stream parsing.
    def _emit(self, *pieces) -> None:
        for piece in pieces:
            self._raw.write(piece)
            self._written += len(piece)

    def _drain(self) -> None:
        start = self._received - len(self._pending)  # input offset of _pending[0]
        consumed = 0
        pending = self._pending
        while True:
            left = len(pending) - consumed
            if self._state == "magic":
                if left < 8:
                    break
                if bytes(pending[consumed:consumed + 6]) != _MAGIC:
                    raise ValueError("not an Arrow IPC file: it does not start with ARROW1")
                self._emit(pending[consumed:consumed + 8])
                consumed += 8
                self._state = "messages"
            elif self._state == "messages":
                if left < 8:
                    break
                if bytes(pending[consumed:consumed + 4]) != _CONTINUATION:
                    raise ValueError("Arrow IPC message without its continuation marker (legacy format?)")
                metadata_length = struct.unpack_from("<i", pending, consumed + 4)[0]
                if metadata_length == 0:  # end of stream; the footer follows
                    self._emit(pending[consumed:consumed + 8])
                    consumed += 8
                    self._state = "trailer"
                    continue
                if left < 8 + metadata_length:
                    break
                metadata = bytearray(pending[consumed + 8:consumed + 8 + metadata_length])
                body_length = self._body_length(metadata)
                if left < 8 + metadata_length + body_length:
                    break
                body = memoryview(pending)[consumed + 8 + metadata_length:consumed + 8 + metadata_length + body_length]
                self._message(start + consumed, metadata, body)
                body.release()
                consumed += 8 + metadata_length + body_length
            else:  # trailer: footer, its length, magic; written on close
                break
        if consumed:
            del pending[:consumed]

    @staticmethod
    def _body_length(metadata) -> int:
        root = struct.unpack_from("<I", metadata, 0)[0]
        at = _field(metadata, root, _MESSAGE_BODY_LENGTH)
        return 0 if at is None else struct.unpack_from("<q", metadata, at)[0]

    def _message(self, input_offset: int, metadata: bytearray, body: memoryview) -> None:
        root = struct.unpack_from("<I", metadata, 0)[0]
        at = _field(metadata, root, _MESSAGE_HEADER_TYPE)
        header_type = 0 if at is None else metadata[at]
        if header_type == _SCHEMA:
            self._emit(_CONTINUATION, struct.pack("<i", len(metadata)), metadata, body)
            return
        if header_type not in (_RECORD_BATCH, _DICTIONARY_BATCH):
            raise ValueError(f"unexpected Arrow IPC message type {header_type}")
        header = _table(metadata, root, _MESSAGE_HEADER)
        batch = header if header_type == _RECORD_BATCH else _table(metadata, header, _DICTIONARY_BATCH_DATA)
        pieces = []
        cursor = 0
        for at in _struct_vector(metadata, batch, _RECORD_BATCH_BUFFERS, _BUFFER_STRUCT.size):
            offset, length = _BUFFER_STRUCT.unpack_from(metadata, at)
            if offset < 0 or length < 0 or offset + length > len(body):
                raise ValueError(f"Arrow IPC buffer at {offset} (+{length}) outside its {len(body)}-byte body")
            new_offset = _aligned(cursor)
            _BUFFER_STRUCT.pack_into(metadata, at, new_offset, length)
            if length:
                pieces.append((new_offset, body[offset:offset + length]))
                cursor = new_offset + length
        new_body_length = _aligned(cursor)
        at = _field(metadata, root, _MESSAGE_BODY_LENGTH)
        if at is not None:
            struct.pack_into("<q", metadata, at, new_body_length)
        elif new_body_length:
            raise ValueError("Arrow IPC message with buffers but no body length")
        # Metadata padding puts the body at a multiple of ALIGNMENT in the file.
        padding = -(self._written + 8 + len(metadata)) % ALIGNMENT
        start = self._written
        self._emit(_CONTINUATION, struct.pack("<i", len(metadata) + padding), metadata, bytes(padding))
        at_body = 0
        for new_offset, data in pieces:
            if new_offset > at_body:
                self._emit(bytes(new_offset - at_body))
            self._emit(data)
            at_body = new_offset + len(data)
        if new_body_length > at_body:
            self._emit(bytes(new_body_length - at_body))
        self._blocks[input_offset] = (start, len(metadata) + padding + 8, new_body_length)

    def _write_trailer(self) -> None:
        trailer = self._pending
        if len(trailer) < 10 or bytes(trailer[-6:]) != _MAGIC:
            raise ValueError("Arrow IPC file without its closing magic")
        footer_length = struct.unpack_from("<i", trailer, len(trailer) - 10)[0]
        if footer_length != len(trailer) - 10:
            raise ValueError(f"Arrow IPC footer of {footer_length} bytes in a {len(trailer) - 10}-byte trailer")
        footer = bytearray(trailer[:footer_length])
        root = struct.unpack_from("<I", footer, 0)[0]
        for index in (_FOOTER_DICTIONARIES, _FOOTER_RECORD_BATCHES):
            for at in _struct_vector(footer, root, index, _BLOCK_STRUCT.size):
                offset, _, _ = _BLOCK_STRUCT.unpack_from(footer, at)
                if offset not in self._blocks:
                    raise ValueError(f"Arrow IPC footer names a block at {offset} that the stream did not hold")
                _BLOCK_STRUCT.pack_into(footer, at, *self._blocks[offset])
        self._emit(footer, bytes(trailer[footer_length:]))
        self._pending = bytearray()
