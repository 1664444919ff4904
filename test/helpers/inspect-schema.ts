/**
 * inspect_ai's own EvalLog schema (../shared/schemas/inspect_ai/inspect-openapi.json, generated from its pydantic
 * models; SOURCE.md there names the commit) as an ajv validator: OpenAPI 3.1 component schemas are JSON Schema
 * 2020-12 with refs to `#/components/schemas/...`, so the whole document is added and EvalLog referenced in it.
 * OpenAPI's `discriminator` is an annotation here (each branch still has its `type` const, which ajv checks).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { needShared } from './shared.ts';

export type Validate = (log: unknown) => string[];

/**
 * The validator of a component (default EvalLog; errors as lines, [] = valid), or null with the test skipped visibly
 * when ../shared is absent.
 */
export function inspectLogValidator(t: TestContext, component = 'EvalLog'): Validate | null {
  const dir = needShared(t, 'schemas', 'inspect_ai', 'inspect-openapi.json');
  if (!dir) return null;
  const doc = JSON.parse(readFileSync(dir, 'utf8')) as Record<string, unknown>;
  const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
  ajv.addKeyword('discriminator');
  ajv.addSchema({ ...doc, $id: 'inspect-openapi' });
  const validate = ajv.compile({ $ref: `inspect-openapi#/components/schemas/${component}` });
  return (log) => (validate(log) ? [] : (validate.errors ?? []).slice(0, 10).map((e) => `${e.instancePath || '/'} ${e.message ?? ''} ${JSON.stringify(e.params)}`));
}

export const readJson = (path: string): Record<string, unknown> => JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
export const inspectFile = (resultsDir: string, name: string): string => join(resultsDir, 'inspect', name);
