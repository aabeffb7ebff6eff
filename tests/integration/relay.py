"""A TCP relay on loopback that a test can cut: a partition between a
client and leased while leased stays up for everyone else.

    with Relay("127.0.0.1:7443") as r:   # r.addr: where the client goes
        ...
        r.cut()    # from now on nothing passes, either way; connections
                   # stay open, as when a network drops packets
        r.heal()   # bytes pass again (the cut ones are gone)

Bounded: it serves until closed, with threads that poll for the close
every 50 ms.
"""
import select
import socket
import threading

POLL_S = 0.05


class Relay:
    def __init__(self, upstream):
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.addr = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self._cut = threading.Event()
        self._closed = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def cut(self):
        self._cut.set()

    def heal(self):
        self._cut.clear()

    def _accept(self):
        while not self._closed.is_set():
            if not select.select([self.listener], [], [], POLL_S)[0]:
                continue
            client, _ = self.listener.accept()
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            t = threading.Thread(target=self._pump, args=(client, server),
                                 daemon=True)
            t.start()
            self._threads.append(t)

    def _pump(self, a, b):
        """Copies bytes both ways between a and b until either closes or
        the relay does; while cut, reads and drops them."""
        peer = {a: b, b: a}
        try:
            while not self._closed.is_set():
                ready = select.select([a, b], [], [], POLL_S)[0]
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    if not self._cut.is_set():
                        peer[s].sendall(data)
        except OSError:
            return
        finally:
            a.close()
            b.close()

    def close(self):
        self._closed.set()
        for t in self._threads:
            t.join(timeout=5)
        self.listener.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
