/**
 * `safekeep data pull agentharm` against a mock hub on 127.0.0.1 (test/helpers/mockHub.ts): behaviors from the
 * requested revision, tool sources from the pinned tools revision, tools.json converted from the Python `@tool`s
 * (checked field by field, and against ../shared's tools.json for the same tools when present), the copy loads as
 * pairs, a second run downloads nothing, a failed run leaves nothing under the dataset's name (so a good copy
 * elsewhere is still found) and is resumed by the next, and the CLI reports errors with exit 2.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startMockHub } from './helpers/mockHub.ts';
import { sharedPath } from './helpers/shared.ts';
import { AGENTHARM_REPO, AGENTHARM_TOOLS_REVISION, pullAgentHarm } from '../src/data/pull.ts';
import { parseDocstring, pythonToolSpecs, pythonTypeToSchema } from '../src/data/agentharm-tools.ts';
import { loadPairSet } from '../src/data/load.ts';
import { locateDataset } from '../src/data/locate.ts';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { repoRoot } from './helpers/shared.ts';

const execFileP = promisify(execFile);

const tool = (name: string, sig: string, doc: string): string => `from inspect_ai.tool import Tool, tool


@tool
def ${name}() -> Tool:
    async def run(${sig}) -> str:
        """
${doc.split('\n').map((l) => (l ? `        ${l}` : '')).join('\n')}
        """
        return "ok"

    return run
`;

const SEND_EMAIL = tool('send_email', 'to: str, subject: str, body: str, attachments: list[str]', `Send an email with the given message to a recipient..

Args:
    to: The email of the recipient. Only one recipient is supported.
    subject: The subject line of the email (optional).
    body: The message to be sent in the body of the email.
    attachments: List of files you want to attach to the email (optional).

Returns:
    A message indicating if the email was sent successfully or not.`);

const GET_LATEST_EMAILS = tool('get_latest_emails', 'email_count: int, user_email: str', `Get the latest emails from the mailbox.

Args:
    email_count: The number of latest emails to retrieve
    user_email: The email of the user to retrieve the emails for

Returns:
    A list of emails.`);

const ONION = tool('query_onion_search', `
        request: str,
        max_results: int = 5,
        region: Optional[str] = None,
    `, `Search the onion network
for a request.

Args:
    request: The request to search for,
        possibly long.
    max_results (int): How many results.
    region: Restrict to a region.`);

const GOOGLE = tool('query_google_search', 'request: str', `Search google.

Args:
    request: The request to search for`);

const behaviors = (kind: string, rows: { id: string; prompt: string; tf: string[] }[]): Buffer =>
  Buffer.from(JSON.stringify({
    canary_guid: 'x',
    behaviors: rows.map((r) => ({ id: r.id, id_original: '1', detailed_prompt: true, hint_included: false, name: `n${r.id}`, category: 'Fraud', prompt: `${kind} ${r.prompt}`, target_functions: r.tf, grading_function: 'g' })),
  }));

const files: Record<string, Buffer> = {
  'README.md': Buffer.from('# AgentHarm (mock)\n'),
  'LICENSE': Buffer.from('MIT (mock)\n'),
  'benchmark/harmful_behaviors_test_public.json': behaviors('harmful', [
    { id: '1-1', prompt: 'a', tf: ['query_onion_search', 'send_email'] },
    { id: '1-2', prompt: 'b', tf: ['get_latest_emails', 'send_email'] },
  ]),
  'benchmark/benign_behaviors_test_public.json': behaviors('benign', [
    { id: '1-1', prompt: 'a', tf: ['query_google_search', 'send_email'] },
    { id: '1-2', prompt: 'b', tf: ['get_latest_emails', 'send_email'] },
  ]),
  'benchmark/harmful_behaviors_validation.json': behaviors('harmful', [{ id: '2-1', prompt: 'c', tf: ['send_email'] }]),
  'benchmark/benign_behaviors_validation.json': behaviors('benign', [{ id: '2-1', prompt: 'c', tf: ['send_email'] }]),
  'benchmark/chat_public_test.json': Buffer.from(JSON.stringify({ behaviors: [] })),
  'benchmark/harmful_grading_functions.py': Buffer.from('# not fetched\n'),
  'benchmark/harmful_tools/__init__.py': Buffer.from('from .send_email import send_email\n'),
  'benchmark/harmful_tools/send_email.py': Buffer.from(SEND_EMAIL),
  'benchmark/harmful_tools/get_latest_emails.py': Buffer.from(GET_LATEST_EMAILS),
  'benchmark/harmful_tools/query_onion_search.py': Buffer.from(ONION),
  'benchmark/benign_tools/send_email.py': Buffer.from(SEND_EMAIL),
  'benchmark/benign_tools/get_latest_emails.py': Buffer.from(GET_LATEST_EMAILS),
  'benchmark/benign_tools/query_google_search.py': Buffer.from(GOOGLE),
};

test('python tool conversion: types, defaults/Optional not required, docstring description and args', () => {
  const [spec] = pythonToolSpecs(ONION, 'query_onion_search.py');
  assert.deepEqual(spec, {
    type: 'function',
    function: {
      name: 'query_onion_search',
      description: 'Search the onion network for a request.',
      parameters: {
        type: 'object',
        properties: {
          request: { type: 'string', description: 'The request to search for, possibly long.' },
          max_results: { type: 'integer', description: 'How many results.' },
          region: { type: 'string', description: 'Restrict to a region.' },
        },
        required: ['request'],
      },
    },
  });
  // no return annotations, a parameterised outer function, a blank line after the decorator
  const bare = `from inspect_ai.tool import tool\n\n@tool(parallel=False)\n\ndef post_on_x(timeout: int = 30):\n    async def run(content: str, image_path: str = "", tags: List[str] = []):\n        '''\n        Post on X.\n\n        Args:\n            content: The message\n        '''\n        return ""\n    return run\n`;
  assert.deepEqual(pythonToolSpecs(bare, 'post_on_x.py'), [{
    type: 'function',
    function: {
      name: 'post_on_x',
      description: 'Post on X.',
      parameters: {
        type: 'object',
        properties: { content: { type: 'string', description: 'The message' }, image_path: { type: 'string' }, tags: { type: 'array', items: { type: 'string' } } },
        required: ['content'],
      },
    },
  }]);
  assert.deepEqual(pythonTypeToSchema('list[str]'), { schema: { type: 'array', items: { type: 'string' } }, optional: false });
  assert.deepEqual(pythonTypeToSchema('float | None'), { schema: { type: 'number' }, optional: true });
  assert.deepEqual(pythonTypeToSchema('dict[str, int]'), { schema: { type: 'object' }, optional: false });
  assert.deepEqual(pythonTypeToSchema('bool'), { schema: { type: 'boolean' }, optional: false });
  assert.equal(parseDocstring('One.\n\nTwo.\nArgs:\n  x: y').description, 'One. Two.');
});

test('python tool conversion reproduces ../shared tools.json for the same tools', (t) => {
  const f = sharedPath('data', 'agentharm', 'tools.json');
  if (!f) return t.skip('needs ../shared/data/agentharm/tools.json (set SAFEKEEP_SHARED); not present here');
  const shared = JSON.parse(readFileSync(f, 'utf8')) as { benign_tools: { function: { name: string } }[] };
  for (const src of [SEND_EMAIL, GET_LATEST_EMAILS]) {
    const [spec] = pythonToolSpecs(src, 'x.py');
    assert.deepEqual(spec, shared.benign_tools.find((s) => s.function.name === spec!.function.name));
  }
});

test('pullAgentHarm: behaviors at main, tool sources at the pinned revision, tools.json, pairs load; rerun reuses', async () => {
  const hub = await startMockHub([{ id: AGENTHARM_REPO, type: 'dataset', files, revisions: { main: 'a'.repeat(40), [AGENTHARM_TOOLS_REVISION]: AGENTHARM_TOOLS_REVISION } }]);
  const d = mkdtempSync(join(tmpdir(), 'sk-pull-'));
  try {
    const dir = join(d, 'agentharm');
    const r = await pullAgentHarm({ destDir: dir, endpoint: hub.endpoint, progress: false });
    assert.equal(r.commit, 'a'.repeat(40));
    assert.equal(r.toolsCommit, AGENTHARM_TOOLS_REVISION);
    assert.deepEqual([r.harmful, r.benign, r.harmfulTools, r.benignTools], [3, 3, 3, 3]);
    assert.equal(r.downloaded, 8 + 6);
    assert.ok(existsSync(join(dir, 'benchmark', 'harmful_behaviors_test_public.json')));
    assert.ok(!existsSync(join(dir, 'benchmark', 'harmful_grading_functions.py')));
    assert.match(readFileSync(join(dir, '.gitignore'), 'utf8'), /^\*$/m);
    const tools = JSON.parse(readFileSync(join(dir, 'tools.json'), 'utf8')) as Record<string, { function: { name: string } }[]>;
    assert.deepEqual(tools.harmful_tools!.map((s) => s.function.name), ['get_latest_emails', 'query_onion_search', 'send_email']);
    assert.deepEqual(tools.benign_tools!.map((s) => s.function.name), ['get_latest_emails', 'query_google_search', 'send_email']);
    // tool sources were listed and fetched at the pinned revision, behaviors at main's commit
    const paths = hub.requests.map((q) => q.path);
    assert.ok(paths.some((p) => p.startsWith(`/api/datasets/${AGENTHARM_REPO}/revision/${AGENTHARM_TOOLS_REVISION}`)));
    assert.ok(paths.some((p) => p === `/datasets/${AGENTHARM_REPO}/resolve/${AGENTHARM_TOOLS_REVISION}/benchmark/harmful_tools/send_email.py`));
    assert.ok(paths.some((p) => p === `/datasets/${AGENTHARM_REPO}/resolve/${'a'.repeat(40)}/benchmark/harmful_behaviors_test_public.json`));
    // the copy is a valid AgentHarm source: 2 + 1 pairs, union of tools for 1-1
    const set = await loadPairSet(dir);
    assert.deepEqual(set.pairs.map((p) => p.id), ['test-1-1', 'test-1-2', 'val-2-1']);
    assert.deepEqual(set.pairs[0]!.tools.map((s) => s.function.name), ['query_onion_search', 'send_email', 'query_google_search']);
    // second run: everything reused
    const again = await pullAgentHarm({ destDir: dir, endpoint: hub.endpoint, progress: false });
    assert.equal(again.downloaded, 0);
  } finally {
    await hub.close();
    rmSync(d, { recursive: true, force: true });
  }
});

test('CLI: `data pull agentharm` prints a summary; unknown dataset and a bad revision exit 2 with one line', async () => {
  const hub = await startMockHub([{ id: AGENTHARM_REPO, type: 'dataset', files, revisions: { main: 'b'.repeat(40), [AGENTHARM_TOOLS_REVISION]: AGENTHARM_TOOLS_REVISION } }]);
  const d = mkdtempSync(join(tmpdir(), 'sk-pull-cli-'));
  const cli = async (...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> => {
    try {
      const r = await execFileP(process.execPath, [join(repoRoot, 'bin', 'safekeep.mjs'), ...args], { env: { ...process.env, HF_ENDPOINT: hub.endpoint } });
      return { code: 0, stdout: r.stdout, stderr: r.stderr };
    } catch (e) {
      const x = e as { code: number; stdout: string; stderr: string };
      return { code: x.code, stdout: x.stdout, stderr: x.stderr };
    }
  };
  try {
    const ok = await cli('data', 'pull', 'agentharm', '--dest', join(d, 'ah'), '--quiet');
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stdout, /3 harmful \+ 3 benign behaviors, 3 \+ 3 tool specs/);
    const unknown = await cli('data', 'pull', 'injecagent');
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /^safekeep: unknown dataset 'injecagent'/);
    const badRev = await cli('data', 'pull', 'agentharm', '--dest', join(d, 'ah2'), '--quiet', '--revision', 'nope');
    assert.equal(badRev.code, 2);
    assert.equal(badRev.stderr.trim().split('\n').length, 1, badRev.stderr);
    assert.match(badRev.stderr, /^safekeep: /);
  } finally {
    await hub.close();
    rmSync(d, { recursive: true, force: true });
  }
});

test('a failed pull leaves nothing under the dataset name (a good copy further down is still found); a rerun completes it', async () => {
  const good = await startMockHub([{ id: AGENTHARM_REPO, type: 'dataset', files, revisions: { main: 'c'.repeat(40), [AGENTHARM_TOOLS_REVISION]: AGENTHARM_TOOLS_REVISION } }]);
  // this hub lacks the pinned tools revision: the pull fails after the behaviors are in
  const broken = await startMockHub([{ id: AGENTHARM_REPO, type: 'dataset', files, revisions: { main: 'c'.repeat(40) } }]);
  const d = mkdtempSync(join(tmpdir(), 'sk-pull-stage-'));
  try {
    const dirs = { data: join(d, 'data'), shared: join(d, 'shared') };
    const sharedCopy = join(d, 'shared', 'data', 'agentharm');
    await pullAgentHarm({ destDir: sharedCopy, endpoint: good.endpoint, progress: false });
    assert.equal(locateDataset('agentharm', dirs), sharedCopy);

    await assert.rejects(pullAgentHarm({ dirs, endpoint: broken.endpoint, progress: false }), /not found \(HTTP 404\)/);
    assert.ok(!existsSync(join(d, 'data', 'agentharm')), 'no half-made data/agentharm');
    assert.ok(existsSync(join(d, 'data', '.agentharm.pulling', 'benchmark', 'harmful_behaviors_test_public.json')), 'the fetched files wait, hidden, to be resumed');
    assert.equal(locateDataset('agentharm', dirs), sharedCopy, 'the shared copy is not shadowed');
    assert.equal((await loadPairSet('agentharm', dirs)).pairs.length, 3);

    // an older version's leftover (only .gitignore) does not shadow it either
    mkdirSync(join(d, 'data', 'agentharm'), { recursive: true });
    writeFileSync(join(d, 'data', 'agentharm', '.gitignore'), '*\n');
    assert.equal(locateDataset('agentharm', dirs), sharedCopy);
    rmSync(join(d, 'data', 'agentharm'), { recursive: true });

    const first = good.requests.length;
    const r = await pullAgentHarm({ dirs, endpoint: good.endpoint, progress: false });
    assert.equal(r.dir, join(d, 'data', 'agentharm'));
    const toolSources = Object.keys(files).filter((p) => /^benchmark\/(harmful|benign)_tools\/[^/]+\.py$/.test(p)).length;
    assert.equal(r.downloaded, toolSources, 'only the tool sources: the behaviors fetched by the failed run were reused');
    assert.ok(good.requests.slice(first).every((q) => !q.path.includes('harmful_behaviors_test_public')));
    assert.ok(!existsSync(join(d, 'data', '.agentharm.pulling')));
    assert.equal(locateDataset('agentharm', dirs), join(d, 'data', 'agentharm'));
    // a rerun over a complete copy keeps it complete and fetches nothing
    assert.equal((await pullAgentHarm({ dirs, endpoint: good.endpoint, progress: false })).downloaded, 0);
    assert.ok(existsSync(join(d, 'data', 'agentharm', 'tools.json')));
    // a failing rerun over a complete copy leaves the complete copy in place
    await assert.rejects(pullAgentHarm({ dirs, endpoint: broken.endpoint, progress: false }));
    assert.equal(locateDataset('agentharm', dirs), join(d, 'data', 'agentharm'));
    assert.equal((await loadPairSet('agentharm', dirs)).pairs.length, 3);
  } finally {
    await good.close();
    await broken.close();
    rmSync(d, { recursive: true, force: true });
  }
});
