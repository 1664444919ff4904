/**
 * Minimal, strict flag parser shared by every command: `--name value`, `--flag`, `--name=value`.
 * Unknown flags are an error (a typo must not silently fall back to a default).
 *
 * Each command exports one `flags: FlagTable` that is the source of both its parsing (`parseArgs(argv, flags)`) and
 * its `--help` text (`helpText`); `main.ts` answers `--help`/`-h` for any command that exports a table, so a new
 * command or flag only needs a row in that table. Groups shared by several commands (engine flags, pipeline flags)
 * are arrays of rows spread into each table.
 */
import { SafekeepError } from '../util/errors.ts';

/** One row of a command's flag table. */
export interface FlagDef {
  name: string;
  /** a switch (no value); otherwise the flag takes a value */
  boolean?: boolean;
  /** placeholder for the value in help (default 'X') */
  value?: string;
  /** what the command uses when the flag is absent, as shown in help */
  default?: string;
  help: string;
  /** a value flag that may be given more than once: its values joined with ',' (a comma list's items; else the last wins) */
  repeatable?: boolean;
}

/** A command's flag table: parsing and `--help` both read it. */
export interface FlagTable {
  /** synopsis after `safekeep `, e.g. `render --model M [flags]` */
  usage: string;
  flags: readonly FlagDef[];
  /** one runnable example (without the leading `safekeep `) */
  example: string;
  /** what the positional arguments are, when the command takes any */
  positionals?: string;
}

/** Legacy form: bare name lists (still accepted, e.g. by bench scripts). */
interface FlagSpec {
  /** flags that take a value */
  values?: readonly string[];
  /** boolean flags */
  booleans?: readonly string[];
  /** value flags whose repeats are joined with ',' */
  repeatable?: readonly string[];
}

export interface ParsedArgs {
  positionals: string[];
  values: Map<string, string>;
  booleans: Set<string>;
}

function isTable(spec: FlagSpec | FlagTable): spec is FlagTable {
  return Array.isArray((spec as FlagTable).flags);
}

/** The name lists a table parses with. Duplicate rows are a programming error (two meanings for one flag). */
export function flagSpec(table: FlagTable): FlagSpec {
  const seen = new Set<string>();
  for (const f of table.flags) {
    if (seen.has(f.name)) throw new Error(`flag table '${table.usage}': --${f.name} defined twice`);
    if (f.name === 'help') throw new Error(`flag table '${table.usage}': --help is reserved`);
    seen.add(f.name);
  }
  return {
    values: table.flags.filter((f) => !f.boolean).map((f) => f.name),
    booleans: table.flags.filter((f) => f.boolean).map((f) => f.name),
    repeatable: table.flags.filter((f) => f.repeatable && !f.boolean).map((f) => f.name),
  };
}

/** Whether argv asks for help (`--help` or `-h` anywhere). */
export function wantsHelp(argv: readonly string[]): boolean {
  return argv.some((a) => a === '--help' || a === '-h');
}

/** `--help` text of a command: usage, summary, every flag with its value placeholder and default, one example. */
export function helpText(name: string, summary: string, table: FlagTable): string {
  const left = (f: FlagDef) => `--${f.name}${f.boolean ? '' : ` ${f.value ?? 'X'}`}`;
  const width = Math.min(34, Math.max(12, ...table.flags.map((f) => left(f).length))) + 2;
  const lines = [`usage: safekeep ${table.usage}`, '', `${name}: ${summary}`];
  if (table.positionals) lines.push('', `arguments: ${table.positionals}`);
  lines.push('', 'flags:');
  for (const f of table.flags) {
    const l = left(f);
    const dflt = f.default !== undefined ? ` (default: ${f.default})` : '';
    lines.push(l.length + 2 > width ? `  ${l}\n  ${' '.repeat(width)}${f.help}${dflt}` : `  ${l.padEnd(width)}${f.help}${dflt}`);
  }
  lines.push(`  ${'--help, -h'.padEnd(width)}this text`);
  lines.push('', 'example:', `  safekeep ${table.example}`);
  return lines.join('\n') + '\n';
}

export function parseArgs(argv: readonly string[], table: FlagSpec | FlagTable): ParsedArgs {
  const spec = isTable(table) ? flagSpec(table) : table;
  const values = new Map<string, string>();
  const booleans = new Set<string>();
  const positionals: string[] = [];
  const valueFlags = new Set(spec.values ?? []);
  const boolFlags = new Set(spec.booleans ?? []);
  const repeatable = new Set(spec.repeatable ?? []);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (!a.startsWith('--')) { positionals.push(a); continue; }
    const eq = a.indexOf('=');
    const name = eq >= 0 ? a.slice(2, eq) : a.slice(2);
    if (valueFlags.has(name)) {
      const v = eq >= 0 ? a.slice(eq + 1) : argv[++i];
      if (v === undefined) throw new SafekeepError(`--${name} needs a value`);
      const prev = values.get(name);
      values.set(name, prev !== undefined && repeatable.has(name) ? `${prev},${v}` : v);
    } else if (boolFlags.has(name)) {
      booleans.add(name);
    } else {
      const known = [...valueFlags, ...boolFlags].map((f) => `--${f}`).join(', ');
      throw new SafekeepError(`unknown flag --${name} (known: ${known || 'none'}; --help for details)`);
    }
  }
  return { positionals, values, booleans };
}

export function requireValue(args: ParsedArgs, name: string): string {
  const v = args.values.get(name);
  if (v === undefined) throw new SafekeepError(`missing required --${name}`);
  return v;
}

export function numberValue(args: ParsedArgs, name: string, fallback?: number): number {
  const v = args.values.get(name);
  if (v === undefined) {
    if (fallback === undefined) throw new SafekeepError(`missing required --${name}`);
    return fallback;
  }
  // Number('') and Number(' ') are 0: an empty value is a mistake, not zero
  const n = v.trim() === '' ? NaN : Number(v);
  if (!Number.isFinite(n)) throw new SafekeepError(`--${name} must be a number, got '${v}'`);
  return n;
}

/** A value flag restricted to a fixed set of choices. */
/** A positive integer flag (Infinity allowed as the fallback, meaning "no limit"). */
export function positiveIntValue(args: ParsedArgs, name: string, fallback: number): number {
  const n = numberValue(args, name, fallback);
  if (!(Number.isInteger(n) && n >= 1) && n !== Infinity) throw new SafekeepError(`--${name} must be a positive integer, got ${n}`);
  return n;
}

export function choiceValue<T extends string>(args: ParsedArgs, name: string, allowed: readonly T[], fallback: T): T {
  const v = args.values.get(name);
  if (v === undefined) return fallback;
  if (!(allowed as readonly string[]).includes(v)) throw new SafekeepError(`--${name} must be one of ${allowed.join(', ')}, got '${v}'`);
  return v as T;
}
