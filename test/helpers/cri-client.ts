/** A promise-based CRI client over the generated grpc-js clients, for tests and benchmarks. */
import { credentials, type Client, type ClientReadableStream, type ServiceError } from '@grpc/grpc-js';
import { ImageServiceClient, RuntimeServiceClient } from '../../src/gen/runtime/v1/api.js';

import type { ImageHandlers, RuntimeHandlers } from '../../src/api/handlers.js';

type Callback<Res> = (err: ServiceError | null, res: Res) => void;
type UnaryMethod<Req, Res> = (req: Req, cb: Callback<Res>) => unknown;

/** Unary methods as `(request) => Promise<response>`, typed like Stove's own handler tables. */
function promisify<T>(client: Client): T {
  return new Proxy(client, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver) as unknown;
      if (typeof value !== 'function') return value;
      return (req: unknown) =>
        new Promise((resolve, reject) =>
          (value as UnaryMethod<unknown, unknown>).call(target, req, (err, res) => (err ? reject(err) : resolve(res))),
        );
    },
  }) as unknown as T;
}

/** The handlers of a table that answer with one message, as a client calls them (the request alone). */
type Unary<T> = {
  [K in keyof T as T[K] extends (request: never, call: never) => Promise<unknown> ? K : never]: T[K] extends (request: infer Req, call: never) => infer Res
    ? (request: Req) => Res
    : never;
};

/** Every message of a server-streaming call, once it ended (rejects with the call's error). */
export function collect<T>(call: ClientReadableStream<T>): Promise<T[]> {
  return new Promise((resolve, reject) => {
    const out: T[] = [];
    call.on('data', (m: T) => out.push(m));
    call.on('error', reject);
    call.on('end', () => resolve(out));
  });
}

/** Runtime and image clients on one unix socket, plus the raw clients for streaming calls. */
export interface CriClients {
  runtime: Unary<RuntimeHandlers>;
  image: Unary<ImageHandlers>;
  rawRuntime: RuntimeServiceClient;
  rawImage: ImageServiceClient;
  close(): void;
}

/** Connects to the CRI at unix socket `socket`, sending `localhost` as :authority like current kubelets. */
export function criClients(socket: string): CriClients {
  const options = { 'grpc.default_authority': 'localhost', 'grpc.max_receive_message_length': 16 << 20 };
  const rawRuntime = new RuntimeServiceClient(`unix://${socket}`, credentials.createInsecure(), options);
  const rawImage = new ImageServiceClient(`unix://${socket}`, credentials.createInsecure(), options);
  return {
    runtime: promisify<Unary<RuntimeHandlers>>(rawRuntime),
    image: promisify<Unary<ImageHandlers>>(rawImage),
    rawRuntime,
    rawImage,
    close() {
      rawRuntime.close();
      rawImage.close();
    },
  };
}
