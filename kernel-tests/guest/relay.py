#!/usr/bin/env python3
"""A TCP relay for the guest: relay.py LISTEN TARGET PORT [PORT ...]

Listens on LISTEN:PORT for each PORT and passes every connection on to TARGET:PORT, bytes
both ways, until either side closes. nlm.sh runs it in the guest's own network namespace
so that granary heads in namespaces of their own reach the object engines, which only
that namespace reaches (on the host, through qemu's user network at 10.0.2.2).
Prints "relay ready" once every port listens.
"""
import asyncio
import sys


async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except OSError:
            pass


async def serve(listen, target, port):
    async def relay(client_reader, client_writer):
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(target, port)
        except OSError as e:
            print(f"relay: cannot reach {target}:{port}: {e}", flush=True)
            client_writer.close()
            return
        await asyncio.gather(pipe(client_reader, upstream_writer), pipe(upstream_reader, client_writer))

    return await asyncio.start_server(relay, listen, port)


async def main():
    listen, target, *ports = sys.argv[1:]
    if not ports:
        sys.exit(__doc__)
    servers = [await serve(listen, target, int(p)) for p in ports]
    print("relay ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


asyncio.run(main())
