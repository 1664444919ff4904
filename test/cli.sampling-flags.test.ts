/**
 * The sampling flags (src/cli/sampling-flags.ts): parsed into the engine's settings; no flag = greedy with no settings
 * (today's path); filters, --seed or --samples without a temperature, and out-of-range values are one clear error
 * naming the flag; a sampled run without --seed draws one and says so.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseArgs, type FlagTable } from '../src/cli/args.ts';
import { SAMPLING_FLAG_DEFS, samplingFlags, samplingSummary } from '../src/cli/sampling-flags.ts';
import { SafekeepError } from '../src/util/errors.ts';

const table: FlagTable = { usage: 'x', flags: SAMPLING_FLAG_DEFS, example: 'x' };
const parse = (...argv: string[]) => samplingFlags(parseArgs(argv, table), () => 777);

test('no sampling flag: greedy, no settings at all (the path every run took before)', () => {
  assert.deepEqual(parse(), { samples: 1, seedDrawn: false });
  assert.equal(samplingSummary(parse()), 'greedy');
  assert.deepEqual(parse('--temperature', '0'), { settings: { temperature: 0 }, samples: 1, seedDrawn: false });
});

test('every flag maps to its setting; a missing seed is drawn and reported', () => {
  const f = parse('--temperature', '0.7', '--top-k', '40', '--top-p', '0.9', '--min-p', '0.05', '--repetition-penalty', '1.1', '--samples', '8');
  assert.deepEqual(f, { settings: { temperature: 0.7, topK: 40, topP: 0.9, minP: 0.05, repetitionPenalty: 1.1, seed: 777 }, samples: 8, seedDrawn: true });
  assert.match(samplingSummary(f), /^sampled: temperature 0\.7, top-k 40, top-p 0\.9, min-p 0\.05, repetition penalty 1\.1, seed 777 \(drawn; --seed to replay\), 8 samples per prompt$/);
  const g = parse('--temperature=1', '--seed', '-5');
  assert.deepEqual(g, { settings: { temperature: 1, seed: -5 }, samples: 1, seedDrawn: false });
  // the repetition penalty applies to greedy decoding too
  assert.deepEqual(parse('--repetition-penalty', '1.3').settings, { repetitionPenalty: 1.3 });
});

test('bad values and flags that would change nothing are one error naming the flag', () => {
  const bad: [string[], RegExp][] = [
    [['--temperature', '-1'], /--temperature must be a number ≥ 0/],
    [['--temperature', 'hot'], /--temperature must be a number/],
    [['--temperature', '1', '--top-k', '2.5'], /--top-k must be an integer ≥ 0/],
    [['--temperature', '1', '--top-p', '1.5'], /--top-p must be a number from 0 to 1/],
    [['--temperature', '1', '--min-p', '-0.1'], /--min-p must be a number from 0 to 1/],
    [['--repetition-penalty', '0'], /--repetition-penalty must be a number > 0/],
    [['--temperature', '1', '--seed', '1.5'], /--seed must be an integer/],
    [['--temperature', '1', '--seed', String(2 ** 60)], /--seed must be an integer of at most 53 bits/],
    [['--top-k', '5'], /--top-k needs --temperature above 0/],
    [['--top-p', '0.9', '--min-p', '0.1'], /--top-p, --min-p need --temperature above 0/],
    [['--temperature', '0', '--seed', '3'], /--seed needs --temperature above 0/],
    [['--samples', '4'], /--samples above 1 needs --temperature above 0/],
    [['--temperature', '1', '--samples', '0'], /--samples must be a positive integer/],
    [['--temperature', '1', '--samples', '5000'], /--samples must be at most 1024/],
    [['--temperature', '1', '--seed', String(Number.MAX_SAFE_INTEGER), '--samples', '2'], /leaves the 53-bit integers/],
  ];
  for (const [argv, re] of bad) assert.throws(() => parse(...argv), (e: unknown) => e instanceof SafekeepError && e.exitCode === 2 && re.test(e.message), argv.join(' '));
});
