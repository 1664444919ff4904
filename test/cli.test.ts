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
