import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { jsonDepth, parseJsonBounded } from '../src/util/json-bounded.ts';
import { SafekeepError } from '../src/util/errors.ts';

/** the depth of a parsed value, computed independently of the text scan */
const valueDepth = (v: unknown): number => v !== null && typeof v === 'object'
  ? 1 + Math.max(0, ...Object.values(v as object).map(valueDepth)) : 0;

test('jsonDepth equals the depth of the parsed value, strings with brackets and escapes included', () => {
  fc.assert(fc.property(fc.json({ depthSize: 'medium' }), (text) => {
    assert.equal(jsonDepth(text), valueDepth(JSON.parse(text)));
  }), { numRuns: 300 });
  assert.equal(jsonDepth('{"a":"[[[\\"{{"}'), 1);
});

test('parseJsonBounded refuses deep nesting before any recursion, with one short line', () => {
  const deep = '['.repeat(100_000) + ']'.repeat(100_000);
  assert.throws(() => parseJsonBounded(deep, 'request body'), (e: unknown) =>
    e instanceof SafekeepError && /request body: JSON nested 100000 levels deep \(at most 64\)/.test(e.message));
  assert.throws(() => parseJsonBounded('{"a":', 'config.json'), (e: unknown) =>
    e instanceof SafekeepError && e.message.startsWith('config.json: not valid JSON') && e.message.length < 200);
  assert.deepEqual(parseJsonBounded('{"a":[1,{"b":2}]}', 'x'), { a: [1, { b: 2 }] });
});
