/**
 * The default thread count (src/engine/runtime/threads.ts): the pure rule over parsed machine facts, the parsers of the
 * Linux files it reads, and the facts of this machine read consistently with what Node sees.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { availableParallelism } from 'node:os';
import { chooseThreads, cpuQuota, parseCpuList, parseCpuMax, readCpuFacts, type CpuFacts } from '../src/engine/runtime/threads.ts';
import { engineEnv } from '../src/cli/env.ts';
import { resolveEngineConfig } from '../src/engine/engine-config.ts';

/** a machine of `cores` physical cores with `smt` threads each, Linux numbering (siblings n and n + cores) */
function machine(cores: number, smt: 1 | 2, quota: number | null = null, allowed?: number[]): CpuFacts {
  const siblings = new Map<number, string>();
  for (let c = 0; c < cores; c++) {
    const key = smt === 2 ? `${c},${c + cores}` : `${c}`;
    siblings.set(c, key);
    if (smt === 2) siblings.set(c + cores, key);
  }
  return { allowed: allowed ?? [...siblings.keys()].sort((a, b) => a - b), siblings, quota };
}

test('parseCpuList: ranges and singles; garbage → null', () => {
  assert.deepEqual(parseCpuList('0-3,8,10-11\n'), [0, 1, 2, 3, 8, 10, 11]);
  assert.deepEqual(parseCpuList('5'), [5]);
  assert.equal(parseCpuList(''), null);
  assert.equal(parseCpuList('3-1'), null);
  assert.equal(parseCpuList('a-b'), null);
});

test('cgroup quota: v2 cpu.max and v1 quota/period', () => {
  assert.equal(parseCpuMax('max 100000\n'), null);
  assert.equal(parseCpuMax('150000 100000\n'), 1.5);
  assert.equal(parseCpuMax('400000 100000'), 4);
  assert.equal(parseCpuMax('50000'), 0.5, 'period defaults to 100000');
  assert.equal(cpuQuota(-1, 100000), null, 'v1 unlimited');
  assert.equal(cpuQuota(200000, 100000), 2);
});

test('chooseThreads: physical cores, not SMT siblings', () => {
  assert.equal(chooseThreads(machine(8, 2)).threads, 8, '8 cores × 2 threads → 8');
  assert.equal(chooseThreads(machine(8, 1)).threads, 8);
  assert.equal(chooseThreads(machine(2, 1)).threads, 2);
  assert.match(chooseThreads(machine(8, 2)).why, /8 physical cores of 16 allowed logical CPUs/);
});

test('chooseThreads: only the allowed CPUs count (affinity / cpuset)', () => {
  // CPUs 0,1 and their siblings 8,9 on a 8×2 machine → 2 cores
  assert.equal(chooseThreads(machine(8, 2, null, [0, 1, 8, 9])).threads, 2);
  // two SMT siblings of different cores → 2 cores
  assert.equal(chooseThreads(machine(8, 2, null, [0, 9])).threads, 2);
  // both siblings of one core → 1
  assert.equal(chooseThreads(machine(8, 2, null, [3, 11])).threads, 1);
});

test('chooseThreads: the cgroup quota caps it (floor, at least 1)', () => {
  assert.equal(chooseThreads(machine(16, 2, 4)).threads, 4);
  assert.equal(chooseThreads(machine(16, 2, 2.5)).threads, 2);
  assert.equal(chooseThreads(machine(16, 2, 0.5)).threads, 1);
  assert.equal(chooseThreads(machine(2, 1, 8)).threads, 2, 'a quota above the cores does not add threads');
  assert.match(chooseThreads(machine(16, 2, 2.5)).why, /cgroup CPU quota 2.5/);
});

test('chooseThreads: unknown topology counts every allowed CPU; SAFEKEEP_THREADS overrides when valid', () => {
  assert.equal(chooseThreads({ allowed: [0, 1, 2, 3, 4, 5], siblings: new Map(), quota: null }).threads, 6);
  assert.equal(chooseThreads({ allowed: [], siblings: new Map(), quota: null }).threads, 1);
  assert.deepEqual(chooseThreads({ ...machine(8, 2), env: '3' }), { threads: 3, why: 'SAFEKEEP_THREADS=3' });
  assert.equal(chooseThreads({ ...machine(8, 2), env: '0' }).threads, 8, 'invalid override ignored');
  assert.equal(chooseThreads({ ...machine(8, 2), env: 'lots' }).threads, 8);
});

test('this machine: facts consistent with Node, the default within them', () => {
  const f = readCpuFacts(undefined);
  assert.equal(f.allowed.length, availableParallelism(), 'allowed CPUs = os.availableParallelism()');
  const c = chooseThreads(f);
  assert.ok(c.threads >= 1 && c.threads <= f.allowed.length, `${c.threads} of ${f.allowed.length}`);
  // the engine's default without options; SAFEKEEP_THREADS reaches it through the CLI's engineEnv, invalid ignored
  assert.equal(resolveEngineConfig({}).threads, c.threads);
  assert.equal(resolveEngineConfig(engineEnv({ SAFEKEEP_THREADS: '5' })).threads, 5);
  assert.equal(resolveEngineConfig(engineEnv({ SAFEKEEP_THREADS: 'lots' })).threads, c.threads);
});
