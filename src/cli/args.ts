/**
 * Minimal, strict flag parser shared by every command: `--name value`, `--flag`, `--name=value`.
 * Unknown flags are an error (a typo must not silently fall back to a default).
 */
import { SafekeepError } from '../util/errors.ts';

export interface FlagSpec {
  /** flags that take a value */
  values?: readonly string[];
  /** boolean flags */
  booleans?: readonly string[];
}

export interface ParsedArgs {
  positionals: string[];
  values: Map<string, string>;
  booleans: Set<string>;
}

export function parseArgs(argv: readonly string[], spec: FlagSpec): ParsedArgs {
  const values = new Map<string, string>();
  const booleans = new Set<string>();
  const positionals: string[] = [];
  const valueFlags = new Set(spec.values ?? []);
  const boolFlags = new Set(spec.booleans ?? []);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (!a.startsWith('--')) { positionals.push(a); continue; }
    const eq = a.indexOf('=');
    const name = eq >= 0 ? a.slice(2, eq) : a.slice(2);
    if (valueFlags.has(name)) {
      const v = eq >= 0 ? a.slice(eq + 1) : argv[++i];
      if (v === undefined) throw new SafekeepError(`--${name} needs a value`);
      values.set(name, v);
    } else if (boolFlags.has(name)) {
      booleans.add(name);
    } else {
      const known = [...valueFlags, ...boolFlags].map((f) => `--${f}`).join(', ');
      throw new SafekeepError(`unknown flag --${name} (known: ${known || 'none'})`);
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
  const n = Number(v);
  if (!Number.isFinite(n)) throw new SafekeepError(`--${name} must be a number, got '${v}'`);
  return n;
}
