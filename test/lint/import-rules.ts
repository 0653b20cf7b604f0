/**
 * The import rules of docs/architecture.md, checked over src/: `make lint` runs this file as it is
 * (Node strips the types) and fails on any violation. TypeScript's own parser reads the imports:
 * `import` and `import type`, re-exports, `import()` and `typeof import()`, all of which count.
 *
 * A module is a directory under src/ (`cri`, `sandbox`, …); src/daemon.ts and src/main.ts are the
 * modules `daemon` and `main`.
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
  why: string;
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
  onlyFrom('streaming', ['daemon', 'cri'], 'streaming/ sits below cri/ (cri/streaming.ts hands it its parameters): the domain does not import it'),
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

/** Every broken rule, one line each; none when the imports follow the rules. */
export function violations(imports: readonly Import[]): string[] {
  const out: string[] = [];
  // A type-only import counts too: it still ties the two files' (and modules') designs.
  const moduleEdges = imports.map((i): [string, string] => [moduleOf(i.from), moduleOf(i.to)]).filter(([a, b]) => a !== b);
  for (const cycle of cycles(moduleEdges)) out.push(`import cycle between modules: ${cycle.join(', ')}`);
  for (const cycle of cycles(imports.map((i): [string, string] => [i.from, i.to]))) out.push(`import cycle between files: ${cycle.join(', ')}`);
  for (const i of imports) {
    for (const rule of RULES) if (rule.broken(i)) out.push(`${i.from} imports ${i.to}: ${rule.why}`);
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
  const root = resolve(dirname(fileURLToPath(import.meta.url)), '../../src');
  const found = violations(readImports(root));
  for (const line of found) console.error(`import rules: ${line}`);
  if (found.length > 0) {
    console.error('import rules: see docs/architecture.md, "Import rules"');
    process.exit(1);
  }
}
