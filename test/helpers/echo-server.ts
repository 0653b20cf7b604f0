/** A TCP echo server on 127.0.0.1 for port-forward tests. */
import net from 'node:net';

/** Registers hooks (call it in a `describe` body) that run a fresh echo server for each test; `port` is its port. */
export function echoServerEachTest(): { port: number } {
  const echo = { port: 0 };
  let server: net.Server;
  beforeEach(async () => {
    server = net.createServer((sock) => sock.pipe(sock));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    echo.port = (server.address() as net.AddressInfo).port;
  });
  afterEach(() => server.close());
  return echo;
}
