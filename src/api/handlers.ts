/**
 * The shape of Stove's RPC handlers: one promise-returning function per CRI RPC, derived from the
 * generated service definitions so request and response types can never drift from proto/.
 */
import type { handleServerStreamingCall, handleUnaryCall } from '@grpc/grpc-js';
import type { RuntimeServiceServer, ImageServiceServer } from '../gen/runtime/v1/api.js';

/** Where a server-streaming handler writes its messages. */
export interface StreamSink<T> {
  write(message: T): boolean;
  /** Ends the stream normally. */
  end(): void;
  /** Called once when the client goes away or the server shuts down. */
  onClose(listener: () => void): void;
  readonly closed: boolean;
  /** Resolves once the transport wants more (at once when it does already or the stream is closed). */
  drained(): Promise<void>;
}

/**
 * What a unary handler knows of its call besides the request. The signal is aborted when the client
 * left or the deadline passed: a handler whose work is long and can stop (a pull, an exec) stops on
 * it; the others need not look (the answer is dropped either way).
 */
export interface CallContext {
  readonly signal: AbortSignal;
  /**
   * The request's wire bytes. A handler decodes them again with a view message (src/gen/stove) where
   * a field's wire type carries more than the proto/ type keeps: env values as bytes (cri-api v0.37).
   */
  readonly requestBytes: Buffer;
}

type HandlerOf<T> =
  T extends handleUnaryCall<infer Req, infer Res>
    ? (request: Req, call: CallContext) => Promise<Res>
    : T extends handleServerStreamingCall<infer Req, infer Res>
      ? // A handler that returns a promise has its stream ended when it resolves, failed when it rejects;
        // one that returns nothing (GetContainerEvents) ends the stream itself.
        (request: Req, sink: StreamSink<Res>) => void | Promise<void>
      : never;

type KnownKeys<T> = keyof { [K in keyof T as string extends K ? never : K]: T[K] };

/** Every RuntimeService RPC as a handler. */
export type RuntimeHandlers = { [K in KnownKeys<RuntimeServiceServer>]: HandlerOf<RuntimeServiceServer[K]> };
/** Every ImageService RPC as a handler. */
export type ImageHandlers = { [K in KnownKeys<ImageServiceServer>]: HandlerOf<ImageServiceServer[K]> };
