/**
 * Builds grpc-js service implementations from handler tables. Every RPC of both services is
 * registered: one without a handler answers UNIMPLEMENTED naming the RPC. Each call is timed and
 * logged, and every error is turned into a gRPC status here and nowhere else.
 */
import type {
  ServerUnaryCall,
  ServerWritableStream,
  sendUnaryData,
  ServiceDefinition,
  UntypedServiceImplementation,
} from '@grpc/grpc-js';
import { status } from '@grpc/grpc-js';
import type { Logger } from '../common/logger.js';
import { toServiceError, statusName } from './errors.js';
import type { StreamSink } from './handlers.js';

type AnyUnary = (request: unknown) => Promise<unknown>;
type AnyStream = (request: unknown, sink: StreamSink<unknown>) => void | Promise<void>;

/** The RPC's name as the CRI spells it, from its path (`/runtime.v1.RuntimeService/Version`). */
function rpcName(path: string): string {
  return path.slice(path.lastIndexOf('/') + 1);
}

function logFailure(log: Logger, rpc: string, durationMs: number, err: unknown): void {
  const e = toServiceError(err);
  const fields = { rpc, durationMs, code: statusName(e.code), error: e.details };
  if (e.code === status.INTERNAL || e.code === status.UNKNOWN) log.error('rpc failed', fields);
  else log.warn('rpc failed', fields);
}

function unary(log: Logger, rpc: string, handler: AnyUnary | undefined) {
  return (call: ServerUnaryCall<unknown, unknown>, callback: sendUnaryData<unknown>) => {
    const started = performance.now();
    if (!handler) {
      callback({ code: status.UNIMPLEMENTED, details: `${rpc} is not implemented by stove` });
      return;
    }
    handler(call.request).then(
      (response) => {
        log.debug('rpc', { rpc, durationMs: +(performance.now() - started).toFixed(2) });
        callback(null, response);
      },
      (err: unknown) => {
        logFailure(log, rpc, +(performance.now() - started).toFixed(2), err);
        callback(toServiceError(err));
      },
    );
  };
}

function serverStream(log: Logger, rpc: string, handler: AnyStream | undefined) {
  return (call: ServerWritableStream<unknown, unknown>) => {
    if (!handler) {
      call.emit('error', { code: status.UNIMPLEMENTED, details: `${rpc} is not implemented by stove` });
      return;
    }
    let closed = false;
    const listeners: (() => void)[] = [];
    const close = () => {
      if (closed) return;
      closed = true;
      for (const l of listeners) l();
    };
    call.on('cancelled', close);
    call.on('close', close);
    call.on('error', close);
    const sink: StreamSink<unknown> = {
      write: (message) => (closed ? false : call.write(message)),
      end: () => {
        if (!closed) call.end();
        close();
      },
      onClose: (listener) => (closed ? listener() : listeners.push(listener)),
      get closed() {
        return closed;
      },
      drained: () =>
        closed || !call.writableNeedDrain
          ? Promise.resolve()
          : new Promise<void>((resolve) => {
              const done = () => {
                call.off('drain', done);
                resolve();
              };
              call.on('drain', done);
              listeners.push(done);
            }),
    };
    log.debug('stream opened', { rpc });
    const started = performance.now();
    const fail = (err: unknown) => {
      logFailure(log, rpc, +(performance.now() - started).toFixed(2), err);
      if (!closed) call.emit('error', toServiceError(err));
      close();
    };
    try {
      const done = handler(call.request, sink);
      if (done) done.then(() => sink.end(), fail);
    } catch (err) {
      fail(err);
    }
  };
}

/**
 * A grpc-js implementation of `definition` backed by `handlers`. Handlers are looked up by the
 * definition's method keys (lower camel case, as ts-proto names them).
 */
export function implement(
  definition: ServiceDefinition,
  handlers: Partial<Record<string, unknown>>,
  log: Logger,
): UntypedServiceImplementation {
  const impl: UntypedServiceImplementation = {};
  for (const [key, method] of Object.entries(definition)) {
    const rpc = rpcName(method.path);
    const handler = handlers[key];
    impl[key] = method.responseStream
      ? serverStream(log, rpc, handler as AnyStream | undefined)
      : unary(log, rpc, handler as AnyUnary | undefined);
  }
  return impl;
}
