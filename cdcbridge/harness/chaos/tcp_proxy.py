"""A tiny TCP proxy that can be closed and opened, to take a real service away from the bridge and give it back."""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    """Listens on a free loopback port and forwards to `target`; while closed it drops every connection at once
    (the client sees the service go away without an answer), while open it pipes bytes both ways."""

    def __init__(self, target_host: str, target_port: int, *, open_: bool = False) -> None:
        self._target = (target_host, target_port)
        self._open = threading.Event()
        if open_:
            self._open.set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self._stopped = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self.refused = 0
        self._thread = threading.Thread(target=self._accept_loop, name="tcp-proxy", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def open(self) -> None:
        self._open.set()

    def close(self) -> None:
        """Refuse new connections and cut the ones in progress."""
        self._open.clear()
        self._close_piped()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(5)
        self._listener.close()
        self._close_piped()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _close_piped(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._open.is_set():
                self.refused += 1
                client.close()
                continue
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
