/**
 * `safekeep <command> [flags]`. Each command lives in `commands/<name>.ts` and exports
 * `summary` (one line for help) and `run(argv) => exit code`. Commands are loaded lazily so that
 * `safekeep render` does not pay for onnxruntime start-up.
 * Errors a user can cause (SafekeepError) print one line and exit with their code; anything else is a bug
 * and prints the stack (set SAFEKEEP_DEBUG=1 to get stacks for user errors too).
 */
import { readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isSafekeepError } from '../util/errors.ts';
import { helpText, wantsHelp, type FlagTable } from './args.ts';

interface Command {
  summary: string;
  /** the command's flag table: source of its parsing and of `--help` (answered here, generically) */
  flags?: FlagTable;
  run(argv: string[]): Promise<number>;
}

const commandsDir = join(dirname(fileURLToPath(import.meta.url)), 'commands');

/** Command names: file `commands/data-pull.ts` is `safekeep data pull` → we map spaces to dashes. */
function listCommands(): string[] {
  return readdirSync(commandsDir)
    .filter((f) => f.endsWith('.ts'))
    .map((f) => f.slice(0, -3))
    .sort();
}

async function loadCommand(name: string): Promise<Command | null> {
  if (!listCommands().includes(name)) return null;
  return (await import(join(commandsDir, `${name}.ts`))) as Command;
}

async function help(): Promise<string> {
  const lines = ['usage: safekeep <command> [flags]', '', 'commands:'];
  for (const name of listCommands()) {
    const c = await loadCommand(name);
    lines.push(`  ${name.replace(/-/g, ' ').padEnd(16)} ${c?.summary ?? ''}`);
  }
  return lines.join('\n');
}

/** `out` receives what main itself prints (help texts); tests pass their own instead of patching process.stdout. */
export async function main(argv: string[], out: (text: string) => void = (t) => { process.stdout.write(t); }): Promise<number> {
  try {
    const [first, second, ...rest] = argv;
    if (!first || first === '--help' || first === '-h' || first === 'help') {
      out((await help()) + '\n');
      return first ? 0 : 2;
    }
    // two-word commands first (`data pull`, `guard eval`), then one-word
    let cmd = second ? await loadCommand(`${first}-${second}`) : null;
    let args = rest;
    let name = `${first} ${second}`;
    if (!cmd) {
      name = first;
      cmd = await loadCommand(first);
      args = second === undefined ? [] : [second, ...rest];
    }
    const group = listCommands().filter((c) => c.startsWith(`${first}-`));
    if (!cmd && group.length && (second === undefined || wantsHelp([second]))) {
      // `safekeep data --help`: the group's subcommands
      const lines = [`usage: safekeep ${first} <${group.map((c) => c.slice(first.length + 1)).join('|')}> [flags]`, ''];
      for (const c of group) lines.push(`  ${c.replace(/-/g, ' ').padEnd(16)} ${(await loadCommand(c))?.summary ?? ''}`);
      out(lines.join('\n') + '\n');
      return second === undefined ? 2 : 0;
    }
    if (!cmd) {
      process.stderr.write(`safekeep: unknown command '${first}'\n${await help()}\n`);
      return 2;
    }
    if (wantsHelp(args)) {
      if (!cmd.flags) {
        out(`safekeep ${name}: ${cmd.summary}\n(this command has no flag table)\n`);
        return 0;
      }
      out(helpText(name, cmd.summary, cmd.flags));
      return 0;
    }
    return await cmd.run(args);
  } catch (e) {
    if (isSafekeepError(e)) {
      process.stderr.write(`safekeep: ${e.message}\n`);
      if (process.env.SAFEKEEP_DEBUG) process.stderr.write(`${e.stack}\n`);
      return e.exitCode;
    }
    throw e;
  }
}
