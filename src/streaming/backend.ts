/**
 * What the streaming server needs from the rest of Stove. The server speaks the wire protocols
 * (SPDY/3.1 and WebSocket, remotecommand v1–v5, port-forward) and hands each session to a backend that
 * does the process work: run `runc exec` (or conmon --exec-attach), attach to conmon's socket, dial a
 * port inside a pod's network namespace. A lookup answers "does this container / pod exist" when a URL
 * is handed out, so unknown ids fail the CRI call with NOT_FOUND instead of failing later on the wire.
 *
 * Contract for backends:
 *
 * - `exec(params, io)` runs `params.cmd` in container `params.containerId` and resolves with its exit
 *   code (0–255; a process killed by signal N reports 128+N) once the process has exited AND all of its
 *   output has been written to `io.stdout` / `io.stderr` (write, don't end: the server ends them). Reject
 *   only when the command could not be run at all; the message reaches the client as
 *   `error executing command in container: <message>`.
 * - `attach(params, io)` connects `io` to the container's main process and resolves when the attach is
 *   over: when the output ends (the container exited), or, for a container with `stdin && !stdin_once
 *   && !tty`, when the client's stdin ends. Whether the container's stdin is closed when the client's
 *   stdin ends (`stdin_once`) is the backend's business; the server only delivers EOF.
 * - `io.stdin` is present iff the session asked for stdin; it ends when the client closes stdin, and
 *   also when the client disconnects.
 * - `io.stdout` / `io.stderr` are present iff requested (with a TTY everything goes to stdout). They
 *   respect backpressure (`write()` returning false, 'drain'), so piping a child's output into them
 *   keeps memory flat. They never emit 'error': after a disconnect, writes are silently dropped.
 * - `io.resize` (TTY sessions only) yields terminal sizes as the client reports them, starting with
 *   the initial size; only the latest unread size is kept. It finishes when the session ends.
 * - `io.signal` aborts when the client goes away (or the server stops): kill the process (exec) or
 *   detach (attach) and settle promptly. The settled value is then ignored.
 * - `portForward(podSandboxId, port, stream, signal)` dials `localhost:<port>` inside the pod's network
 *   namespace and copies bytes both ways between the connection and `stream` until both directions are
 *   done (`relay()` from relay.ts does the copying right, including half-close). Reject with an Error to report
 *   a failure such as nothing listening; it is sent to the client on that connection's error stream
 *   (the connection's other streams and other ports are unaffected). `signal` aborts when the client
 *   goes away. Errors whose `code` is EPIPE or ECONNRESET are reported as recoverable.
 */
import type { Duplex, Readable, Writable } from 'node:stream';

/**
 * Which standard streams an exec or attach session carries, and whether on a terminal. `cri/exec.ts` and `cri/attach.ts`
 * fills these in from the CRI request (after checking it) when it hands out the URL.
 */
export interface StreamSelection {
  tty: boolean;
  stdin: boolean;
  stdout: boolean;
  stderr: boolean;
}

/** An exec session: run `cmd` in the container (its full id). */
export interface ExecParams extends StreamSelection {
  containerId: string;
  cmd: string[];
}

/** An attach session to the container's (full id) main process. */
export interface AttachParams extends StreamSelection {
  containerId: string;
}

/** A port-forward session to the pod (its full id); `ports` may be empty (SPDY clients name them per stream). */
export interface PortForwardParams {
  podSandboxId: string;
  ports: number[];
}

/** A terminal size in character cells, as sent by the client. */
export interface TerminalSize {
  width: number;
  height: number;
}

/** One exec or attach session's standard streams. */
export interface StreamIO {
  stdin?: Readable;
  stdout?: Writable;
  stderr?: Writable;
  tty: boolean;
  resize?: AsyncIterable<TerminalSize>;
  signal: AbortSignal;
}

/** The process side of exec, attach and port-forward (see the contract above). */
export interface StreamingBackend {
  exec(params: ExecParams, io: StreamIO): Promise<number>;
  attach(params: AttachParams, io: StreamIO): Promise<void>;
  portForward(podSandboxId: string, port: number, stream: Duplex, signal: AbortSignal): Promise<void>;
}

/**
 * Existence checks made when a streaming URL is requested. Each returns the canonical (full) id, or
 * undefined when there is no such object. They may also throw a StoveError, e.g. FailedPrecondition
 * for a container that is not running.
 */
export interface StreamingLookup {
  container(id: string): Promise<string | undefined>;
  sandbox(id: string): Promise<string | undefined>;
}
