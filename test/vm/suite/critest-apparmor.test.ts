/**
 * critest's AppArmor specs (cri-tools v1.36, `critest -ginkgo.focus=AppArmor`) against Stove on a node
 * with AppArmor, where they run (on a host without it critest skips them). critest travels with the
 * checkout (test/vm/run.sh --critest; make test-vm builds it with test/e2e/critest.sh). Offline: the one
 * image the specs pull, critest's default test container image, is served by the test's own loopback
 * registry and named to critest with -test-images-file. The specs load their two profiles with
 * `sudo apparmor_parser` (the guest has sudo) and create, start and check containers under them.
 */
import assert from 'node:assert/strict';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { appArmorEnabled } from '../../../src/platform/proc.js';
import { pushBusyboxImage } from '../../helpers/image-builder.js';
import { suiteHooks } from '../../helpers/suite.js';
import { ContainerWorld, skipReason as containerSkipReason } from '../../integration/container/world.js';

const PARSER = '/usr/sbin/apparmor_parser';
/** cri-tools v1.36's DefaultLinuxContainerImage, the image the AppArmor specs run `touch /tmp/foo` in. */
const CRITEST_IMAGE_PATH = 'e2e-test-images/busybox:1.29-2';
/** The profiles critest loads and never removes. */
const CRITEST_PROFILES = ['cri-validate-apparmor-test-deny-write', 'cri-validate-apparmor-test-audit-write'];
/** The AppArmor specs of cri-tools v1.36: three contexts of three. */
const APPARMOR_SPECS = 9;

interface SpecReport {
  State: string;
  LeafNodeType: string;
  LeafNodeText: string;
  ContainerHierarchyTexts?: string[];
  Failure?: { Message?: string };
}

async function skipReason(): Promise<string | undefined> {
  if (!process.env.STOVE_VM_CRITEST) return 'no critest in the guest (test/vm/run.sh --critest FILE; make test-vm builds cri-tools with test/e2e/critest.sh)';
  if (!(await appArmorEnabled())) return 'needs a node with AppArmor enabled (test/vm/run.sh boots one)';
  return containerSkipReason();
}

describe('critest AppArmor specs (guest)', function () {
  this.timeout(900_000);
  const world = new ContainerWorld();

  suiteHooks({
    what: 'critest AppArmor specs',
    skipReason,
    setup: () => world.start(),
    tidy: async () => {
      await world.removeAll().catch(() => {});
      await execa(PARSER, ['-R'], { input: CRITEST_PROFILES.map((p) => `profile ${p} {}\n`).join(''), reject: false });
    },
    leftovers: () => world.leftovers(),
    cleanup: () => world.cleanup(),
  });

  it(`passes the ${APPARMOR_SPECS} AppArmor specs`, async () => {
    const image = await pushBusyboxImage(world.registry, CRITEST_IMAGE_PATH, {});
    const work = join(world.daemon.dir, 'critest');
    await mkdir(join(work, 'tmp'), { recursive: true });
    const images = join(work, 'images.yaml');
    await writeFile(images, `defaultTestContainerImage: ${image.reference}\n`);
    const report = join(work, 'report.json');
    const endpoint = `unix://${world.daemon.socket}`;
    const run = await execa(
      process.env.STOVE_VM_CRITEST!,
      ['--runtime-endpoint', endpoint, '--image-endpoint', endpoint, '--test-images-file', images, '--ginkgo.focus', 'AppArmor', '--ginkgo.no-color', '--ginkgo.timeout', '12m', '--ginkgo.json-report', report],
      { cwd: work, env: { TMPDIR: join(work, 'tmp') }, reject: false, all: true },
    );
    const specs = (JSON.parse(await readFile(report, 'utf8').catch(() => '[]')) as { SpecReports?: SpecReport[] }[]).flatMap((s) => s.SpecReports ?? []);
    const ours = specs.filter((r) => r.LeafNodeType === 'It' && (r.ContainerHierarchyTexts ?? []).some((t) => t.includes('AppArmor')));
    const summary = ours.map((r) => `${r.State}: ${[...(r.ContainerHierarchyTexts ?? []), r.LeafNodeText].join(' ')}${r.Failure?.Message ? ` (${r.Failure.Message.split('\n')[0]})` : ''}`);
    console.log(summary.map((l) => `      ${l}`).join('\n'));
    assert.equal(run.exitCode, 0, `critest failed:\n${run.all?.split('\n').slice(-40).join('\n')}`);
    assert.equal(ours.length, APPARMOR_SPECS, 'every AppArmor spec ran');
    assert.deepEqual(ours.filter((r) => r.State !== 'passed').map((r) => r.LeafNodeText), [], 'every AppArmor spec passed');
  });
});
