/** kubectl logs, exec with a terminal, attach, port-forward and cp: the kubelet's streaming through Stove. */
import { strict as assert } from 'node:assert';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { apply, busyboxPod, kubectl, kubectlCommandLine, kubectlProcess, pod, suiteNamespace, waitFor, waitPodReady } from './kube.js';


/** Collects a child's stdout and resolves once `pattern` appears in it. */
function readUntil(child: ReturnType<typeof kubectlProcess>, pattern: RegExp, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`no ${pattern} within ${timeoutMs} ms; got: ${out.slice(-500)}`)), timeoutMs);
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      if (pattern.test(out)) {
        clearTimeout(timer);
        resolve(out);
      }
    });
  });
}

describe('cluster: logs, exec, attach, port-forward and cp', function () {
  this.timeout(240_000);
  const ns = suiteNamespace('e2e-streaming');
  before(async () => {
    await apply(
      busyboxPod(ns.name, 'counter', 'echo "run $(cat /proc/sys/kernel/random/uuid)"; i=0; while [ $i -lt 6 ]; do i=$((i+1)); echo "line $i"; sleep 1; done; exit 3'),
    );
    await apply(busyboxPod(ns.name, 'web', 'mkdir -p /www; echo hello-forward > /www/index.html; exec httpd -f -p 8080 -h /www'));
    await apply(
      busyboxPod(ns.name, 'echoer', 'while read line; do echo "got:$line"; done', { containerYaml: '    stdin: true' }),
    );
    await waitPodReady(ns.name, 'web');
    await waitPodReady(ns.name, 'echoer');
  });

  it('logs: -f follows, --since cuts, --previous shows the last run', async () => {
    const follow = kubectlProcess(['-n', ns.name, 'logs', '-f', 'counter']);
    try {
      const out = await readUntil(follow, /line 3/, 60_000);
      assert.match(out, /^run [0-9a-f-]{36}\nline 1\nline 2\nline 3/);
    } finally {
      follow.kill();
      await follow;
    }
    const restarted = await waitFor('the counter restarted', 120_000, async () => {
      const s = (await pod(ns.name, 'counter')).status.containerStatuses?.[0];
      return s && s.restartCount >= 1 && s.state.running ? s : undefined;
    });
    assert.equal(restarted.lastState?.terminated?.exitCode, 3);
    const previous = await kubectl(['-n', ns.name, 'logs', '--previous', 'counter']);
    assert.match(previous, /^run [0-9a-f-]{36}\nline 1\n(.|\n)*line 6\n?$/);
    // The current run a few lines in, so that the last 2 s are less than the whole.
    const current = await waitFor('the current run at line 4', 30_000, async () => {
      const log = await kubectl(['-n', ns.name, 'logs', 'counter']);
      return /\nline 4\n/.test(log) ? log : undefined;
    });
    assert.notEqual(previous.split('\n')[0], current.split('\n')[0], 'the previous run and the current one are different runs');
    const recent = await kubectl(['-n', ns.name, 'logs', '--since=2s', 'counter']);
    assert.ok(recent.split('\n').filter(Boolean).length < current.split('\n').filter(Boolean).length, `--since=2s gave\n${recent}\nof\n${current}`);
    assert.doesNotMatch(recent, /^run /);
  });

  it('exec -it runs with a terminal of the size kubectl asks for', async () => {
    // `script` gives kubectl a terminal, as an operator's shell would.
    const cmd = kubectlCommandLine(['-n', ns.name, 'exec', '-it', 'web', '--', 'sh', '-c', 'tty; stty size']);
    const result = await execa('script', ['-qec', `stty cols 91 rows 27; ${cmd}`, '/dev/null'], { timeout: 60_000, reject: false, input: '' });
    assert.equal(result.exitCode, 0, result.stdout + result.stderr);
    assert.match(result.stdout, /\/dev\/pts\/\d+/);
    assert.match(result.stdout, /27 91/);
  });

  it('attach sends stdin to the container and its output back', async () => {
    const attach = kubectlProcess(['-n', ns.name, 'attach', '-i', 'echoer', '-c', 'main'], { stdin: 'pipe' });
    try {
      const seen = readUntil(attach, /got:hello-attach/, 60_000);
      // Until kubectl's stream is up, lines it has not sent yet are buffered by it, not lost.
      attach.stdin!.write('hello-attach\n');
      await seen;
    } finally {
      attach.kill();
      await attach;
    }
  });

  it('port-forward reaches a port inside the pod', async () => {
    const forward = kubectlProcess(['-n', ns.name, 'port-forward', 'pod/web', ':8080']);
    try {
      const out = await readUntil(forward, /Forwarding from 127\.0\.0\.1:(\d+)/, 60_000);
      const port = /Forwarding from 127\.0\.0\.1:(\d+)/.exec(out)![1];
      const res = await fetch(`http://127.0.0.1:${port}/index.html`, { signal: AbortSignal.timeout(15_000) });
      assert.equal((await res.text()).trim(), 'hello-forward');
    } finally {
      forward.kill();
      await forward;
    }
  });

  it('cp copies files into and out of a container', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'stove-e2e-cp-'));
    try {
      await writeFile(join(dir, 'in.txt'), 'copied in\n');
      await kubectl(['cp', join(dir, 'in.txt'), `${ns.name}/web:/tmp/in.txt`]);
      assert.equal(await kubectl(['-n', ns.name, 'exec', 'web', '--', 'cat', '/tmp/in.txt']), 'copied in');
      await kubectl(['cp', `${ns.name}/web:/www/index.html`, join(dir, 'out.html')]);
      assert.equal(await readFile(join(dir, 'out.html'), 'utf8'), 'hello-forward\n');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
