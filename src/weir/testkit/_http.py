"""Server-side HTTP/1.1 (h11) and HTTP/2 (h2) connection loops for the testkit.

Protocol only: each complete request is handed to an ``answer`` callback as
a :class:`RawRequest`, and the :class:`Reply` it returns is sent back.
Protocol errors from the peer end the connection (HTTP/1.1 gets a 400 first
when possible); they are raised as ``h11``/``h2`` exceptions for the caller
to swallow.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h11

log = logging.getLogger(__name__)

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
READ_SIZE = 65536


@dataclass(frozen=True)
class RawRequest:
    """One request as received. ``headers`` exclude HTTP/2 pseudo-headers."""

    http_version: str
    method: str
    path: str
    host: str | None
    headers: tuple[tuple[str, str], ...]
    body: bytes


class Reply(NamedTuple):
    status: int
    headers: list[tuple[str, str]]  # lower-case names; content-length is added
    body: bytes
    delay: float


Answer = Callable[[RawRequest], Reply]


async def sniff_h2_preface(reader: asyncio.StreamReader) -> tuple[bool, bytes]:
    """Read until the bytes read so far can't be, or are, the HTTP/2 preface.

    Returns (is_h2, bytes read); the bytes must be fed to the protocol loop.
    """
    initial = b""
    while len(initial) < len(H2_PREFACE) and H2_PREFACE.startswith(initial):
        chunk = await reader.read(READ_SIZE)
        if not chunk:
            break
        initial += chunk
    return initial.startswith(H2_PREFACE), initial


def _head(reply: Reply) -> list[tuple[str, str]]:
    headers = [(k.lower(), v) for k, v in reply.headers if k.lower() != "content-length"]
    return [*headers, ("content-length", str(len(reply.body)))]


async def serve_h1(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes, answer: Answer
) -> None:
    """Serve HTTP/1.x requests (keep-alive) until either side closes."""
    conn = h11.Connection(h11.SERVER)
    if data:  # receive_data(b"") would mean EOF
        conn.receive_data(data)
    request: h11.Request | None = None
    body = bytearray()

    def send(event: h11.Event) -> None:
        writer.write(conn.send(event) or b"")

    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                msg = f"bad request: {exc}\n".encode()
                head = [("content-length", str(len(msg))), ("connection", "close")]
                send(h11.Response(status_code=400, headers=head))
                send(h11.Data(data=msg))
                await writer.drain()
            return
        if event is h11.NEED_DATA:
            conn.receive_data(await reader.read(READ_SIZE))
        elif isinstance(event, h11.Request):
            request, body = event, bytearray()
            if conn.they_are_waiting_for_100_continue:
                send(h11.InformationalResponse(status_code=100, headers=[]))
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage) and request is not None:
            headers = tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers)
            reply = answer(
                RawRequest(
                    http_version=request.http_version.decode("ascii"),
                    method=request.method.decode("ascii"),
                    path=request.target.decode("latin-1"),
                    host=next((v for k, v in headers if k == "host"), None),
                    headers=headers,
                    body=bytes(body),
                )
            )
            if reply.delay > 0:
                await asyncio.sleep(reply.delay)
            send(h11.Response(status_code=reply.status, headers=_head(reply)))
            send(h11.Data(data=reply.body))
            send(h11.EndOfMessage())
            await writer.drain()
            if h11.MUST_CLOSE in (conn.our_state, conn.their_state):
                return
            conn.start_next_cycle()
            request = None
        elif isinstance(event, h11.ConnectionClosed):
            return


@dataclass
class _H2State:
    conn: h2.connection.H2Connection
    writer: asyncio.StreamWriter
    answer: Answer
    streams: dict[int, tuple[list[tuple[str, str]], bytearray]] = field(default_factory=dict)
    senders: set[asyncio.Task[None]] = field(default_factory=set)
    window_changed: asyncio.Event = field(default_factory=asyncio.Event)
    terminated: bool = False

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self.senders.add(task)
        task.add_done_callback(self.senders.discard)


async def serve_h2(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes, answer: Answer
) -> None:
    """Serve HTTP/2 (after ALPN ``h2`` or a sniffed preface in ``data``).

    Streams are answered concurrently, each with its own delay; response
    bodies respect the peer's flow-control windows.
    """
    config = h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
    state = _H2State(h2.connection.H2Connection(config), writer, answer)
    state.conn.initiate_connection()
    writer.write(state.conn.data_to_send())
    try:
        while True:
            if data:
                for event in state.conn.receive_data(data):
                    _on_h2_event(state, event)
                writer.write(state.conn.data_to_send())
                if state.terminated:
                    break
                await writer.drain()
            data = await reader.read(READ_SIZE)
            if not data:
                break
        await writer.drain()
    finally:
        for task in state.senders:
            task.cancel()
        await asyncio.gather(*state.senders, return_exceptions=True)


def _on_h2_event(state: _H2State, event: h2.events.Event) -> None:
    conn, sid = state.conn, getattr(event, "stream_id", None)
    if isinstance(event, h2.events.RequestReceived) and sid is not None:
        raw = [(str(k), str(v)) for k, v in event.headers or []]
        state.streams[sid] = (raw, bytearray())
    elif isinstance(event, h2.events.DataReceived) and sid is not None:
        if sid in state.streams:
            state.streams[sid][1].extend(event.data or b"")
        conn.acknowledge_received_data(event.flow_controlled_length or 0, sid)
    elif isinstance(event, h2.events.StreamEnded) and sid in state.streams:
        raw, body = state.streams.pop(sid)
        pseudo = {k: v for k, v in raw if k.startswith(":")}
        headers = tuple((k.lower(), v) for k, v in raw if not k.startswith(":"))
        request = RawRequest(
            http_version="2",
            method=pseudo.get(":method", ""),
            path=pseudo.get(":path", ""),
            host=pseudo.get(":authority") or next((v for k, v in headers if k == "host"), None),
            headers=headers,
            body=bytes(body),
        )
        state.spawn(_h2_respond(state, sid, state.answer(request)))
    elif isinstance(event, h2.events.StreamReset) and sid is not None:
        state.streams.pop(sid, None)
    elif isinstance(event, h2.events.WindowUpdated | h2.events.RemoteSettingsChanged):
        state.window_changed.set()
        state.window_changed = asyncio.Event()
    elif isinstance(event, h2.events.ConnectionTerminated):
        state.terminated = True


async def _h2_respond(state: _H2State, stream_id: int, reply: Reply) -> None:
    conn, writer = state.conn, state.writer
    if reply.delay > 0:
        await asyncio.sleep(reply.delay)
    try:
        headers = [(":status", str(reply.status)), *_head(reply)]
        conn.send_headers(stream_id, headers, end_stream=not reply.body)
        view = memoryview(reply.body)
        while view:
            window = conn.local_flow_control_window(stream_id)
            size = min(window, conn.max_outbound_frame_size)
            if size <= 0:
                waiter = state.window_changed
                writer.write(conn.data_to_send())
                await waiter.wait()
                continue
            conn.send_data(stream_id, bytes(view[:size]), end_stream=len(view) <= size)
            view = view[size:]
        writer.write(conn.data_to_send())
        await writer.drain()
    except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError, OSError) as exc:
        log.debug("stream %d not answered: %r", stream_id, exc)
