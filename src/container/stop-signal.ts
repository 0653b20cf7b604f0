/**
 * The signal StopContainer sends first: `ContainerConfig.stop_signal` when set, else the image's
 * `StopSignal`, else SIGTERM (containerd and CRI-O's order). Signals are kept by canonical name
 * (`SIGUSR1`, `SIGRTMIN+3`) in the record; real-time ones go to the OCI runtime as Linux numbers (runc
 * knows no names for them).
 */
import { Signal } from '../gen/runtime/v1/api.js';
import { invalidArgument } from '../common/errors.js';

/** Linux signal numbers (x86_64 and arm64 share them), aliases included. */
const STANDARD: Record<string, number> = {
  SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGILL: 4, SIGTRAP: 5, SIGABRT: 6, SIGIOT: 6, SIGBUS: 7, SIGFPE: 8,
  SIGKILL: 9, SIGUSR1: 10, SIGSEGV: 11, SIGUSR2: 12, SIGPIPE: 13, SIGALRM: 14, SIGTERM: 15, SIGSTKFLT: 16,
  SIGCHLD: 17, SIGCLD: 17, SIGCONT: 18, SIGSTOP: 19, SIGTSTP: 20, SIGTTIN: 21, SIGTTOU: 22, SIGURG: 23,
  SIGXCPU: 24, SIGXFSZ: 25, SIGVTALRM: 26, SIGPROF: 27, SIGWINCH: 28, SIGIO: 29, SIGPOLL: 29, SIGPWR: 30, SIGSYS: 31,
};

/** glibc's SIGRTMIN and SIGRTMAX (the kernel's 32 and 33 are taken by the C library). */
const RTMIN = 34;
const RTMAX = 64;

export const DEFAULT_STOP_SIGNAL = 'SIGTERM';

/** The Linux number of a canonical signal name, or undefined. */
export function signalNumber(name: string): number | undefined {
  if (name in STANDARD) return STANDARD[name];
  const rt = /^SIGRT(MIN|MAX)(?:([+-])([0-9]{1,2}))?$/.exec(name);
  if (!rt) return undefined;
  const offset = rt[2] ? (rt[2] === '+' ? 1 : -1) * Number(rt[3]) : 0;
  const n = (rt[1] === 'MIN' ? RTMIN : RTMAX) + offset;
  return n >= RTMIN && n <= RTMAX ? n : undefined;
}

/** The canonical name of a CRI Signal (`SIGRTMINPLUS3` → `SIGRTMIN+3`); undefined for RUNTIME_DEFAULT. */
export function criSignalName(signal: Signal): string | undefined {
  if (signal === Signal.RUNTIME_DEFAULT) return undefined;
  const name = Signal[signal];
  if (name === undefined || name === 'UNRECOGNIZED') throw invalidArgument(`stop_signal ${signal} is not a known signal`);
  return name.replace(/PLUS(\d+)$/, '+$1').replace(/MINUS(\d+)$/, '-$1');
}

/** The signal argument of `runc kill`: the name, or the number of a real-time signal. */
export function runtimeSignalArg(name: string): string {
  const n = signalNumber(name);
  return n !== undefined && n >= RTMIN ? String(n) : name;
}

/** The CRI Signal of a canonical name (RUNTIME_DEFAULT when it has none). */
export function toCriSignal(name: string): Signal {
  const key = name.replace(/\+(\d+)$/, 'PLUS$1').replace(/-(\d+)$/, 'MINUS$1');
  const value = (Signal as unknown as Record<string, number>)[key];
  return typeof value === 'number' && value >= 0 ? (value as Signal) : Signal.RUNTIME_DEFAULT;
}

/**
 * An image's StopSignal as Docker writes it: a name with or without `SIG`, any case, `RTMIN+n`, or a
 * number. Canonical name out; a value that is not a signal is an error naming it.
 */
export function parseImageStopSignal(raw: string): string {
  const text = raw.trim();
  if (/^[0-9]+$/.test(text)) {
    const n = Number(text);
    const name = Object.keys(STANDARD).find((k) => STANDARD[k] === n) ?? (n >= RTMIN && n <= RTMAX ? rtName(n) : undefined);
    if (!name) throw invalidArgument(`the image's StopSignal ${raw} is not a signal number`);
    return name;
  }
  const upper = text.toUpperCase();
  const name = upper.startsWith('SIG') ? upper : `SIG${upper}`;
  if (signalNumber(name) === undefined) throw invalidArgument(`the image's StopSignal "${raw}" is not a signal`);
  // RTMAX-n and RTMIN+m name the same signal; keep the spelling the CRI enum has (RTMIN+1..15, RTMAX-14..0).
  const n = signalNumber(name)!;
  return n >= RTMIN && n <= RTMAX ? rtName(n) : name;
}

function rtName(n: number): string {
  if (n === RTMIN) return 'SIGRTMIN';
  if (n === RTMAX) return 'SIGRTMAX';
  return n - RTMIN <= 15 ? `SIGRTMIN+${n - RTMIN}` : `SIGRTMAX-${RTMAX - n}`;
}

/** The signal a container is stopped with, from its config and its image. */
export function effectiveStopSignal(configured: Signal, imageStopSignal: string | undefined): string {
  return criSignalName(configured) ?? (imageStopSignal ? parseImageStopSignal(imageStopSignal) : DEFAULT_STOP_SIGNAL);
}
