/** One step from an RPC's name to its code: each RPC of the table is the function of the file named after it. */
import assert from 'node:assert/strict';
import { imageHandlers, runtimeHandlers, type CriServices } from '../../../src/cri/rpc-table.js';

/** `runPodSandbox` → `run-pod-sandbox`. */
const fileOf = (rpc: string) => rpc.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

describe('cri: one file per RPC', () => {
  it('every RPC of the table has src/cri/<rpc-name>.ts exporting its function', async () => {
    // The table only closes over the services; none is called here.
    const services = {} as CriServices;
    const rpcs = [...Object.keys(runtimeHandlers(services)), ...Object.keys(imageHandlers(services))];
    assert.equal(rpcs.length, 41);
    for (const rpc of rpcs) {
      const module = (await import(`../../../src/cri/${fileOf(rpc)}.js`)) as Record<string, unknown>;
      assert.equal(typeof module[rpc], 'function', `src/cri/${fileOf(rpc)}.ts does not export ${rpc}`);
    }
  });
});
