/**
 * The test plugin as a program, for Stove to pre-launch from its plugin dir: it takes its end of the
 * socketpair from NRI_PLUGIN_SOCKET and its name and index from NRI_PLUGIN_NAME/NRI_PLUGIN_IDX, as
 * NRI's stub does. Its config (the drop-in file Stove passes in Configure) is JSON:
 *
 *   { "log": "/path/events.jsonl",     every request, one JSON line each: {event, pod, container}
 *     "env": { "KEY": "value" },        added to every container it sees created
 *     "killOn": "name" }                SIGKILLs itself when asked to create a container of that name
 */
import { appendFileSync } from 'node:fs';
import { Socket } from 'node:net';
import { CreateContainerResponse } from '../../src/gen/nri/api.js';
import { TestPlugin } from './nri-plugin.js';

interface PluginConfig {
  log?: string;
  env?: Record<string, string>;
  killOn?: string;
}

const fd = Number(process.env.NRI_PLUGIN_SOCKET);
const socket = new Socket({ fd, readable: true, writable: true });
const plugin = new TestPlugin(socket, { name: process.env.NRI_PLUGIN_NAME ?? '', index: process.env.NRI_PLUGIN_IDX ?? '' });
let config: PluginConfig = {};
plugin.onConfigure = (req) => {
  config = req.config ? (JSON.parse(req.config) as PluginConfig) : {};
  record({ event: 'Configure', pod: '', container: '', runtime: req.runtimeName });
};
const seen = plugin.seen.push.bind(plugin.seen);
plugin.seen.push = (...events) => {
  for (const e of events) record(e);
  return seen(...events);
};
plugin.onCreate = (req) => {
  if (config.killOn && req.container?.name === config.killOn) process.kill(process.pid, 'SIGKILL');
  return CreateContainerResponse.fromPartial({ adjust: { env: Object.entries(config.env ?? {}).map(([key, value]) => ({ key, value })) } });
};
void plugin.closed.then(() => process.exit(0));
plugin.register().catch((err: Error) => {
  console.error(`registration failed: ${err.message}`);
  process.exit(1);
});

function record(e: object): void {
  if (config.log) appendFileSync(config.log, JSON.stringify(e) + '\n');
}
