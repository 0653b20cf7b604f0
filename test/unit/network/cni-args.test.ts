import assert from 'node:assert/strict';
import {
  bandwidthFromAnnotations,
  buildCapabilityArgs,
  buildCniArgs,
  cniPortMappings,
  formatCniArgs,
  parseQuantity,
  pluginRequestConfig,
  runtimeConfigFor,
} from '../../../src/network/cni-args.js';
import { isKind } from '../../../src/common/errors.js';

const pod = { sandboxId: 'abc123', podName: 'web-0', podNamespace: 'default', podUid: 'u-1' };

describe('network/cni-args', () => {
  it('builds CNI_ARGS in ocicni order', () => {
    assert.equal(
      formatCniArgs(buildCniArgs(pod)),
      'IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc123;K8S_POD_UID=u-1',
    );
  });

  it('rejects CNI_ARGS values holding a separator', () => {
    assert.throws(() => buildCniArgs({ ...pod, podName: 'a;b' }), (e) => isKind(e, 'InvalidArgument') && /K8S_POD_NAME/.test((e as Error).message));
    assert.throws(() => buildCniArgs({ ...pod, podUid: 'x=y' }), (e) => isKind(e, 'InvalidArgument'));
  });

  it('parses Kubernetes quantities exactly, rounding up', () => {
    assert.equal(parseQuantity('10M'), 10_000_000n);
    assert.equal(parseQuantity('1Mi'), 1_048_576n);
    assert.equal(parseQuantity('0.1k'), 100n);
    assert.equal(parseQuantity('1.5G'), 1_500_000_000n);
    assert.equal(parseQuantity('1e6'), 1_000_000n);
    assert.equal(parseQuantity('2E'), 2_000_000_000_000_000_000n);
    assert.equal(parseQuantity('500m'), 1n);
    assert.equal(parseQuantity('100'), 100n);
    assert.throws(() => parseQuantity('ten'));
    assert.throws(() => parseQuantity(''));
    assert.throws(() => parseQuantity('1Q'));
  });

  it('turns bandwidth annotations into the bandwidth capability', () => {
    assert.equal(bandwidthFromAnnotations({}), undefined);
    assert.deepEqual(bandwidthFromAnnotations({ 'kubernetes.io/ingress-bandwidth': '10M' }), {
      ingressRate: 10_000_000,
      ingressBurst: 2147483647,
    });
    assert.deepEqual(bandwidthFromAnnotations({ 'kubernetes.io/egress-bandwidth': '1Mi', other: 'x' }), {
      egressRate: 1_048_576,
      egressBurst: 2147483647,
    });
  });

  it('rejects unreasonable or malformed bandwidth', () => {
    const bad = (v: string) => () => bandwidthFromAnnotations({ 'kubernetes.io/ingress-bandwidth': v });
    assert.throws(bad('999'), (e) => isKind(e, 'InvalidArgument') && /unreasonably small/.test((e as Error).message));
    assert.throws(bad('2P'), (e) => isKind(e, 'InvalidArgument') && /unreasonably large/.test((e as Error).message));
    assert.throws(bad('fast'), (e) => isKind(e, 'InvalidArgument') && /kubernetes.io\/ingress-bandwidth="fast"/.test((e as Error).message));
  });

  it('maps port mappings with lower-case protocols and skips those without a host port', () => {
    assert.deepEqual(
      cniPortMappings([
        { hostPort: 8080, containerPort: 80, protocol: 'TCP' },
        { hostPort: 0, containerPort: 81, protocol: 'TCP' },
        { hostPort: 5353, containerPort: 53, protocol: 'UDP', hostIp: '127.0.0.1' },
        { hostPort: 9000, containerPort: 9000, protocol: 'SCTP', hostIp: '' },
      ]),
      [
        { hostPort: 8080, containerPort: 80, protocol: 'tcp' },
        { hostPort: 5353, containerPort: 53, protocol: 'udp', hostIP: '127.0.0.1' },
        { hostPort: 9000, containerPort: 9000, protocol: 'sctp' },
      ],
    );
  });

  it('collects every capability argument of a pod', () => {
    const caps = buildCapabilityArgs({
      ...pod,
      portMappings: [{ hostPort: 1, containerPort: 2, protocol: 'tcp' }],
      annotations: { 'kubernetes.io/ingress-bandwidth': '1M', a: 'b' },
      dnsConfig: { servers: ['10.0.0.10'], searches: ['svc.cluster.local'] },
      cgroupParent: '/kubepods/pod1',
    });
    assert.deepEqual(caps, {
      portMappings: [{ hostPort: 1, containerPort: 2, protocol: 'tcp' }],
      bandwidth: { ingressRate: 1_000_000, ingressBurst: 2147483647 },
      dns: { servers: ['10.0.0.10'], searches: ['svc.cluster.local'], options: [] },
      'io.kubernetes.cri.pod-annotations': { 'kubernetes.io/ingress-bandwidth': '1M', a: 'b' },
      cgroupPath: '/kubepods/pod1',
    });
    assert.deepEqual(buildCapabilityArgs({ ...pod, dnsConfig: {} }), { 'io.kubernetes.cri.pod-annotations': {} });
  });

  it('gives a plugin only the capabilities it declares as true', () => {
    const caps = { portMappings: [{ hostPort: 1 }], bandwidth: { ingressRate: 1 }, dns: { servers: [] } };
    assert.deepEqual(runtimeConfigFor({ type: 'bridge' }, caps), {});
    assert.deepEqual(runtimeConfigFor({ type: 'portmap', capabilities: { portMappings: true } }, caps), { portMappings: [{ hostPort: 1 }] });
    assert.deepEqual(runtimeConfigFor({ type: 'x', capabilities: { bandwidth: false, dns: true, ipRanges: true } }, caps), { dns: { servers: [] } });
  });

  it('derives the request config: list name and version, prevResult from 0.3.0, runtimeConfig only when needed', () => {
    const prev = { cniVersion: '1.0.0', ips: [{ address: '10.0.0.2/24' }] };
    const plugin = { type: 'portmap', name: 'mine', cniVersion: '0.2.0', capabilities: { portMappings: true }, snat: true };
    const caps = { portMappings: [{ hostPort: 1, containerPort: 2, protocol: 'tcp' }] };
    assert.deepEqual(pluginRequestConfig({ name: 'net', cniVersion: '1.0.0' }, plugin, caps, prev), {
      type: 'portmap',
      name: 'net',
      cniVersion: '1.0.0',
      capabilities: { portMappings: true },
      snat: true,
      prevResult: prev,
      runtimeConfig: { portMappings: caps.portMappings },
    });
    const old = pluginRequestConfig({ name: 'net', cniVersion: '0.2.0' }, { type: 'bridge' }, caps, prev);
    assert.deepEqual(old, { type: 'bridge', name: 'net', cniVersion: '0.2.0' });
  });
});
