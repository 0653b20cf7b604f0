/** A promise-based CRI client over the generated grpc-js clients, for tests and benchmarks. */
import { credentials, type Client, type ServiceError } from '@grpc/grpc-js';
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

/** Runtime and image clients on one unix socket, plus the raw clients for streaming calls. */
export interface CriClients {
  runtime: Omit<RuntimeHandlers, 'getContainerEvents'>;
  image: ImageHandlers;
  rawRuntime: RuntimeServiceClient;
  close(): void;
}

/** Connects to the CRI at unix socket `socket`, sending `localhost` as :authority like current kubelets. */
export function criClients(socket: string): CriClients {
  const options = { 'grpc.default_authority': 'localhost', 'grpc.max_receive_message_length': 16 << 20 };
  const rawRuntime = new RuntimeServiceClient(`unix://${socket}`, credentials.createInsecure(), options);
  const rawImage = new ImageServiceClient(`unix://${socket}`, credentials.createInsecure(), options);
  return {
    runtime: promisify<Omit<RuntimeHandlers, 'getContainerEvents'>>(rawRuntime),
    image: promisify<ImageHandlers>(rawImage),
    rawRuntime,
    close() {
      rawRuntime.close();
      rawImage.close();
    },
  };
}
