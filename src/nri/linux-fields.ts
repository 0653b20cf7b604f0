/**
 * The NRI adjustments that go to the OCI runtime as they are: an I/O priority (v0.10,
 * `process.ioPriority`), a scheduling policy (v0.11, `process.scheduler`), network devices (v0.11,
 * `linux.netDevices`) and RDT settings (v0.11, `linux.intelRdt` closID, schemata, enableMonitoring).
 *
 * Their values are checked as hostile (ranges, names, sizes) before anything is merged: a plugin is
 * trusted with the node, but what it answers is still bytes off a socket, and what passes here is
 * written into config.json for a runtime that would otherwise fail late and less clearly, or act on it.
 * What the container's runtime does not implement (runtime-support.ts) is refused naming the plugin,
 * the field and the runtime, never dropped: the plugin would believe the container has it.
 */
import {
  IOPrioClass,
  LinuxSchedulerFlag,
  LinuxSchedulerPolicy,
  iOPrioClassFromJSON,
  iOPrioClassToJSON,
  linuxSchedulerFlagFromJSON,
  linuxSchedulerFlagToJSON,
  linuxSchedulerPolicyFromJSON,
  linuxSchedulerPolicyToJSON,
  type LinuxIOPriority,
  type LinuxNetDevice,
  type LinuxRdt,
  type LinuxScheduler,
} from '../gen/nri/api.js';
import type { OciIOPriority, OciScheduler } from '../oci/index.js';

/** At most this many network devices per container (SR-IOV pods take a few; this is far above). */
export const MAX_NET_DEVICES = 32;
/** RDT schemata: at most this many lines (one per resource: L3, L2, MB, their CODE/DATA halves, …). */
export const MAX_SCHEMATA_LINES = 32;
/** … each at most this long (`L3:0=ffff;1=ffff;…`: one entry per cache domain). */
export const MAX_SCHEMATA_LINE_BYTES = 4096;
/** A resctrl group is a directory: a file name. */
const MAX_CLOS_ID_BYTES = 255;
/** IFNAMSIZ less its NUL. */
const MAX_IFNAME_BYTES = 15;
/** The kernel refuses a SCHED_DEADLINE runtime below 1 µs (DL_SCALE) and periods from 2^63 ns. */
const MIN_DL_RUNTIME = 1n << 10n;
const MAX_DL_NS = 1n << 63n;

const IO_CLASSES = new Set([IOPrioClass.IOPRIO_CLASS_RT, IOPrioClass.IOPRIO_CLASS_BE, IOPrioClass.IOPRIO_CLASS_IDLE]);
const POLICIES = new Set([
  LinuxSchedulerPolicy.SCHED_NONE,
  LinuxSchedulerPolicy.SCHED_OTHER,
  LinuxSchedulerPolicy.SCHED_FIFO,
  LinuxSchedulerPolicy.SCHED_RR,
  LinuxSchedulerPolicy.SCHED_BATCH,
  LinuxSchedulerPolicy.SCHED_IDLE,
  LinuxSchedulerPolicy.SCHED_DEADLINE,
]);
const FLAGS = new Set(Object.values(LinuxSchedulerFlag).filter((v): v is LinuxSchedulerFlag => typeof v === 'number' && v >= 0));

/** An enum value as NRI names it, or the number a hostile answer carried. */
const named = (toJson: (v: never) => string, v: number) => (toJson(v as never) === 'UNRECOGNIZED' ? String(v) : toJson(v as never));

/** What is wrong with an I/O priority, or undefined. */
export function ioPriorityProblem(p: LinuxIOPriority): string | undefined {
  if (!IO_CLASSES.has(p.class)) return `class ${named(iOPrioClassToJSON, p.class)} is none of IOPRIO_CLASS_RT, IOPRIO_CLASS_BE, IOPRIO_CLASS_IDLE`;
  if (!Number.isInteger(p.priority) || p.priority < 0 || p.priority > 7) return `priority ${p.priority} is outside 0 (highest) to 7 (lowest)`;
  return undefined;
}

