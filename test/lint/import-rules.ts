/**
 * The import rules of docs/architecture.md, checked over src/: `make lint` runs this file as it is
 * (Node strips the types) and fails on any violation. TypeScript's own parser reads the imports:
 * `import` and `import type`, re-exports, `import()` and `typeof import()`, all of which count.
 *
 * A module is a directory under src/ (`cri`, `sandbox`, …); src/daemon.ts and src/main.ts are the
 * modules `daemon` and `main`. The layers are read from the diagram of docs/architecture.md, so the
 * page and the check cannot drift apart.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, posix, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

/** One import: files relative to src/, with `/` separators. */
export interface Import {
  from: string;
  to: string;
}

/** Who may import a module, and why (the message of a violation). */
interface Rule {
  why: string | ((i: Import) => string);
  broken(i: Import): boolean;
}

export function moduleOf(file: string): string {
  const [first = '', ...rest] = file.split('/');
  return rest.length === 0 ? first.replace(/\.ts$/, '') : first;
}

/** Only `importers` may import `module`. */
function onlyFrom(module: string, importers: string[], why: string): Rule {
  return { why, broken: (i) => moduleOf(i.to) === module && moduleOf(i.from) !== module && !importers.includes(moduleOf(i.from)) };
}

const RULES: Rule[] = [
  onlyFrom('main', [], 'main.ts is the entry point'),
  onlyFrom('daemon', ['main'], 'daemon.ts is the composition root; only main.ts starts it'),
  onlyFrom('cri', ['daemon', 'main'], 'nothing below cri/ imports cri/'),
  onlyFrom('api', ['daemon', 'main', 'cri', 'cli'], 'nothing below cri/ imports api/'),
  onlyFrom('streaming', ['daemon', 'cri'], 'streaming/ sits below cri/ (cri/exec.ts, attach.ts and port-forward.ts hand it their parameters): the domain does not import it'),
  onlyFrom('pod', ['daemon', 'cri'], 'pod/ coordinates the domain services; they do not import it'),
  {
    why: "sandbox/ does not import container/ (what spans both is pod/'s)",
    broken: (i) => moduleOf(i.from) === 'sandbox' && moduleOf(i.to) === 'container',
  },
  {
    why: "container/ reads sandbox records (sandbox/model.ts, sandbox/resize.ts), not the sandbox service (what spans both is pod/'s)",
    broken: (i) => moduleOf(i.from) === 'container' && moduleOf(i.to) === 'sandbox' && !['sandbox/model.ts', 'sandbox/resize.ts'].includes(i.to),
  },
];

/**
 * The layers of docs/architecture.md, top first: each row of the diagram under "## Layers" that starts
 * at the first column, as the module names (`cri/`, `daemon.ts`) it starts with.
 */
export function layersOf(markdown: string): string[][] {
  const section = markdown.slice(markdown.indexOf('\n## Layers\n'));
  const open = section.indexOf('\n```\n');
  const close = section.indexOf('\n```', open + 4);
  if (!section.startsWith('\n## Layers') || open < 0 || close < 0) throw new Error('no diagram under "## Layers"');
  const rows: string[][] = [];
  for (const line of section.slice(open + 5, close).split('\n')) {
    if (!/^ [a-z]/.test(line)) continue;
    const row: string[] = [];
    for (const token of line.trim().split(/\s+/)) {
      const name = /^([a-z][a-z0-9-]*)(?:\/|\.ts)$/.exec(token)?.[1];
      if (!name) break;
      row.push(name);
    }
    if (row.length > 0) rows.push(row);
  }
  return rows;
}

/** Imports point down the rows: never into a module of the importer's row or of a row above. */
function layerRule(layers: readonly string[][]): Rule {
  const rowOf = new Map(layers.flatMap((row, n) => row.map((m): [string, number] => [m, n])));
  const name = (m: string) => (m === 'main' || m === 'daemon' ? `${m}.ts` : `${m}/`);
  return {
    why: (i) => {
      const [from, to] = [moduleOf(i.from), moduleOf(i.to)];
      const where = rowOf.get(from) === rowOf.get(to) ? 'in the same row as' : 'in a row above';
      return `${name(to)} is ${where} ${name(from)} in the layers of docs/architecture.md (imports point to the rows below)`;
    },
    broken: (i) => {
      const [from, to] = [rowOf.get(moduleOf(i.from)), rowOf.get(moduleOf(i.to))];
      return moduleOf(i.from) !== moduleOf(i.to) && from !== undefined && to !== undefined && to <= from;
    },
  };
}

/** A module with an index.ts is entered through it alone. */
function entranceRule(imports: readonly Import[]): Rule {
  const entered = new Set(imports.flatMap((i) => [i.from, i.to]).filter((f) => /^[^/]+\/index\.ts$/.test(f)).map(moduleOf));
  return {
    why: (i) => `${moduleOf(i.to)}/ is entered through ${moduleOf(i.to)}/index.ts alone`,
    broken: (i) => entered.has(moduleOf(i.to)) && moduleOf(i.from) !== moduleOf(i.to) && i.to !== `${moduleOf(i.to)}/index.ts`,
  };
}

