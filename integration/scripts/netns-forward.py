"""Forwards TCP from addresses inside a network namespace to addresses in this process's own.
  netns-forward.py /proc/PID/ns/net LISTEN_IP:PORT=TARGET_IP:PORT ...
The listening sockets are made inside the namespace (setns, then back): a socket keeps the
namespace it was made in, so one process serves both sides. For node-b.sh: the API server,
on this machine's loopback, reached from the second node's network."""
import asyncio
import ctypes
import os
import socket
import sys

CLONE_NEWNET = 0x40000000
libc = ctypes.CDLL(None, use_errno=True)


def setns(fd):
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def listeners(netns, pairs):
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(netns, os.O_RDONLY)
    made = []
    setns(target)
    try:
        for listen, dest in pairs:
            ip, port = listen.rsplit(":", 1)
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((ip, int(port)))
            s.listen(128)
            s.setblocking(False)
            made.append((s, dest))
    finally:
        setns(own)
    return made


async def pipe(r, w):
    try:
        while data := await r.read(65536):
            w.write(data)
            await w.drain()
        if w.can_write_eof():
            w.write_eof()
    except OSError:
        pass


def handler(dest):
    ip, port = dest.rsplit(":", 1)

    async def handle(cr, cw):
        try:
            tr, tw = await asyncio.open_connection(ip, int(port))
        except OSError:
            cw.close()
            return
        await asyncio.gather(pipe(cr, tw), pipe(tr, cw))
        cw.close()
        tw.close()

    return handle


async def main():
    pairs = [a.split("=", 1) for a in sys.argv[2:]]
    servers = [await asyncio.start_server(handler(dest), sock=s) for s, dest in listeners(sys.argv[1], pairs)]
    await asyncio.gather(*(s.serve_forever() for s in servers))


asyncio.run(main())
