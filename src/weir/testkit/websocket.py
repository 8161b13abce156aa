"""A small RFC 6455 WebSocket codec, an echo loop for servers and a client, for tests.

No extensions, no compression, no subprotocol negotiation: enough to prove
that an upgrade crosses a proxy and that frames flow both ways.

- :func:`accept_key`: the ``Sec-WebSocket-Accept`` value for a key.
- :func:`encode_frame` / :func:`read_frame`: one frame (clients mask, servers do not).
- :func:`serve_echo`: after a server sent ``101``, echo data frames until close.
- :class:`WebSocketClient`: the handshake over a plain or TLS stream, then frames.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import os
import ssl
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, Self

__all__ = [
    "OP_BINARY",
    "OP_CLOSE",
    "OP_CONTINUATION",
    "OP_PING",
    "OP_PONG",
    "OP_TEXT",
    "ByteReader",
    "Frame",
    "PrefixedReader",
    "WebSocketClient",
    "WebSocketHandshakeError",
    "accept_key",
    "encode_frame",
    "read_frame",
    "serve_echo",
]

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

OP_CONTINUATION = 0x0
OP_TEXT = 0x1
OP_BINARY = 0x2
OP_CLOSE = 0x8
OP_PING = 0x9
OP_PONG = 0xA

#: Frames larger than this are refused (tests never need more).
MAX_PAYLOAD = 1 << 20


class ByteReader(Protocol):
    async def readexactly(self, n: int) -> bytes: ...


class PrefixedReader:
    """A reader that returns ``prefix`` first, then reads from ``reader``.

    For the bytes an HTTP parser read past the end of an upgrade request.
    """

    def __init__(self, prefix: bytes, reader: ByteReader) -> None:
        self._buffer = bytearray(prefix)
        self._reader = reader

    async def readexactly(self, n: int) -> bytes:
        if len(self._buffer) >= n:
            out = bytes(self._buffer[:n])
            del self._buffer[:n]
            return out
        head = bytes(self._buffer)
        self._buffer.clear()
        return head + await self._reader.readexactly(n - len(head))


@dataclass(frozen=True)
class Frame:
    opcode: int
    payload: bytes
    fin: bool = True

    @property
    def text(self) -> str:
        return self.payload.decode("utf-8")


def accept_key(key: str) -> str:
    """``Sec-WebSocket-Accept`` for ``Sec-WebSocket-Key`` ``key`` (RFC 6455 section 4.2.2)."""
    digest = hashlib.sha1((key + GUID).encode("ascii")).digest()  # SHA-1: mandated by the RFC
    return base64.b64encode(digest).decode("ascii")


def encode_frame(opcode: int, payload: bytes, *, mask: bool, fin: bool = True) -> bytes:
    """One frame; ``mask`` must be True from a client and False from a server."""
    head = bytearray([(0x80 if fin else 0) | (opcode & 0x0F)])
    size = len(payload)
    mask_bit = 0x80 if mask else 0
    if size < 126:
        head.append(mask_bit | size)
    elif size < 1 << 16:
        head.append(mask_bit | 126)
        head += struct.pack("!H", size)
    else:
        head.append(mask_bit | 127)
        head += struct.pack("!Q", size)
    if not mask:
        return bytes(head) + payload
    key = os.urandom(4)
    return bytes(head) + key + _unmask(payload, key)


def _unmask(payload: bytes, key: bytes) -> bytes:
    return bytes(b ^ key[i % 4] for i, b in enumerate(payload))


async def read_frame(reader: ByteReader) -> Frame:
    """Read one frame (unmasking it if masked).

    Raises:
        asyncio.IncompleteReadError: the peer closed mid-frame or before one.
        ValueError: a frame larger than :data:`MAX_PAYLOAD`.
    """
    b0, b1 = await reader.readexactly(2)
    size = b1 & 0x7F
    if size == 126:
        (size,) = struct.unpack("!H", await reader.readexactly(2))
    elif size == 127:
        (size,) = struct.unpack("!Q", await reader.readexactly(8))
    if size > MAX_PAYLOAD:
        raise ValueError(f"WebSocket frame of {size} bytes refused (limit {MAX_PAYLOAD})")
    key = await reader.readexactly(4) if b1 & 0x80 else b""
    payload = await reader.readexactly(size) if size else b""
    if key:
        payload = _unmask(payload, key)
    return Frame(opcode=b0 & 0x0F, payload=payload, fin=bool(b0 & 0x80))


async def serve_echo(reader: ByteReader, writer: asyncio.StreamWriter) -> int:
    """Server side, after the ``101``: echo data frames, answer pings, return on close.

    Returns the number of data frames echoed. A peer that disappears ends the loop quietly.
    """
    echoed = 0
    try:
        while True:
            frame = await read_frame(reader)
            if frame.opcode in (OP_TEXT, OP_BINARY, OP_CONTINUATION):
                writer.write(encode_frame(frame.opcode, frame.payload, mask=False, fin=frame.fin))
                echoed += 1
            elif frame.opcode == OP_PING:
                writer.write(encode_frame(OP_PONG, frame.payload, mask=False))
            elif frame.opcode == OP_CLOSE:
                writer.write(encode_frame(OP_CLOSE, frame.payload[:2], mask=False))
                await writer.drain()
                return echoed
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        return echoed


class WebSocketHandshakeError(Exception):
    """The server did not switch protocols: its status, headers and (start of) body."""

    def __init__(self, status: int, headers: Sequence[tuple[str, str]], body: bytes) -> None:
        super().__init__(f"WebSocket handshake refused: HTTP {status}: {body[:200]!r}")
        self.status = status
        self.headers = tuple(headers)
        self.body = body


class WebSocketClient:
    """A connected WebSocket (after a successful handshake). Use :meth:`connect`."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        headers: tuple[tuple[str, str], ...],
        rest: bytes,
    ) -> None:
        self._reader = PrefixedReader(rest, reader)
        self._writer = writer
        #: The headers of the ``101`` response (names lower-cased).
        self.response_headers = headers

    @classmethod
    async def connect(
        cls,
        address: str,
        port: int,
        path: str = "/",
        *,
        host_header: str | None = None,
        headers: Sequence[tuple[str, str]] = (),
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        timeout: float = 5.0,
    ) -> Self:
        """Open a connection to ``address:port`` and upgrade it on ``path``.

        Raises:
            WebSocketHandshakeError: the answer was not ``101`` with the right accept key.
            OSError, TimeoutError: the connection failed.
        """
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                address,
                port,
                ssl=ssl_context,
                server_hostname=server_hostname if ssl_context is not None else None,
            ),
            timeout,
        )
        try:
            key = base64.b64encode(os.urandom(16)).decode("ascii")
            lines = [
                f"GET {path} HTTP/1.1",
                f"Host: {host_header or address}",
                "Upgrade: websocket",
                "Connection: Upgrade",
                f"Sec-WebSocket-Key: {key}",
                "Sec-WebSocket-Version: 13",
                *(f"{name}: {value}" for name, value in headers),
            ]
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
            status_line, *header_lines = head.decode("latin-1").split("\r\n")
            status = int(status_line.split(" ", 2)[1])
            parsed = tuple(
                (name.strip().lower(), value.strip())
                for name, _, value in (line.partition(":") for line in header_lines if line)
            )
            found = dict(parsed)
            if status != 101 or found.get("sec-websocket-accept") != accept_key(key):
                body = b""
                length = int(found.get("content-length", "0") or 0)
                if length:
                    body = await asyncio.wait_for(reader.read(min(length, 4096)), timeout)
                raise WebSocketHandshakeError(status, parsed, body)
        except BaseException:
            writer.close()
            raise
        return cls(reader, writer, parsed, b"")

    async def send_text(self, text: str) -> None:
        self._writer.write(encode_frame(OP_TEXT, text.encode("utf-8"), mask=True))
        await self._writer.drain()

    async def send_binary(self, data: bytes) -> None:
        self._writer.write(encode_frame(OP_BINARY, data, mask=True))
        await self._writer.drain()

    async def receive(self, timeout: float = 5.0) -> Frame:
        """The next data or close frame (pings are answered and skipped)."""
        while True:
            frame = await asyncio.wait_for(read_frame(self._reader), timeout)
            if frame.opcode == OP_PING:
                self._writer.write(encode_frame(OP_PONG, frame.payload, mask=True))
                continue
            if frame.opcode == OP_PONG:
                continue
            return frame

    async def close(self, timeout: float = 2.0) -> None:
        """Send a close frame, wait briefly for the peer's, then close the connection."""
        try:
            self._writer.write(encode_frame(OP_CLOSE, struct.pack("!H", 1000), mask=True))
            await self._writer.drain()
            while (await asyncio.wait_for(read_frame(self._reader), timeout)).opcode != OP_CLOSE:
                pass
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            self._writer.close()
            with contextlib.suppress(OSError, TimeoutError):
                await asyncio.wait_for(self._writer.wait_closed(), timeout)
