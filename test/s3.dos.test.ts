/**
 * S³ under hostile sizes and files: a huge tool argument costs linear time in the rules' patterns, a request with
 * more than 64 stage decisions still gets an answer (its stage header stays ASCII), and a SKILL.md that is a FIFO
 * or megabytes long is refused at start-up with one line (exit 2), never read.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { addressesIn, rulesCheck, secretsIn } from '../src/s3/checks/rules.ts';
import { loadSkill, loadSkills } from '../src/s3/skill-file.ts';
import { SafekeepError } from '../src/util/errors.ts';
import type { ChatBackend } from '../src/guard/types.ts';
import { s3Script } from './helpers/s3-mock.ts';
import { serveExit } from './helpers/serve-cli.ts';
import { repoRoot } from './helpers/shared.ts';
import { startProxy } from './helpers/proxy.ts';

const noModel: ChatBackend = { name: 'none', callFormat: 'llama3', chat: () => Promise.reject(new Error('no model')) };

test('rules: a 40 KB adversarial tool argument is scanned in linear time (no pattern backtracks over it)', async () => {
  const toolRules = loadSkill(join(repoRoot, 'skills', 'tool-rules'));
  const n = 40 * 1024;
  const hostile = [
    'a'.repeat(n), 'a.'.repeat(n / 2), `${'a'.repeat(n)}@`, '@a'.repeat(n / 2), `x@${'a.'.repeat(n / 2)}`, '1'.repeat(n), '1 '.repeat(n / 2),
    `${'1'.repeat(8)}${'('.repeat(n)}`, 'sk-'.repeat(n / 3), `password${' '.repeat(n)}`, `https://${'a'.repeat(n)}`,
  ];
  for (const s of hostile) {
    const t0 = performance.now();
    addressesIn({ body: s });
    secretsIn(s);
    await rulesCheck(toolRules, {
      stage: 'tool_selection', tools: [], calls: [{ id: 'c', name: 'GmailSendEmail', arguments: { to: s, body: s } }],
      messages: [{ role: 'user', content: s }, { role: 'assistant', content: '', tool_calls: [{ id: 'r', type: 'function', function: { name: 'GmailReadEmail', arguments: '{}' } }] }],
    }, { backend: noModel });
    const ms = performance.now() - t0;
    // a generous safety bound: the quadratic e-mail pattern took seconds on the first of these
    assert.ok(ms < 2000, `${s.slice(0, 12)}…: ${Math.round(ms)} ms`);
  }
  // the scanner finds what the pattern found
  assert.deepEqual(addressesIn({ a: 'to x@y@z.com, and a.b+c@mail.example.org.' }), ['y@z.com', 'a.b+c@mail.example.org']);
});

test('proxy (S³): more than 64 stage decisions → 200 with an ASCII stage header, not a 500 after the upstream was called', async (t) => {
  const { up, url } = await startProxy(t, s3Script, { skills: loadSkills([join(repoRoot, 'skills')]), maxFreshObservations: 100 });
  const tool = { type: 'function', function: { name: 'WeatherGetForecast', description: 'forecast', parameters: { type: 'object', properties: { city: { type: 'string' } } } } };
  const messages = [{ role: 'user', content: 'What is the weather in these cities?' }, ...Array.from({ length: 70 }, (_, i) => [
    { role: 'assistant', content: '', tool_calls: [{ id: `w${i}`, type: 'function', function: { name: 'WeatherGetForecast', arguments: `{"city":"C${i}"}` } }] },
    { role: 'tool', tool_call_id: `w${i}`, name: 'WeatherGetForecast', content: `{"city":"C${i}","forecast":"sunny"}` },
  ]).flat()];
  const r = await fetch(`${url}/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', messages, tools: [tool] }),
  });
  assert.equal(r.status, 200, await r.clone().text());
  const stages = r.headers.get('x-safekeep-stages')!;
  assert.match(stages, /^input=pass,(?:tool_observation=pass,){63}\.\.\. \d+ more$/);
  assert.match(stages, /^[\x20-\x7e]+$/);
  await r.text();
});

function skillFolder(t: import('node:test').TestContext): string {
  const root = mkdtempSync(join(tmpdir(), 'safekeep-skillfile-'));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const dir = join(root, 'demo');
  mkdirSync(dir);
  return dir;
}

test('SKILL.md: a FIFO is refused without opening it for a blocking read; an over-large one is refused before it is read', async (t) => {
  const fifo = skillFolder(t);
  execFileSync('mkfifo', [join(fifo, 'SKILL.md')]);
  assert.throws(() => loadSkill(fifo), (e: unknown) => e instanceof SafekeepError && /SKILL\.md: a FIFO, not a regular file/.test(e.message));
  assert.throws(() => loadSkills([fifo]), (e: unknown) => e instanceof SafekeepError && /a FIFO/.test(e.message));
  const big = skillFolder(t);
  cpSync(join(repoRoot, 'skills', 'safekeep-judge', 'SKILL.md'), join(big, 'SKILL.md'));
  writeFileSync(join(big, 'SKILL.md'), '---\nname: demo\nstage: input\ndescription: d\ncheck: llm\nprompt: builtin:safekeep-judge\nmitigation: block\nrecovery: r\n---\nBody.\n');
  loadSkill(big);
  truncateSync(join(big, 'SKILL.md'), 54 * 1024 * 1024);
  assert.throws(() => loadSkill(big), (e: unknown) => e instanceof SafekeepError && /bytes, more than the 1048576/.test(e.message));
  // a resource file is held to the same rules
  const res = skillFolder(t);
  writeFileSync(join(res, 'SKILL.md'), '---\nname: demo\nstage: output\ndescription: d\nresources: [rules.txt]\ncheck: rules\nrules: rules.txt\nmitigation: block\nrecovery: r\n---\nBody.\n');
  writeFileSync(join(res, 'rules.txt'), 'rule r\n  trigger *\n  check pattern "x"\n  reason "x"\nend\n');
  loadSkill(res);
  truncateSync(join(res, 'rules.txt'), 2 * 1024 * 1024);
  assert.throws(() => loadSkill(res), (e: unknown) => e instanceof SafekeepError && /rules\.txt.*bytes, more than the 1048576/.test(e.message));
  // the CLI: one line, exit 2
  const cli = await serveExit(['--upstream', 'http://127.0.0.1:9', '--skills', fifo]);
  assert.equal(cli.code, 2);
  assert.match(cli.stderr, /a FIFO, not a regular file/);
});