/** What is wrong with a scheduling policy (sched_setattr(2)'s rules), or undefined. SCHED_NONE removes it. */
export function schedulerProblem(s: LinuxScheduler): string | undefined {
  const P = LinuxSchedulerPolicy;
  const policy = named(linuxSchedulerPolicyToJSON, s.policy);
  if (s.policy === P.SCHED_ISO) return 'policy SCHED_ISO is not implemented by Linux';
  if (!POLICIES.has(s.policy)) return `policy ${policy} is unknown`;
  if (s.policy === P.SCHED_NONE) return undefined;
  if (s.nice < -20 || s.nice > 19) return `nice ${s.nice} is outside -20 to 19`;
  const realtime = s.policy === P.SCHED_FIFO || s.policy === P.SCHED_RR;
  if (realtime && (s.priority < 1 || s.priority > 99)) return `priority ${s.priority} is outside 1 to 99 (${policy})`;
  if (!realtime && s.priority !== 0) return `priority ${s.priority} is only for SCHED_FIFO and SCHED_RR, not ${policy}`;
  if (s.flags.length > FLAGS.size) return `${s.flags.length} flags (at most ${FLAGS.size})`;
  const unknown = s.flags.find((f) => !FLAGS.has(f));
  if (unknown !== undefined) return `flag ${unknown} is unknown`;
  if (s.policy !== P.SCHED_DEADLINE) {
    if (s.runtime || s.deadline || s.period) return `runtime, deadline and period are only for SCHED_DEADLINE, not ${policy}`;
    return undefined;
  }
  if (s.runtime < MIN_DL_RUNTIME) return `runtime ${s.runtime} ns is below ${MIN_DL_RUNTIME} ns (SCHED_DEADLINE)`;
  if (s.deadline < s.runtime) return `deadline ${s.deadline} ns is below runtime ${s.runtime} ns (SCHED_DEADLINE)`;
  if (s.period !== 0n && s.period < s.deadline) return `period ${s.period} ns is below deadline ${s.deadline} ns (SCHED_DEADLINE)`;
  if (s.deadline >= MAX_DL_NS || s.period >= MAX_DL_NS) return 'deadline and period must be below 2^63 ns (SCHED_DEADLINE)';
  return undefined;
}

/**
 * What is wrong with a network interface name (the kernel's dev_valid_name, and printable ASCII), or
 * undefined. `template`: a container-side name may hold one `%d`, the kernel then numbers it.
 */
function ifnameProblem(name: string, template: boolean): string | undefined {
  const shown = JSON.stringify(name.slice(0, 64));
  if (!name) return 'an empty interface name';
  if (Buffer.byteLength(name) > MAX_IFNAME_BYTES) return `interface name ${shown} is longer than ${MAX_IFNAME_BYTES} bytes`;
  if (name === '.' || name === '..') return `interface name ${shown} is not allowed`;
  if (!/^[\x21-\x7e]+$/.test(name) || /[/:]/.test(name)) return `interface name ${shown} holds a character interface names cannot have (space, '/', ':', or not printable ASCII)`;
  if (name.includes('%') && (!template || !/^[^%]*%d[^%]*$/.test(name))) return `interface name ${shown} holds '%' other than one "%d" template`;
  if (name === 'lo') return `interface name "lo" is the loopback interface`;
  return undefined;
}

/** What is wrong with moving host interface `host` into the container as `device.name`, or undefined. */
export function netDeviceProblem(host: string, device: LinuxNetDevice | undefined): string | undefined {
  return ifnameProblem(host, false) ?? (device?.name ? ifnameProblem(device.name, true) : undefined);
}

