/** SafekeepError keeps its message bounded, whatever the caller quoted into it. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MAX_ERROR_CHARS, SafekeepError } from '../src/util/errors.ts';

test('a SafekeepError message is cut at MAX_ERROR_CHARS with the full length noted; short ones are untouched', () => {
  assert.equal(new SafekeepError('x: bad').message, 'x: bad');
  const exact = 'a'.repeat(MAX_ERROR_CHARS);
  assert.equal(new SafekeepError(exact).message, exact);
  const e = new SafekeepError(`shape ${JSON.stringify(new Array(5_000_000).fill(1))}`);
  assert.ok(e.message.length < MAX_ERROR_CHARS + 40);
  assert.match(e.message, /^shape \[1,1,.*… \(10000007 characters\)$/);
  assert.equal(e.exitCode, 2);
});
