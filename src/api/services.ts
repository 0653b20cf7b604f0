/**
 * Builds the gRPC transport's service implementations from handler tables. Every RPC of both services is
 * registered: one without a handler answers UNIMPLEMENTED naming the RPC. Each call is timed, logged,
 * counted and traced (the daemon's `Telemetry`, observability/hooks.ts), and every error is turned into a gRPC status here and
 * nowhere else.
 */
import type { ServiceDefinition } from '@grpc/grpc-js';
import { status } from '@grpc/grpc-js';
import { ImageServiceService, RuntimeServiceService } from '../gen/runtime/v1/api.js';
import type { Logger } from '../common/logger.js';
import { toServiceError, statusName } from './errors.js';
import type { CallContext, ImageHandlers, RuntimeHandlers, StreamSink } from './handlers.js';
import type { ServiceBinding } from './server.js';
import type { CallMetadata, ServerStreamCall, ServerStreamImplementation, UnaryCall, UnaryCallback, UnaryImplementation } from './grpc-http2.js';
import { NO_TRACING, type MetadataGetter, type SpanAttributes, type Telemetry, type Tracer } from '../observability/hooks.js';

type AnyUnary = (request: unknown, call: CallContext) => Promise<unknown>;
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

/** A gRPC metadata value, for the trace context a caller sends (`traceparent`). */
function metadataGetter(metadata: CallMetadata): MetadataGetter {
  return (key) => {
    const value = metadata.get(key)[0];
    return value === undefined ? undefined : String(value);
  };
}

/** Span attributes naming what a call is about: the pod, container or image of its request or response. */
function idAttributes(message: unknown): SpanAttributes {
  const out: SpanAttributes = {};
  if (typeof message !== 'object' || message === null) return out;
  const m = message as { podSandboxId?: unknown; containerId?: unknown; image?: { image?: unknown }; imageRef?: unknown };
  if (typeof m.podSandboxId === 'string' && m.podSandboxId) out['sandbox.id'] = m.podSandboxId;
  if (typeof m.containerId === 'string' && m.containerId) out['container.id'] = m.containerId;
  if (typeof m.image?.image === 'string' && m.image.image) out['image.name'] = m.image.image;
  if (typeof m.imageRef === 'string' && m.imageRef) out['image.ref'] = m.imageRef;
  return out;
}

/** The handler's answer inside a server span carrying the call's trace context and IDs. */
function traced(t: Tracer, method: string, call: UnaryCall, handler: AnyUnary): Promise<unknown> {
  return t.serverCall(method, metadataGetter(call.metadata), idAttributes(call.request), async () => {
    try {
      const response = await handler(call.request, call);
      t.annotate({ ...idAttributes(response), 'rpc.grpc.status_code': status.OK });
      return response;
    } catch (err) {
      t.annotate({ 'rpc.grpc.status_code': toServiceError(err).code });
      throw err;
    }
  });
}

/** The handler's answer, a synchronous throw (a handler not declared async) as a rejection. */
function answer(handler: AnyUnary, call: UnaryCall): Promise<unknown> {
  try {
    // The call itself as the context: its signal is made only if the handler asks for it.
    return handler(call.request, call);
  } catch (err) {
    return Promise.reject(err as Error);
  }
}

function unary(log: Logger, telemetry: Telemetry, method: string, handler: AnyUnary | undefined): UnaryImplementation {
  const rpc = rpcName(method);
  return (call: UnaryCall, callback: UnaryCallback) => {
    const started = performance.now();
    if (!handler) {
      telemetry.metrics.criRequest(method, statusName(status.UNIMPLEMENTED), (performance.now() - started) / 1000);
      callback({ code: status.UNIMPLEMENTED, details: `${rpc} is not implemented by stove` });
      return;
    }
    // With tracing off (the default) a call is the handler alone: the kubelet polls the status RPCs.
    const t = telemetry.tracer;
    (t === NO_TRACING ? answer(handler, call) : traced(t, method, call, handler)).then(
      (response) => {
        const seconds = (performance.now() - started) / 1000;
        telemetry.metrics.criRequest(method, 'OK', seconds);
        if (log.isEnabled('debug')) log.debug('rpc', { rpc, durationMs: +(seconds * 1000).toFixed(2) });
        callback(null, response);
      },
      (err: unknown) => {
        const seconds = (performance.now() - started) / 1000;
        const e = toServiceError(err);
        telemetry.metrics.criRequest(method, statusName(e.code), seconds);
        logFailure(log, rpc, +(seconds * 1000).toFixed(2), err);
        callback(e);
      },
    );
  };
}

function serverStream(log: Logger, telemetry: Telemetry, method: string, handler: AnyStream | undefined): ServerStreamImplementation {
  const rpc = rpcName(method);
  return (call: ServerStreamCall) => {
    if (!handler) {
      telemetry.metrics.criRequest(method, statusName(status.UNIMPLEMENTED));
      call.fail({ code: status.UNIMPLEMENTED, details: `${rpc} is not implemented by stove` });
      return;
    }
    let closed = false;
    const listeners: (() => void)[] = [];
    const close = () => {
      if (closed) return;
      closed = true;
      for (const l of listeners) l();
    };
    call.on('close', close);
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
      if (!closed) call.fail(toServiceError(err));
      close();
    };
    // A handler that returns a promise answers a bounded list and is timed; one that does not
    // (GetContainerEvents) streams until the client leaves and is counted once open.
    let bounded = false;
    telemetry.tracer
      .serverCall(method, metadataGetter(call.metadata), idAttributes(call.request), async () => {
        const done = handler(call.request, sink);
        bounded = done !== undefined;
        // An open-ended stream is live once its handler returned: the headers tell the client so.
        if (!bounded && !closed) call.sendHeaders();
        await done;
      })
      .then(
        () => {
          telemetry.metrics.criRequest(method, 'OK', bounded ? (performance.now() - started) / 1000 : undefined);
          if (bounded) sink.end();
        },
        (err: unknown) => {
          telemetry.metrics.criRequest(method, statusName(toServiceError(err).code), bounded ? (performance.now() - started) / 1000 : undefined);
          fail(err);
        },
      );
  };
}

/**
 * The transport's implementation of `definition` backed by `handlers`. Handlers are looked up by the
 * definition's method keys (lower camel case, as ts-proto names them).
 */
export function implement(
  definition: ServiceDefinition,
  handlers: Partial<Record<string, unknown>>,
  log: Logger,
  telemetry: Telemetry,
): Record<string, UnaryImplementation | ServerStreamImplementation> {
  const impl: Record<string, UnaryImplementation | ServerStreamImplementation> = {};
  for (const [key, method] of Object.entries(definition)) {
    const handler = handlers[key];
    impl[key] = method.responseStream
      ? serverStream(log, telemetry, method.path, handler as AnyStream | undefined)
      : unary(log, telemetry, method.path, handler as AnyUnary | undefined);
  }
  return impl;
}

/** The CRI's two services over their handler tables, for serveGrpc. */
export function criServices(runtime: Partial<RuntimeHandlers>, image: Partial<ImageHandlers>, log: Logger, telemetry: Telemetry): ServiceBinding[] {
  return [
    { definition: RuntimeServiceService, implementation: implement(RuntimeServiceService, runtime, log, telemetry) },
    { definition: ImageServiceService, implementation: implement(ImageServiceService, image, log, telemetry) },
  ];
}
