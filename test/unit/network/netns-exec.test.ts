import assert from 'node:assert/strict';
import { netnsCommand, parseNetDev, processInterfaceStats } from '../../../src/network/netns-exec.js';

const NET_DEV = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     560       8    0    0    0     0          0         0      560       8    0    0    0     0       0          0
  eth0: 18446744073709551615     120    3    4    0     0          0         0    40960     100    2    5    0     0       0          0
`;

describe('network/netns-exec', () => {
  it('parses /proc/net/dev counters as bigint', () => {
    const stats = parseNetDev(NET_DEV);
    assert.deepEqual([...stats.keys()], ['lo', 'eth0']);
    assert.deepEqual(stats.get('eth0'), {
      name: 'eth0',
      rxBytes: 18446744073709551615n,
      rxPackets: 120n,
      rxErrors: 3n,
      rxDropped: 4n,
      txBytes: 40960n,
      txPackets: 100n,
      txErrors: 2n,
      txDropped: 5n,
    });
  });

  it('builds an nsenter command for the namespace only', () => {
    assert.deepEqual(netnsCommand('/run/stove/netns/x', ['socat', '-', 'TCP:127.0.0.1:80']), [
      'nsenter',
      '--net=/run/stove/netns/x',
      '--',
      'socat',
      '-',
      'TCP:127.0.0.1:80',
    ]);
    assert.throws(() => netnsCommand('/x', []));
  });

  it('reads the counters of a process netns, and says which interface is missing', async () => {
    const lo = await processInterfaceStats(process.pid, 'lo');
    assert.equal(typeof lo.rxBytes, 'bigint');
    await assert.rejects(processInterfaceStats(process.pid, 'nope0'), /interface nope0 not found/);
  });
});
