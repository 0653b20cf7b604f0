/**
 * Unary ttrpc calls in both directions over one logical connection: `call` sends a Request frame on a
 * new odd stream id and waits for its Response (bounded by a timeout); Request frames from the peer go
 * to the registered handlers and are answered on their stream id. Streaming calls are not part of NRI
 * and are refused.
 */
import { Request, Response } from '../gen/nri/ttrpc.js';
import { encodeTtrpcFrame, TtrpcFrameReader, TtrpcProtocolError, TtrpcType, type TtrpcFrame } from './ttrpc-frame.js';

/** gRPC status codes ttrpc carries. */
export const Code = { OK: 0, Unknown: 2, InvalidArgument: 3, DeadlineExceeded: 4, NotFound: 5, FailedPrecondition: 9, Unimplemented: 12, Internal: 13, Unavailable: 14 } as const;

/** The peer answered with an error status. */
export class TtrpcStatusError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

/** No answer in time, or the connection went away: the plugin is to be dropped. */
export class TtrpcFatalError extends Error {}

/** A handler's failure with the status code to send. */
export class TtrpcHandlerError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

export type TtrpcHandler = (payload: Buffer) => Promise<Buffer>;

interface PendingCall {
  resolve: (payload: Buffer) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

export class TtrpcChannel {
  private readonly reader = new TtrpcFrameReader();
  private readonly pending = new Map<number, PendingCall>();
  private readonly handlers = new Map<string, TtrpcHandler>();
  private nextStreamId = 1;
  private lastPeerStreamId = 0;
  private closedWith: Error | undefined;

  /** `send` writes bytes to the connection; `onProtocolError` is told of bytes that break the protocol. */
  constructor(
    private readonly send: (bytes: Buffer) => void,
    private readonly onProtocolError: (err: Error) => void,
  ) {}

  /** Serves `service/method` (e.g. `nri.pkg.api.v1alpha1.Runtime`, `RegisterPlugin`). */
  handle(service: string, method: string, handler: TtrpcHandler): void {
    this.handlers.set(`${service}/${method}`, handler);
  }

  /** Bytes that arrived on the connection. */
  receive(data: Buffer): void {
    let frames: TtrpcFrame[];
    try {
      frames = this.reader.push(data);
    } catch (err) {
      this.onProtocolError(err as Error);
      return;
    }
    for (const frame of frames) this.dispatch(frame);
  }

