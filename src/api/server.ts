/**
 * The gRPC server on a unix socket. Refuses to start when another live server answers on the socket,
 * removes a stale one, restricts the socket to mode 0660 and drains in-flight calls on shutdown.
 */
import { Server, ServerCredentials, type ServiceDefinition, type UntypedServiceImplementation } from '@grpc/grpc-js';
import { connect } from 'node:net';
import { chmod, mkdir, unlink, lstat } from 'node:fs/promises';
import { dirname } from 'node:path';
import { StoveError } from '../common/errors.js';
import type { Logger } from '../common/logger.js';

/** 16 MiB each way, as containerd and the kubelet's CRI client use. */
export const MAX_MESSAGE_BYTES = 16 << 20;

/** True when something accepts connections on the unix socket at `path`. */
export function socketIsLive(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = connect(path);
    sock.once('connect', () => {
      sock.destroy();
      resolve(true);
    });
    sock.once('error', () => resolve(false));
  });
}

/** Makes `path` free for a new server: refuses if it is live, removes it if stale. */
export async function ensureSocketFree(path: string): Promise<void> {
  await mkdir(dirname(path), { recursive: true, mode: 0o755 });
  let exists = true;
  try {
    const st = await lstat(path);
    if (!st.isSocket()) throw new StoveError('FailedPrecondition', `${path} exists and is not a socket; refusing to replace it`);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') exists = false;
    else throw err;
  }
  if (!exists) return;
  if (await socketIsLive(path))
    throw new StoveError('FailedPrecondition', `another server is already listening on ${path}; stop it or pass --socket`);
  await unlink(path);
}

export interface ServiceBinding {
  definition: ServiceDefinition;
  implementation: UntypedServiceImplementation;
}

/** A started gRPC server and how to stop it. */
export interface GrpcEndpoint {
  readonly socketPath: string;
  /** Stops accepting calls, lets in-flight calls finish (up to graceMs), then removes the socket. */
  shutdown(graceMs?: number): Promise<void>;
}

/** Serves `services` on the unix socket at `socketPath`. */
export async function serveGrpc(socketPath: string, services: ServiceBinding[], log: Logger): Promise<GrpcEndpoint> {
  await ensureSocketFree(socketPath);
  const server = new Server({
    // No channelz bookkeeping on every call: nothing reads it, and the kubelet polls status RPCs often.
    'grpc.enable_channelz': 0,
    'grpc.max_receive_message_length': MAX_MESSAGE_BYTES,
    'grpc.max_send_message_length': MAX_MESSAGE_BYTES,
  });
  for (const s of services) server.addService(s.definition, s.implementation);
  await new Promise<void>((resolve, reject) =>
    server.bindAsync(`unix://${socketPath}`, ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())),
  );
  await chmod(socketPath, 0o660);
  log.info('serving CRI', { socket: socketPath });
  return {
    socketPath,
    async shutdown(graceMs = 10_000) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          log.warn('in-flight calls did not finish in time; closing them', { graceMs });
          server.forceShutdown();
          resolve();
        }, graceMs);
        server.tryShutdown(() => {
          clearTimeout(timer);
          resolve();
        });
      });
      await unlink(socketPath).catch(() => {});
    },
  };
}
