import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseArgs } from '../src/cli/args.ts';
import { SafekeepError } from '../src/util/errors.ts';

test('parseArgs: values, booleans, positionals, = form', () => {
  const a = parseArgs(['x', '--model', 'm', '--no-stop', '--alpha=4'], { values: ['model', 'alpha'], booleans: ['no-stop'] });
  assert.deepEqual(a.positionals, ['x']);
  assert.equal(a.values.get('model'), 'm');
  assert.equal(a.values.get('alpha'), '4');
  assert.ok(a.booleans.has('no-stop'));
});

test('parseArgs: unknown flag and missing value are user errors', () => {
  assert.throws(() => parseArgs(['--bogus'], { values: ['model'] }), SafekeepError);
  assert.throws(() => parseArgs(['--model'], { values: ['model'] }), SafekeepError);
});

import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { helpText, flagSpec, type FlagTable } from '../src/cli/args.ts';
import { main } from '../src/cli/main.ts';
import { repoRoot } from '../src/data/locate.ts';

/**
 * run main() in-process with what it prints collected. Not by patching process.stdout: the test runner reports
 * through it, and a report written during the patch was swallowed (tests vanished from the run without failing).
 */
async function capture(argv: string[]): Promise<{ code: number; out: string }> {
  let out = '';
  const code = await main(argv, (s) => { out += s; });
  return { code, out };
}

test('flag table: one source for parsing and help (value/boolean kinds, defaults, example)', () => {
  const t: FlagTable = {
    usage: 'x --a N [--b]',
    flags: [{ name: 'a', value: 'N', default: '3', help: 'the a' }, { name: 'b', boolean: true, help: 'the b' }],
    example: 'x --a 4 --b',
  };
  const a = parseArgs(['--a', '4', '--b', 'pos'], t);
  assert.equal(a.values.get('a'), '4');
  assert.ok(a.booleans.has('b'));
  assert.deepEqual(a.positionals, ['pos']);
  assert.throws(() => parseArgs(['--c'], t), /unknown flag --c/);
  assert.throws(() => parseArgs(['--b=1', '--a'], t), /--a needs a value/);
  const h = helpText('x', 'does x', t);
  assert.match(h, /--a N\s+the a \(default: 3\)/);
  assert.match(h, /--b\s+the b/);
  assert.match(h, /example:\n {2}safekeep x --a 4 --b/);
  assert.throws(() => flagSpec({ ...t, flags: [...t.flags, { name: 'a', help: 'again' }] }), /defined twice/);
});

const commandFiles = readdirSync(join(repoRoot, 'src', 'cli', 'commands')).filter((f) => f.endsWith('.ts')).map((f) => f.slice(0, -3));

test('every command exports a flag table and answers --help and -h with flags, defaults and one example, exit 0', async () => {
  assert.ok(commandFiles.length >= 16);
  for (const name of commandFiles) {
    const mod = (await import(join(repoRoot, 'src', 'cli', 'commands', `${name}.ts`))) as { flags?: FlagTable };
    assert.ok(mod.flags, `${name} exports no flag table`);
    flagSpec(mod.flags); // no duplicates
    const words = name.split('-').length === 2 && ['data', 'guard'].includes(name.split('-')[0]!) ? name.split('-') : [name];
    for (const h of ['--help', '-h']) {
      const r = await capture([...words, h]);
      assert.equal(r.code, 0, `${name} ${h}`);
      assert.match(r.out, /^usage: safekeep /, name);
      assert.match(r.out, /\nexample:\n {2}safekeep \S+/, name);
      for (const f of mod.flags.flags) assert.ok(r.out.includes(`--${f.name}`), `${name} --help lacks --${f.name}`);
      if (mod.flags.flags.some((f) => f.default !== undefined)) assert.match(r.out, /\(default: /, name);
    }
  }
});

test('`safekeep render --help` from the shell: exit 0, prints its flags and defaults', () => {
  const r = spawnSync(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), 'render', '--help'], { encoding: 'utf8', cwd: repoRoot });
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /--config chatbot\|\+role\|\+instructions\|agent\|chatbot-long/);
  assert.match(r.stdout, /--limit N\s+number of pairs \(default: 3\)/);
});

test('`safekeep data --help` lists the data subcommands, exit 0', async () => {
  const r = await capture(['data', '--help']);
  assert.equal(r.code, 0);
  assert.match(r.out, /data check/);
  assert.match(r.out, /data pull/);
});