/** What is wrong with RDT settings, or undefined. */
export function rdtProblem(rdt: LinuxRdt): string | undefined {
  const clos = rdt.closId?.value;
  if (clos !== undefined && clos !== '/') {
    const shown = JSON.stringify(clos.slice(0, 64));
    if (Buffer.byteLength(clos) > MAX_CLOS_ID_BYTES) return `closID ${shown}… is longer than ${MAX_CLOS_ID_BYTES} bytes`;
    if (clos === '.' || clos === '..' || clos.includes('/') || /[\x00-\x1f\x7f]/.test(clos)) return `closID ${shown} is not a resctrl group name (a directory name, or "/" for the default group)`;
  }
  const lines = rdt.schemata?.value;
  if (lines) {
    if (lines.length > MAX_SCHEMATA_LINES) return `${lines.length} schemata lines (at most ${MAX_SCHEMATA_LINES})`;
    for (const [i, line] of lines.entries()) {
      if (Buffer.byteLength(line) > MAX_SCHEMATA_LINE_BYTES) return `schemata line ${i + 1} is longer than ${MAX_SCHEMATA_LINE_BYTES} bytes`;
      if (!line.trim()) return `schemata line ${i + 1} is empty`;
      if (/[\x00-\x1f\x7f]/.test(line)) return `schemata line ${i + 1} holds a newline or another control character`;
    }
  }
  return undefined;
}

/** True when RDT settings set anything (an empty message, or one that only removes, needs no runtime). */
export const rdtSetsAnything = (rdt: LinuxRdt | undefined): boolean => !!rdt && (rdt.closId !== undefined || rdt.schemata !== undefined || rdt.enableMonitoring !== undefined);

/** A short description of RDT settings for messages. */
export function describeRdt(rdt: LinuxRdt): string {
  const parts = [
    rdt.closId !== undefined ? `closID ${JSON.stringify(rdt.closId.value.slice(0, 64))}` : '',
    rdt.schemata !== undefined ? `${rdt.schemata.value.length} schemata line(s)` : '',
    rdt.enableMonitoring !== undefined ? `monitoring ${rdt.enableMonitoring.value ? 'on' : 'off'}` : '',
  ];
  return parts.filter(Boolean).join(', ');
}

export const describeIoPriority = (p: LinuxIOPriority): string => `${named(iOPrioClassToJSON, p.class)} ${p.priority}`;

export function describeScheduler(s: LinuxScheduler): string {
  return [named(linuxSchedulerPolicyToJSON, s.policy), s.nice ? `nice ${s.nice}` : '', s.priority ? `priority ${s.priority}` : ''].filter(Boolean).join(' ');
}

/** An int64/uint64 as a spec integer, exact (a bigint beyond 2^53; specToJson writes its digits). */
const exact = (v: bigint) => (v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v);

export function ociIoPriority(p: LinuxIOPriority): OciIOPriority {
  return { class: iOPrioClassToJSON(p.class) as OciIOPriority['class'], priority: p.priority };
}

/** The spec's scheduler; undefined for SCHED_NONE (NRI's "no policy": the spec's is removed). */
export function ociScheduler(s: LinuxScheduler): OciScheduler | undefined {
  if (s.policy === LinuxSchedulerPolicy.SCHED_NONE) return undefined;
  return {
    policy: linuxSchedulerPolicyToJSON(s.policy),
    ...(s.nice ? { nice: s.nice } : {}),
    ...(s.priority ? { priority: s.priority } : {}),
    ...(s.flags.length ? { flags: s.flags.map(linuxSchedulerFlagToJSON) } : {}),
    ...(s.runtime ? { runtime: exact(s.runtime) } : {}),
    ...(s.deadline ? { deadline: exact(s.deadline) } : {}),
    ...(s.period ? { period: exact(s.period) } : {}),
  };
}

/** A spec's I/O priority as NRI describes it to plugins. */
export function nriIoPriority(p: OciIOPriority | undefined): LinuxIOPriority | undefined {
  return p ? { class: iOPrioClassFromJSON(p.class), priority: p.priority } : undefined;
}

/** A spec's scheduler as NRI describes it to plugins. */
export function nriScheduler(s: OciScheduler | undefined): LinuxScheduler | undefined {
  if (!s) return undefined;
  const u64 = (v: number | bigint | undefined) => BigInt(v ?? 0);
  return {
    policy: linuxSchedulerPolicyFromJSON(s.policy),
    nice: s.nice ?? 0,
    priority: s.priority ?? 0,
    flags: (s.flags ?? []).map(linuxSchedulerFlagFromJSON),
    runtime: u64(s.runtime),
    deadline: u64(s.deadline),
    period: u64(s.period),
  };
}
