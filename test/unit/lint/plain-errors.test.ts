/** The plain-error check (test/lint/plain-errors.ts) fails on what it is for and passes src/ as it is. */
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { ALLOWED, check, plainErrorsIn, readSources, type Allowed } from '../../lint/plain-errors.js';
import { toServiceError } from '../../../src/api/errors.js';
import { SyscallError } from '../../../src/platform/mount-helper.js';
import { UntrustedFileError } from '../../../src/platform/safe-file.js';
import { status } from '@grpc/grpc-js';

const SRC = fileURLToPath(new URL('../../../../src', import.meta.url));

describe('plain errors', () => {
  it('finds throw new Error( and error classes outside StoveError, not StoveError itself', () => {
    const text = [
      "if (x) throw new Error('boom');",
      'throw notFound(`pod ${id} not found`);',
      'export class StoveError extends Error {',
      'class LocalError extends Error {}',
      "const e = new Error('kept, not thrown here');",
    ].join('\n');
    assert.deepEqual(
      plainErrorsIn('m/x.ts', text).map((f) => [f.line, f.text]),
      [
        [1, "if (x) throw new Error('boom');"],
        [4, 'class LocalError extends Error {}'],
      ],
    );
  });

  it('fails on a new plain throw, passes one an entry names, and fails on an entry that matches nothing', () => {
    const found = plainErrorsIn('m/x.ts', "throw new Error('internal: ok');\nthrow new Error('reaches a client');");
    const allowed: Allowed[] = [
      { file: 'm/x.ts', text: 'internal: ok', why: 'invariant' },
      { file: 'm/gone.ts', text: 'whatever', why: 'stale' },
    ];
    const problems = check(found, allowed);
    assert.equal(problems.length, 2);
    assert.match(problems[0]!, /src\/m\/x\.ts:2: throw new Error\('reaches a client'\);\n {2}-> throw a StoveError/);
    assert.match(problems[1]!, /src\/m\/gone\.ts "whatever" matches nothing/);
  });

  it('takes the longest matching entry, so that one text may contain another', () => {
    const found = plainErrorsIn('m/x.ts', "throw new Error('missing: a');\nthrow new Error('missing: a.b');");
    const allowed: Allowed[] = [
      { file: 'm/x.ts', text: 'missing: a', why: 'caught' },
      { file: 'm/x.ts', text: 'missing: a.b', why: 'caught' },
    ];
    assert.deepEqual(check(found, allowed), []);
  });

  it('passes src/ as it is, every entry saying why', () => {
    assert.deepEqual(check(readSources(SRC), ALLOWED), []);
    for (const a of ALLOWED) assert.ok(a.why.length > 10, `${a.file} "${a.text}" says why`);
  });

  it('gives the former plain error classes a code chosen on purpose', () => {
    assert.equal(toServiceError(new SyscallError('mount', 1, 'Operation not permitted')).code, status.INTERNAL);
    assert.equal(toServiceError(new UntrustedFileError('"x" is a symbolic link', 'ELOOP')).code, status.FAILED_PRECONDITION);
  });
});
