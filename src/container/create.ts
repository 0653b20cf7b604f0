/**
 * CreateContainer as named steps (containerd `CreateContainer`, CRI-O `createSandboxContainer`):
 *
 *   check sandbox and request → resolve image → reserve name → bundle dir → overlay rootfs
 *   → image volumes, the image's declared VOLUMEs (copies beside the writable layer) → host preparation (user from the image's passwd/group, mounts, devices, seccomp) → OCI spec
 *   → spec editors (CDI devices, OCI hooks)
 *   → log dir → conmon + runc create → record written
 *
 * Each acquisition pushes its undo at once, so a failed create leaves no mount, cgroup, conmon, runc
 * container, name reservation or directory behind.
 */
import { rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { ContainerConfig, LinuxContainerResources, NamespaceMode, type PodSandboxConfig } from '../gen/runtime/v1/api.js';
import type { CleanupStack } from '../common/cleanup.js';
import { nowNs } from '../common/clock.js';
import { shortId } from '../common/ids.js';
import { failedPrecondition, invalidArgument, isKind, notFound, wrap } from '../common/errors.js';
import type { ImageInfo } from '../images/image-service.js';
import { removeCgroup } from '../platform/cgroups.js';
import { idmapFromFeatures, type Runc } from '../runtime/runc.js';
import { isReady, podRootGid, type SandboxRecord } from '../sandbox/model.js';
import { makePodDir } from '../persist/tree-modes.js';
import { buildContainerSpec, cgroupsPathFor, prepareContainerHost, specToJson, type ContainerHostInputs, type Spec } from '../oci/index.js';
import type { ContainerServiceOptions } from './deps.js';
import { applySpecEditors } from './spec-editors.js';
import { runtimeSupportFrom } from '../cdi/index.js';
import { destroyRuntimeContainer } from './teardown.js';
import { containerName, type ContainerRecord, type ImageVolumeRecord } from './model.js';
import { effectiveStopSignal } from './stop-signal.js';
import { checkImageMounts, hasImageVolumes, mountImageVolumes } from './image-volumes.js';
import { copyDeclaredVolumes, declaredVolumes, hostOwner, makeDeclaredVolumeDirs } from './declared-volumes.js';
import { assertSearchableByOthers } from '../platform/searchable.js';
import { noteLogPath, prepareLogFile, removeMade } from './log-file.js';
import { StepTimer } from '../observability/steps.js';
import type { CheckpointMetadata } from '../checkpoint/archive.js';
import { applyWritableLayer, CRIU_CONFIG_ANNOTATION, restoreLog, writeRestoreCriuConfig } from '../checkpoint/restore.js';
import type { CreatedContainer } from '../monitor/conmon.js';
import type { IdShift } from '../storage/idshift.js';

/** What a restored container has until StartContainer runs `runc restore`: no process, no monitor. */
const NOT_YET_RESTORED: CreatedContainer = { pid: 0, pidStartTime: 0n, conmonPid: 0, conmonStartTime: 0n };

/** Everything a create needs, checked before anything exists. */
export interface CreatePlan {
  id: string;
  name: string;
  sandbox: SandboxRecord;
  podConfig: PodSandboxConfig;
  config: ContainerConfig;
  image: ImageInfo;
  /** The image as the request named it. */
  imageName: string;
  runtime: Runc;
  logPath: string;
  /** Init pid of the target container (namespace_options.pid = TARGET). */
  targetPid?: number;
  /** Canonical name of the signal StopContainer sends first. */
  stopSignal: string;
  /** `runtime.log_size_max` as in force when the create began (bytes; absent: no cap). */
  logSizeMax?: number;
  /** From a checkpoint archive, unpacked into `dir`: no runtime container until StartContainer restores it. */
  restore?: { archive: string; dir: string; metadata: CheckpointMetadata; requireCriu: () => Promise<void> };
}

/** The sandbox a container goes into: it must exist and be ready. */
export function sandboxForCreate(options: ContainerServiceOptions, podSandboxId: string): SandboxRecord {
  const sandbox = options.sandboxes.find(podSandboxId);
  if (!sandbox) throw notFound(`sandbox "${podSandboxId}" not found`);
  if (!isReady(sandbox) || sandbox.pausePid <= 0) {
    throw failedPrecondition(`sandbox "${sandbox.id}" is not ready: containers can only be created in a ready sandbox`);
  }
  return sandbox;
}

/** The request's checks that need no I/O (the spec builder repeats some, after the rootfs exists). */
export function checkRequest(config: ContainerConfig, podConfig: PodSandboxConfig): void {
  if (config.linux?.securityContext?.privileged && !podConfig.linux?.securityContext?.privileged) {
    throw invalidArgument('no privileged container allowed in sandbox: the pod sandbox is not privileged (config.linux.security_context.privileged)');
  }
  if (config.logPath && config.logPath.includes(':')) {
    throw invalidArgument(`config.log_path "${config.logPath}" must not contain ':'`);
  }
  checkImageMounts(config.mounts);
}

/**
 * The name ContainerStatus reports as its image: what the pod spec says (the kubelet sends it as
 * user_specified_image and names the image by its ID), else the requested name unless it is an ID, else
 * the image's first tag (as containerd does), else the ID.
 */
function statusImageName(config: ContainerConfig, requested: string, image: ImageInfo): string {
  const userSpecified = config.image?.userSpecifiedImage;
  if (userSpecified) return userSpecified;
  if (requested !== image.id && !/^(sha256:)?[0-9a-f]{64}$/.test(requested)) return requested;
  return image.repoTags[0] ?? requested;
}

/**
 * The image the container runs, from the store of its pod's runtime handler; NOT_FOUND with a hint when
 * it is not there.
 */
export function imageForCreate(options: ContainerServiceOptions, imageName: string, runtimeHandler: string): ImageInfo {
  try {
    return options.images.getImage(imageName, runtimeHandler);
  } catch (err) {
    if (isKind(err, 'NotFound')) {
      const store = runtimeHandler && options.images.hasOwnStore(runtimeHandler) ? ` for runtime handler "${runtimeHandler}"` : '';
      throw notFound(`image "${imageName}" not found${store}: pull it${store} before creating a container from it`, err);
    }
    throw err;
  }
}

/** The init pid of the container a TARGET pid namespace names. */
export function targetPidFor(lookup: (id: string) => ContainerRecord | undefined, config: ContainerConfig, sandboxId: string): number | undefined {
  const ns = config.linux?.securityContext?.namespaceOptions;
  if (ns?.pid !== NamespaceMode.TARGET) return undefined;
  const target = lookup(ns.targetId);
  if (!target || target.sandboxId !== sandboxId) {
    throw notFound(`target container "${ns.targetId}" (namespace_options.target_id) not found in sandbox "${sandboxId}"`);
  }
  if (target.state !== 'running' || target.pid <= 0) {
    throw failedPrecondition(`target container "${target.id}" (namespace_options.target_id) is not running`);
  }
  return target.pid;
}

/** The stop signal of the container: the request's, else the image's, else SIGTERM. */
export function stopSignalFor(config: ContainerConfig, image: ImageInfo, sandboxId: string): string {
  try {
    return effectiveStopSignal(config.stopSignal, image.config.StopSignal);
  } catch (err) {
    throw wrap(err, `failed to create container "${config.metadata?.name}" in sandbox "${sandboxId}"`);
  }
}

/** The name a container is recorded (and reserved) under, from the request's and the pod's metadata. */
export function containerNameFor(config: ContainerConfig, podConfig: PodSandboxConfig): string {
  const meta = config.metadata!;
  const pod = podConfig.metadata ?? { name: '', namespace: '', uid: '', attempt: 0 };
  return containerName(meta, pod);
}

/**
 * Runs the acquisition steps of a create under `cleanup` and returns the record (already stored).
 * The name is reserved by the caller.
 */
export async function createSteps(options: ContainerServiceOptions, plan: CreatePlan, cleanup: CleanupStack, timer = new StepTimer(options.telemetry)): Promise<ContainerRecord> {
  const { id, config, sandbox, image } = plan;
  // Each lap is a step in the log and a trace span; conmon's span starts with conmon, not after the spec.
  timer.startLaps();
  const lap = (name: string, spanFrom?: number) => timer.lap(name, spanFrom);
  const bundleDir = options.containerStateDir(id);
  const rootfsDir = join(bundleDir, 'rootfs');
  const persistDir = options.containerDir(id);

  cleanup.push('remove bundle dir', () => rm(bundleDir, { recursive: true, force: true }));
  cleanup.push('remove container dir', () => rm(persistDir, { recursive: true, force: true }));
  const prepareLog = async () => {
    if (!plan.logPath) return;
    const made = await prepareLogFile(plan.podConfig.logDirectory || dirname(plan.logPath), plan.logPath);
    if (made.length) cleanup.push('remove log file', () => removeMade(made));
    if (plan.restore) await restoreLog(plan.restore.dir, plan.restore.metadata, plan.logPath);
  };
  // The bundle dir first, naming the log file before it is made: a create interrupted before its record
  // is written leaves that file, which recovery removes (recover.ts).
  await makePodDir(bundleDir, podRootGid(sandbox.userns));
  if (plan.logPath) await noteLogPath(bundleDir, plan.logPath);
  await prepareLog();
  if (sandbox.userns)
    await assertSearchableByOthers(
      bundleDir,
      `sandbox "${sandbox.id}" has its own user namespace, whose root cannot reach the container's root filesystem`,
    );
  const cgroupsPath = cgroupsPathFor(sandbox.cgroupParent, id, options.specSettings.cgroupDriver);
  cleanup.push('remove cgroup', () => removeCgroup(options.cgroups, cgroupsPath));

  // Pushed before the mount (a mount that fails after the image hold was written must still release
  // it) and before conmon (whose container is deleted before its root filesystem goes).
  cleanup.push('remove root filesystem', () => options.images.removeRootfs(id));

  // conmon starts now and sets itself up while the bundle is prepared; it runs `runc create` only once
  // the gate opens (its start pipe). A failed preparation closes the gate and the monitor undoes conmon.
  // A restored container gets its conmon when it starts (`runc restore`).
  const gate = Promise.withResolvers<void>();
  gate.promise.catch(() => {}); // observed through `creating`
  const conmonStarted = performance.now();
  const creating = plan.restore
    ? Promise.resolve(NOT_YET_RESTORED)
    : options.monitor.createContainer(plan.runtime, {
        id,
        name: plan.name,
        bundle: bundleDir,
        persistDir,
        logPath: plan.logPath || undefined,
        logSizeMax: plan.logSizeMax,
        tty: config.tty,
        stdin: config.stdin,
        stdinOnce: config.stdinOnce,
        beforeStart: () => gate.promise,
      });
  cleanup.push('delete runtime container', async () => {
    const created = await creating.catch(() => undefined);
    if (created && created.conmonPid > 0) await destroyRuntimeContainer(options.monitor, plan.runtime, id, { pid: created.conmonPid, startTime: created.conmonStartTime });
  });

  let spec: Spec;
  let host: ContainerHostInputs;
  let imageVolumes: ImageVolumeRecord[] = [];
  let edits: Record<string, unknown>;
  let adjustedResources: LinuxContainerResources | undefined;
  try {
    // In a pod with its own user namespace the runtime sets the container up as the pod's mapped root,
    // which must own the root filesystem to make mount points in it and to write to it. With a runtime
    // that makes idmapped mounts (`mountExtensions.idmap` in its `runc features`: runc >= 1.2), the
    // image's layers are idmapped under the overlay, as containerd 2 and CRI-O do: the kernel shifts ids
    // on access, nothing is chowned or copied up. With one that does not (Debian 12's runc 1.1.5, crun
    // 1.8), or a kernel that cannot idmap the layers, their owners are chowned into the pod's range on
    // the overlay (storage/idshift.ts).
    const idShift = sandbox.userns ? { uids: sandbox.userns.uidMappings, gids: sandbox.userns.gidMappings } : undefined;
    const idmap = idShift ? idmapFromFeatures(await plan.runtime.cachedFeatures().catch(() => undefined)) : false;
    const ids = await options.images.mountRootfs(image.id, id, rootfsDir, { runtimeHandler: sandbox.runtimeHandler, ...(idShift ? { idShift, idmap } : {}) });
    if (ids !== 'host') options.log.debug('root filesystem in the pod user namespace', { container: shortId(id), ids });
    lap('rootfs');
    if (plan.restore) {
      await applyWritableLayer(rootfsDir, plan.restore.dir, plan.restore.metadata, (p, d, policy) => options.images.unpackArchive(p, d, policy));
      lap('checkpointed writable layer');
      await plan.restore.requireCriu();
    }
    let specPlan = plan;
    if (hasImageVolumes(config.mounts)) {
      const mounted = await mountImageVolumes(options.images, id, sandbox.runtimeHandler, config.mounts, join(bundleDir, 'image-volumes'));
      imageVolumes = mounted.volumes;
      specPlan = { ...plan, config: { ...config, mounts: mounted.mounts } };
      lap('image volumes');
    }
    // The image's declared VOLUMEs (runtime.image_volumes, read once per create): copies beside the
    // writable layer, removed with it by the cleanup above; or dirs made in the root filesystem.
    const volumesMode = options.specSettings.imageVolumes ?? 'copy';
    const what = `image "${plan.imageName}"`;
    const declared = volumesMode === 'ignore' ? [] : declaredVolumes(image.config.Volumes, config.mounts, what);
    if (volumesMode === 'copy' && declared.length) {
      const copies = await copyDeclaredVolumes(rootfsDir, declared, options.images.declaredVolumesDir(id), hostOwner(0, 0, idShift), what);
      specPlan = { ...specPlan, config: { ...specPlan.config, mounts: [...specPlan.config.mounts, ...copies] } };
      lap('declared volumes');
    }
    const mkdirVolumes = volumesMode === 'mkdir' && declared.length ? { paths: declared, idShift, what } : undefined;
    ({ spec, host, edits, adjustedResources } = await writeBundle(options, specPlan, bundleDir, rootfsDir, mkdirVolumes));
    lap('spec');
    gate.resolve();
  } catch (err) {
    gate.reject(err);
    throw err;
  }
  const created = await creating;
  lap('conmon', conmonStarted);

  const record: ContainerRecord = {
    id,
    name: plan.name,
    sandboxId: sandbox.id,
    config: ContainerConfig.toJSON(config),
    runtimeHandler: sandbox.runtimeHandler,
    image: statusImageName(config, plan.imageName, image),
    imageId: image.id,
    imageRef: image.repoDigests[0] ?? image.id,
    stopSignal: plan.stopSignal,
    logPath: plan.logPath,
    state: 'created',
    createdAt: nowNs(),
    startedAt: 0n,
    finishedAt: 0n,
    exitCode: 0,
    reason: '',
    message: '',
    pid: created.pid,
    pidStartTime: created.pidStartTime,
    conmonPid: created.conmonPid,
    conmonStartTime: created.conmonStartTime,
    bundleDir,
    rootfsDir,
    persistDir,
    cgroupsPath: spec.linux?.cgroupsPath ?? cgroupsPath,
    sharedPidNamespace: !spec.linux?.namespaces?.some((n) => n.type === 'pid' && !n.path),
    resources: LinuxContainerResources.toJSON(adjustedResources ?? config.linux?.resources ?? LinuxContainerResources.fromPartial({})),
    // The spec's groups: the user's plus any a spec editor added (CDI additionalGids).
    user: { uid: host.user.uid, gid: host.user.gid, additionalGids: [...(spec.process?.user.additionalGids ?? host.user.additionalGids)] },
    process: (spec.process ?? {}) as unknown as Record<string, unknown>,
    ...(imageVolumes.length ? { imageVolumes } : {}),
    ...(Object.keys(edits).length ? { specEdits: edits } : {}),
    ...(plan.restore ? { restore: { archive: plan.restore.archive, checkpointedAt: plan.restore.metadata.config.checkpointedTime } } : {}),
  };
  await options.store.put(record);
  lap('record');
  return record;
}

/** Resolves the user, prepares mounts and devices, builds the OCI spec and writes config.json. */
async function writeBundle(
  options: ContainerServiceOptions,
  plan: CreatePlan,
  bundleDir: string,
  rootfsDir: string,
  mkdirVolumes?: { paths: string[]; idShift: IdShift | undefined; what: string },
): Promise<{ spec: Spec; host: ContainerHostInputs; edits: Record<string, unknown>; adjustedResources?: LinuxContainerResources }> {
  const { config, sandbox, image } = plan;
  let host: ContainerHostInputs;
  try {
    host = await prepareContainerHost({ config, image: image.config, rootfsPath: rootfsDir, settings: options.specSettings });
  } catch (err) {
    throw wrap(err, 'failed to prepare the container');
  }
  // CRI-O's `mkdir`: owned by the container's user, in its writable layer (removed with it).
  if (mkdirVolumes) await makeDeclaredVolumeDirs(rootfsDir, mkdirVolumes.paths, hostOwner(host.user.uid, host.user.gid, mkdirVolumes.idShift), mkdirVolumes.what);
  const spec = buildContainerSpec({
    id: plan.id,
    config,
    image: image.config,
    imageName: plan.imageName,
    sandbox: {
      id: sandbox.id,
      config: plan.podConfig,
      hostname: sandbox.hostname,
      pausePid: sandbox.pausePid,
      netnsPath: sandbox.netnsPath || undefined,
      files: sandbox.files,
      cgroupParent: sandbox.cgroupParent,
    },
    host,
    targetPid: plan.targetPid,
    settings: options.specSettings,
  });
  const runtime = async () => runtimeSupportFrom(plan.runtime.binary, await plan.runtime.features().catch(() => undefined));
  const edits = await applySpecEditors(options.specEditors ?? [], spec, { id: plan.id, config, podConfig: plan.podConfig, runtime });
  // The one point where extensions (NRI plugins) see and adjust the finished spec.
  const adjustedResources = options.lifecycle ? await options.lifecycle.adjustSpec({ id: plan.id, sandbox, config, spec, runtime }) : undefined;
  // Last, so that no request annotation or extension sets what CRIU is told for the restore.
  if (plan.restore) spec.annotations = { ...spec.annotations, [CRIU_CONFIG_ANNOTATION]: await writeRestoreCriuConfig(plan.restore.dir) };
  await writeFile(join(bundleDir, 'config.json'), specToJson(spec), { mode: 0o600 });
  return { spec, host, edits, adjustedResources };
}