  /** One unary call; rejects with TtrpcStatusError for an error status, TtrpcFatalError otherwise. */
  call(service: string, method: string, payload: Buffer, timeoutMs: number): Promise<Buffer> {
    if (this.closedWith) return Promise.reject(new TtrpcFatalError(`connection closed: ${this.closedWith.message}`));
    const streamId = this.nextStreamId;
    this.nextStreamId += 2;
    const request = Request.encode(
      Request.fromPartial({ service, method, payload, timeoutNano: BigInt(Math.round(timeoutMs * 1e6)) }),
    ).finish();
    return new Promise<Buffer>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(streamId);
        reject(new TtrpcFatalError(`${method} timed out after ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(streamId, { resolve, reject, timer });
      try {
        this.send(encodeTtrpcFrame({ streamId, type: TtrpcType.Request, flags: 0, payload: Buffer.from(request) }));
      } catch (err) {
        clearTimeout(timer);
        this.pending.delete(streamId);
        reject(new TtrpcFatalError(`failed to send ${method}: ${(err as Error).message}`));
      }
    });
  }

  /** Fails every call in flight; later calls fail at once. */
  close(reason: Error): void {
    if (this.closedWith) return;
    this.closedWith = reason;
    for (const [id, call] of this.pending) {
      clearTimeout(call.timer);
      this.pending.delete(id);
      call.reject(new TtrpcFatalError(`connection closed: ${reason.message}`));
    }
  }

  private dispatch(frame: TtrpcFrame): void {
    if (frame.type === TtrpcType.Response) {
      const call = this.pending.get(frame.streamId);
      if (!call) return; // a late answer to a call that timed out
      this.pending.delete(frame.streamId);
      clearTimeout(call.timer);
      let response: Response;
      try {
        response = Response.decode(frame.payload);
      } catch (err) {
        call.reject(new TtrpcFatalError(`undecodable ttrpc response: ${(err as Error).message}`));
        this.onProtocolError(new TtrpcProtocolError('undecodable ttrpc response'));
        return;
      }
      const status = response.status;
      if (status && status.code !== Code.OK) call.reject(new TtrpcStatusError(status.code, status.message));
      else call.resolve(Buffer.from(response.payload));
      return;
    }
    if (frame.type === TtrpcType.Request) {
      void this.serve(frame);
      return;
    }
    // Data frames belong to streaming calls, which NRI does not use.
    this.respond(frame.streamId, Code.Unimplemented, 'streaming calls are not supported');
  }

  private async serve(frame: TtrpcFrame): Promise<void> {
    // ttrpc servers insist on odd, increasing stream ids from the client.
    if (frame.streamId % 2 !== 1 || frame.streamId <= this.lastPeerStreamId) {
      this.respond(frame.streamId, Code.InvalidArgument, 'stream id must be odd and increasing');
      return;
    }
    this.lastPeerStreamId = frame.streamId;
    let request: Request;
    try {
      request = Request.decode(frame.payload);
    } catch (err) {
      this.respond(frame.streamId, Code.InvalidArgument, `unmarshal request error: ${(err as Error).message}`);
      return;
    }
    const handler = this.handlers.get(`${request.service}/${request.method}`);
    if (!handler) {
      this.respond(frame.streamId, Code.Unimplemented, `${request.service}/${request.method} is not implemented`);
      return;
    }
    try {
      const payload = await handler(Buffer.from(request.payload));
      this.respond(frame.streamId, Code.OK, '', payload);
    } catch (err) {
      const code = err instanceof TtrpcHandlerError ? err.code : Code.Unknown;
      this.respond(frame.streamId, code, (err as Error).message);
    }
  }

  private respond(streamId: number, code: number, message: string, payload: Buffer = Buffer.alloc(0)): void {
    if (this.closedWith) return;
    const response = Response.encode(Response.fromPartial({ status: { code, message, details: [] }, payload })).finish();
    try {
      this.send(encodeTtrpcFrame({ streamId, type: TtrpcType.Response, flags: 0, payload: Buffer.from(response) }));
    } catch (err) {
      this.onProtocolError(err as Error);
    }
  }
}

/** A method of a generated service definition (ts-proto's grpc-js output). */
interface MethodDefinition<Req, Res> {
  path: string;
  requestSerialize(value: Req): Buffer;
  requestDeserialize(value: Buffer): Req;
  responseSerialize(value: Res): Buffer;
  responseDeserialize(value: Buffer): Res;
}

/** `/pkg.Service/Method` → [service, method]. */
export function splitPath(path: string): [string, string] {
  const slash = path.lastIndexOf('/');
  return [path.slice(1, slash), path.slice(slash + 1)];
}

/** Calls one method of a generated service over a channel, with typed messages. */
export function callMethod<Req, Res>(channel: TtrpcChannel, def: MethodDefinition<Req, Res>, request: Req, timeoutMs: number): Promise<Res> {
  const [service, method] = splitPath(def.path);
  return channel.call(service, method, def.requestSerialize(request), timeoutMs).then((bytes) => def.responseDeserialize(bytes));
}

/** Serves one method of a generated service on a channel, with typed messages. */
export function serveMethod<Req, Res>(channel: TtrpcChannel, def: MethodDefinition<Req, Res>, handler: (request: Req) => Promise<Res>): void {
  const [service, method] = splitPath(def.path);
  channel.handle(service, method, async (payload) => {
    let request: Req;
    try {
      request = def.requestDeserialize(payload);
    } catch (err) {
      throw new TtrpcHandlerError(Code.InvalidArgument, `unmarshal request error: ${(err as Error).message}`);
    }
    return def.responseSerialize(await handler(request));
  });
}
