import assert from 'node:assert/strict';
import { SupplementalGroupsPolicy } from '../../../src/gen/runtime/v1/api.js';
import { parseGroup, parsePasswd, resolveUser, userRequestFrom, type UserRequest } from '../../../src/oci/user.js';
import { throwsKind } from './helpers.js';

const PASSWD = `root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
# a comment

default-user:x:1000:1000::/home/default-user:/bin/sh
www:x:33:33:www:/var/www:/bin/false
broken line
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
`;

const GROUP = `root:x:0:
daemon:x:1:
wheel:x:10:root,default-user
default-user:x:1000:
group-defined-in-image:x:50000:default-user
www-data:x:33:www
staff:x:50:
nogroup:x:65534:
`;

describe('resolveUser', () => {
  it('parses passwd and group, skipping comments and malformed lines', () => {
    assert.deepEqual(parsePasswd(PASSWD).map((p) => p.name), ['root', 'daemon', 'default-user', 'www', 'nobody']);
    assert.deepEqual(parseGroup(GROUP).find((g) => g.name === 'wheel'), { name: 'wheel', gid: 10, members: ['root', 'default-user'] });
  });

  const cases: { name: string; req: UserRequest; want: { uid: number; gid: number; additionalGids: number[]; username?: string } }[] = [
    { name: 'nothing → root, with root\'s groups', req: {}, want: { uid: 0, gid: 0, additionalGids: [0, 10], username: 'root' } },
    { name: 'run_as_user known → its primary group and groups', req: { runAsUser: 1000n }, want: { uid: 1000, gid: 1000, additionalGids: [10, 1000, 50000], username: 'default-user' } },
    { name: 'run_as_user unknown → gid 0', req: { runAsUser: 4242n }, want: { uid: 4242, gid: 0, additionalGids: [0] } },
    { name: 'run_as_user + run_as_group', req: { runAsUser: 1000n, runAsGroup: 50n }, want: { uid: 1000, gid: 50, additionalGids: [10, 50, 50000], username: 'default-user' } },
    { name: 'run_as_username', req: { runAsUsername: 'www' }, want: { uid: 33, gid: 33, additionalGids: [33], username: 'www' } },
    { name: 'run_as_username wins over run_as_user', req: { runAsUsername: 'www', runAsUser: 1000n }, want: { uid: 33, gid: 33, additionalGids: [33], username: 'www' } },
    { name: 'image User uid', req: { imageUser: '33' }, want: { uid: 33, gid: 33, additionalGids: [33], username: 'www' } },
    { name: 'image User name', req: { imageUser: 'nobody' }, want: { uid: 65534, gid: 65534, additionalGids: [65534], username: 'nobody' } },
    { name: 'image User uid:gid (no lookup needed)', req: { imageUser: '1234:5678' }, want: { uid: 1234, gid: 5678, additionalGids: [5678] } },
    { name: 'image User name:group', req: { imageUser: 'www:staff' }, want: { uid: 33, gid: 50, additionalGids: [33, 50], username: 'www' } },
    { name: 'image User uid:group', req: { imageUser: '1000:staff' }, want: { uid: 1000, gid: 50, additionalGids: [10, 50, 50000], username: 'default-user' } },
    { name: 'run_as_user overrides the image User', req: { runAsUser: 33n, imageUser: 'nobody' }, want: { uid: 33, gid: 33, additionalGids: [33], username: 'www' } },
    {
      name: 'supplemental groups merged (critest SupplementalGroupsPolicy=Merge)',
      req: { runAsUser: 1000n, supplementalGroups: [1234n] },
      want: { uid: 1000, gid: 1000, additionalGids: [10, 1000, 1234, 50000], username: 'default-user' },
    },
    {
      name: 'Strict: only the configured groups (critest SupplementalGroupsPolicy=Strict)',
      req: { runAsUser: 1000n, supplementalGroups: [1234n], supplementalGroupsPolicy: SupplementalGroupsPolicy.Strict },
      want: { uid: 1000, gid: 1000, additionalGids: [1000, 1234], username: 'default-user' },
    },
  ];
  for (const c of cases) {
    it(c.name, () => assert.deepEqual(resolveUser(PASSWD, GROUP, c.req), c.want));
  }

  it('works without /etc/passwd and /etc/group for numeric ids', () => {
    assert.deepEqual(resolveUser(null, null, { runAsUser: 1000n, supplementalGroups: [5n] }), { uid: 1000, gid: 0, additionalGids: [0, 5] });
    assert.deepEqual(resolveUser(null, null, { imageUser: '7:8' }), { uid: 7, gid: 8, additionalGids: [8] });
  });

  it('a name that does not exist is a clear InvalidArgument error', () => {
    throwsKind(() => resolveUser(PASSWD, GROUP, { runAsUsername: 'ghost' }), 'InvalidArgument', /unable to find user ghost: no matching entries in passwd file/);
    throwsKind(() => resolveUser(null, null, { imageUser: 'app' }), 'InvalidArgument', /unable to find user app.*no \/etc\/passwd/);
    throwsKind(() => resolveUser(PASSWD, GROUP, { imageUser: 'www:ghosts' }), 'InvalidArgument', /unable to find group ghosts: no matching entries in group file/);
  });

  it('run_as_group without a user is InvalidArgument; bad ids too', () => {
    throwsKind(() => resolveUser(PASSWD, GROUP, { runAsGroup: 5n, imageUser: 'www' }), 'InvalidArgument', /run_as_group 5 is specified without run_as_user/);
    throwsKind(() => resolveUser(PASSWD, GROUP, { runAsUser: -1n }), 'InvalidArgument', /invalid uid -1/);
    throwsKind(() => resolveUser(PASSWD, GROUP, { runAsUser: 2n ** 31n }), 'InvalidArgument', /invalid uid/);
    throwsKind(() => resolveUser(PASSWD, GROUP, { imageUser: 'a:b:c' }), 'InvalidArgument', /invalid image User/);
  });

  it('reads the request from a security context and the image', () => {
    const req = userRequestFrom(
      {
        runAsUser: { value: 1000n },
        runAsGroup: undefined,
        runAsUsername: '',
        supplementalGroups: [1n],
        supplementalGroupsPolicy: SupplementalGroupsPolicy.Strict,
      } as never,
      { User: 'nobody' },
    );
    assert.deepEqual(req, {
      runAsUser: 1000n,
      runAsUsername: undefined,
      runAsGroup: undefined,
      imageUser: 'nobody',
      supplementalGroups: [1n],
      supplementalGroupsPolicy: SupplementalGroupsPolicy.Strict,
    });
  });
});
