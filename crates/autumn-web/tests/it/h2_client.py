"""An HTTP/2 client built on the h2 library (python-hyper), an HTTP/2
implementation of its own, speaking h2c (prior knowledge) to the server the
Rust test started: 100 concurrent duplicate streams on one connection, and
the stream-level abuse a hostile client tries. Prints one JSON line of
what it saw; the Rust test judges it.

usage: h2_client.py HOST PORT MODE
MODE: duplicates KEY | rapid-reset | ping-flood | settings-flood | endless-headers
"""

import json
import socket
import sys
import time

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from hyperframe.frame import ContinuationFrame, HeadersFrame


def connect(host, port):
    """A connection that has sent its preface and read the server's
    SETTINGS, so the stream limit it announced is known."""
    sock = socket.create_connection((host, port), timeout=10)
    config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
    conn = h2.connection.H2Connection(config=config)
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    while True:
        data = sock.recv(65536)
        if not data:
            raise SystemExit("the server closed before its SETTINGS")
        events = conn.receive_data(data)
        sock.sendall(conn.data_to_send())
        if any(isinstance(e, h2.events.RemoteSettingsChanged) for e in events):
            return sock, conn


def request_headers(host, port, method, path, extra=()):
    return [
        (":method", method),
        (":scheme", "http"),
        (":authority", f"{host}:{port}"),
        (":path", path),
        *extra,
    ]


def until_closed(sock, conn, limit):
    """Reads until the server closes or `limit` seconds pass:
    (closed, the GOAWAY's error code or None)."""
    deadline = time.monotonic() + limit
    goaway = None
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False, goaway
        sock.settimeout(remaining)
        try:
            data = sock.recv(65536)
        except socket.timeout:
            return False, goaway
        except OSError:
            return True, goaway
        if not data:
            return True, goaway
        try:
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ConnectionTerminated):
                    goaway = int(event.error_code)
            sock.sendall(conn.data_to_send())
        except (h2.exceptions.ProtocolError, OSError):
            # Frames after our own state says the connection ended: keep
            # reading until the server closes.
            pass


def duplicates(host, port, key, count=100):
    """`count` streams at once on one connection, each `POST /pay` with the
    same Idempotency-Key and body."""
    sock, conn = connect(host, port)
    body = b'{"item":"tea"}'
    extra = [
        ("content-type", "application/json"),
        ("content-length", str(len(body))),
        ("idempotency-key", key),
    ]
    answers = {}
    for _ in range(count):
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, request_headers(host, port, "POST", "/pay", extra))
        conn.send_data(stream, body, end_stream=True)
        answers[stream] = {"status": None, "replayed": None, "body": b""}
    sock.sendall(conn.data_to_send())
    open_streams = set(answers)
    deadline = time.monotonic() + 30
    while open_streams and time.monotonic() < deadline:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        data = sock.recv(65536)
        if not data:
            break
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                headers = dict(event.headers)
                answers[event.stream_id]["status"] = int(headers[":status"])
                answers[event.stream_id]["replayed"] = headers.get("x-idempotent-replayed")
            elif isinstance(event, h2.events.DataReceived):
                answers[event.stream_id]["body"] += event.data
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                open_streams.discard(event.stream_id)
        sock.sendall(conn.data_to_send())
    conn.close_connection()
    sock.sendall(conn.data_to_send())
    sock.close()
    return {
        "unanswered": len(open_streams),
        "answers": [
            {"status": a["status"], "replayed": a["replayed"], "body": a["body"].decode()}
            for a in answers.values()
        ],
    }


def rapid_reset(host, port, count=5000):
    """`count` requests, each cancelled (RST_STREAM) as soon as it is sent,
    written without reading."""
    sock, conn = connect(host, port)
    sent = 0
    try:
        for n in range(count):
            stream = conn.get_next_available_stream_id()
            conn.send_headers(stream, request_headers(host, port, "GET", "/"), end_stream=True)
            conn.reset_stream(stream, error_code=h2.errors.ErrorCodes.CANCEL)
            sent += 1
            if n % 100 == 99:
                sock.sendall(conn.data_to_send())
        sock.sendall(conn.data_to_send())
    except OSError:
        # Closed by the server mid-burst.
        pass
    closed, goaway = until_closed(sock, conn, 5)
    return {"sent": sent, "closed": closed, "goaway": goaway}


def flood(host, port, make_frames, limit=20):
    """Frames from `make_frames` forever, never reading, until the server
    stops the connection (or `limit` seconds pass)."""
    sock, conn = connect(host, port)
    sock.settimeout(15)
    started = time.monotonic()
    closed = False
    try:
        while time.monotonic() - started < limit:
            make_frames(conn)
            sock.sendall(conn.data_to_send())
    except socket.timeout:
        # The server stopped reading and never closed.
        closed = False
    except OSError:
        closed = True
    return {"closed": closed, "seconds": round(time.monotonic() - started, 3)}


def pings(conn):
    for _ in range(1000):
        conn.ping(b"autumn!!")


def settings(conn):
    for _ in range(1000):
        conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 65535})


def endless_headers(host, port):
    """A HEADERS frame without END_HEADERS, then CONTINUATION frames of a
    16 KiB header each, never ending."""
    sock, conn = connect(host, port)
    headers = HeadersFrame(1)
    headers.data = conn.encoder.encode(request_headers(host, port, "GET", "/"))
    headers.flags.add("END_STREAM")
    sock.sendall(headers.serialize())
    continuation = ContinuationFrame(1)
    # A literal header `x: <16 KiB of a>` without indexing.
    continuation.data = bytes([0x00, 0x01, ord("x"), 0x7F, 0x81, 0x7F]) + b"a" * 16384
    frame = continuation.serialize()
    written = 0
    try:
        for _ in range(1000):
            sock.sendall(frame)
            written += 1
    except OSError:
        pass
    closed, goaway = until_closed(sock, conn, 5)
    return {"continuations": written, "closed": closed, "goaway": goaway}


def main(argv):
    host, port, mode = argv[1], int(argv[2]), argv[3]
    if mode == "duplicates":
        seen = duplicates(host, port, argv[4])
    elif mode == "rapid-reset":
        seen = rapid_reset(host, port)
    elif mode == "ping-flood":
        seen = flood(host, port, pings)
    elif mode == "settings-flood":
        seen = flood(host, port, settings)
    elif mode == "endless-headers":
        seen = endless_headers(host, port)
    else:
        raise SystemExit(f"unknown mode {mode}")
    print(json.dumps(seen))


if __name__ == "__main__":
    main(sys.argv)
