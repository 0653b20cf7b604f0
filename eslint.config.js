// Lint: typescript-eslint with type information, for what tsc lets through in async code: promises
// nobody awaits, promises where a callback is expected, values of type any flowing on unchecked.
// Style is not linted (no rule here should fail a build over layout or taste).
import tseslint from 'typescript-eslint';

/** The CRI config messages the records persist, and the messages and enums they are made of. */
const CRI_CONFIG_TYPES = [
  'ContainerConfig',
  'PodSandboxConfig',
  'LinuxPodSandboxConfig',
  'LinuxContainerResources',
  'LinuxContainerSecurityContext',
  'HugepageLimit',
  'DNSConfig',
  'PortMapping',
  'Protocol',
  'Mount',
  'MountPropagation',
  'Device',
  'Capability',
  'NamespaceOption',
  'NamespaceMode',
  'IDMapping',
  'SecurityProfile',
  'SecurityProfile_ProfileType',
  'SupplementalGroupsPolicy',
  'Signal',
  // ContainerConfig.image: the record keeps which runtime handler's image store the image is in.
  'ImageSpec',
];

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'src/gen/**'] },
  {
    files: ['**/*.ts'],
    extends: [tseslint.configs.recommendedTypeChecked],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      // tsc's noUnusedLocals/noUnusedParameters report these already.
      '@typescript-eslint/no-unused-vars': 'off',
      // An async function without await still returns a promise on purpose (an interface wants one).
      '@typescript-eslint/require-await': 'off',
      // A `!` that tsc does not need is harmless; removing them all is churn.
      '@typescript-eslint/no-unnecessary-type-assertion': 'off',
      // `const self = this` for a callback that gets its own `this` (prom-client's collect) is fine.
      '@typescript-eslint/no-this-alias': 'off',
      // Wire protocols compare enum members with the numbers they arrive as.
      '@typescript-eslint/no-unsafe-enum-comparison': 'off',
      // Taste, and wrong for a variable a closure reads before its one assignment.
      'prefer-const': 'off',
      // Passing on a caught `unknown` as it came is right.
      '@typescript-eslint/prefer-promise-reject-errors': 'off',
    },
  },
  {
    // One way to start a child process: src/platform/processes.ts (docs/architecture.md, Import rules).
    // Only it and the two helpers' launchers may reach child_process; execa is for tests.
    files: ['src/**/*.ts'],
    ignores: ['src/platform/processes.ts', 'src/platform/spawn-helper.ts', 'src/platform/mount-helper.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: ['node:child_process', 'child_process', 'execa'].map((name) => ({
            name,
            message: 'start processes with runCommand or startProcess from src/platform/processes.ts',
          })),
        },
      ],
      'no-restricted-syntax': [
        'error',
        {
          selector: 'ImportExpression[source.value=/^(node:)?child_process$|^execa$/]',
          message: 'start processes with runCommand or startProcess from src/platform/processes.ts',
        },
        // The ESM namespace of node:http loads Node's bundled undici, ~12 MiB the daemon would keep.
        {
          selector: "ImportDeclaration[importKind='value'][source.value=/^(node:)?http$/], ImportExpression[source.value=/^(node:)?http$/]",
          message: "take node:http with process.getBuiltinModule('node:http') (types: import type)",
        },
      ],
    },
  },
  {
    // The wire boundary (docs/architecture.md): outside cri/, api/ and cli/ the CRI wire types are used
    // only for the config messages the records keep verbatim, their parts and enums. Requests,
    // responses, statuses, stats, metrics and events are read and built in cri/. A name missing from
    // CRI_CONFIG_TYPES is a decision: add it only for a part of a persisted config. (typescript-eslint's
    // copy of the rule, so that it adds to the child_process rule above instead of replacing it.)
    files: ['src/**/*.ts'],
    ignores: ['src/cri/**', 'src/api/**', 'src/cli/**', 'src/gen/**'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['**/gen/runtime/**'],
              allowImportNames: CRI_CONFIG_TYPES,
              message: 'below cri/ only the CRI config messages and their parts may be used; convert in cri/ (docs/architecture.md, "The wire boundary")',
            },
          ],
        },
      ],
    },
  },
  {
    // Tests read JSON and wire payloads loosely and print whatever they compare.
    files: ['test/**/*.ts', 'bench/**/*.ts'],
    rules: {
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/restrict-template-expressions': 'off',
    },
  },
);