/** Modules the diagram does not place, and names in it that are no module; none when they match. */
export function layoutViolations(layers: readonly string[][], modules: Iterable<string>): string[] {
  const placed = layers.flat();
  const known = new Set(modules);
  const out: string[] = [];
  for (const m of known) if (!placed.includes(m)) out.push(`module ${m} is in no row of the layers in docs/architecture.md`);
  for (const m of new Set(placed)) {
    if (!known.has(m)) out.push(`the layers in docs/architecture.md name ${m}, which is no module of src/`);
    if (placed.indexOf(m) !== placed.lastIndexOf(m)) out.push(`the layers in docs/architecture.md name ${m} more than once`);
  }
  return out;
}

/** The relative imports of one source file (packages and node: builtins are not src/'s business). */
export function importsOf(file: string, text: string): Import[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, false);
  const out: Import[] = [];
  const add = (specifier: string) => {
    if (specifier.startsWith('.')) out.push({ from: file, to: posix.join(posix.dirname(file), specifier).replace(/\.js$/, '.ts') });
  };
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) {
      add(node.moduleSpecifier.text);
    } else if (ts.isExportDeclaration(node) && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier)) {
      add(node.moduleSpecifier.text);
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      const [arg] = node.arguments;
      if (arg && ts.isStringLiteral(arg)) add(arg.text);
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument) && ts.isStringLiteral(node.argument.literal)) {
      add(node.argument.literal.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return out;
}

/** The cycles of a directed graph: its strongly connected components of more than one node, or a node importing itself. */
export function cycles(edges: Iterable<[string, string]>): string[][] {
  const next = new Map<string, Set<string>>();
  for (const [a, b] of edges) {
    if (!next.has(a)) next.set(a, new Set());
    if (!next.has(b)) next.set(b, new Set());
    next.get(a)!.add(b);
  }
  // Tarjan's algorithm, iterative so that a long chain of imports cannot overflow the stack.
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  let counter = 0;
  for (const root of next.keys()) {
    if (index.has(root)) continue;
    const work: { node: string; rest: string[] }[] = [];
    const enter = (node: string) => {
      index.set(node, counter);
      low.set(node, counter++);
      stack.push(node);
      onStack.add(node);
      work.push({ node, rest: [...next.get(node)!] });
    };
    enter(root);
    while (work.length > 0) {
      const top = work[work.length - 1]!;
      const child = top.rest.shift();
      if (child !== undefined) {
        if (!index.has(child)) enter(child);
        else if (onStack.has(child)) low.set(top.node, Math.min(low.get(top.node)!, index.get(child)!));
        continue;
      }
      work.pop();
      const parent = work[work.length - 1];
      if (parent) low.set(parent.node, Math.min(low.get(parent.node)!, low.get(top.node)!));
      if (low.get(top.node) !== index.get(top.node)) continue;
      const component: string[] = [];
      let member: string;
      do {
        member = stack.pop()!;
        onStack.delete(member);
        component.push(member);
      } while (member !== top.node);
      if (component.length > 1 || next.get(top.node)!.has(top.node)) found.push(component.sort());
    }
  }
  return found;
}

/** Every broken rule, one line each; none when the imports follow the rules and the `layers`. */
export function violations(imports: readonly Import[], layers: readonly string[][]): string[] {
  const out: string[] = [];
  // A type-only import counts too: it still ties the two files' (and modules') designs.
  const moduleEdges = imports.map((i): [string, string] => [moduleOf(i.from), moduleOf(i.to)]).filter(([a, b]) => a !== b);
  for (const cycle of cycles(moduleEdges)) out.push(`import cycle between modules: ${cycle.join(', ')}`);
  for (const cycle of cycles(imports.map((i): [string, string] => [i.from, i.to]))) out.push(`import cycle between files: ${cycle.join(', ')}`);
  const rules = [...RULES, layerRule(layers), entranceRule(imports)];
  for (const i of imports) {
    for (const rule of rules) if (rule.broken(i)) out.push(`${i.from} imports ${i.to}: ${typeof rule.why === 'string' ? rule.why : rule.why(i)}`);
  }
  return out;
}

/** The imports of every .ts file under `root`, named relative to it. */
export function readImports(root: string): Import[] {
  const out: Import[] = [];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.ts')) out.push(...importsOf(relative(root, path).split('\\').join('/'), readFileSync(path, 'utf8')));
    }
  };
  walk(root);
  return out;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
  const imports = readImports(join(repo, 'src'));
  const layers = layersOf(readFileSync(join(repo, 'docs/architecture.md'), 'utf8'));
  const modules = new Set(imports.flatMap((i) => [moduleOf(i.from), moduleOf(i.to)]));
  const found = [...layoutViolations(layers, modules), ...violations(imports, layers)];
  for (const line of found) console.error(`import rules: ${line}`);
  if (found.length > 0) {
    console.error('import rules: see docs/architecture.md, "Import rules"');
    process.exit(1);
  }
}
