/**
 * The notebooks (notebooks/*.ipynb, TypeScript kernel tslab): the committed files carry their outputs — the text and
 * inline PNG figures a code host shows without running anything, small, no error, no machine-specific path — and
 * each one executes top to bottom under Jupyter's nbconvert on its default (the planted synthetic model), printing
 * what the planted construction implies (ℓ* at a planted layer, cos(r, planted r) = 1, cos(R_harmful, r) ≈ −1,
 * refusal 100 % at α = 1.5) and drawing its figures. Without Jupyter or the kernel the execution tests skip with
 * the command that installs them (.ci/run installs both).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildIfStale, executeNotebook, linkPackage, missingPrerequisite, NOTEBOOKS_DIR, notebookFiles, writeKernelSpec } from '../scripts/notebooks.ts';

interface Output { output_type: string; name?: string; text?: string | string[]; data?: Record<string, string | string[]>; ename?: string }
interface Notebook { nbformat: number; metadata: { kernelspec?: { name?: string } }; cells: { cell_type: string; source: string | string[]; outputs?: Output[] }[] }

/** what each notebook prints (stdout) and how many figures it draws */
const expect: Record<string, { text: RegExp[]; figures: number }> = {
  '01-locating-the-source.ipynb': { text: [/ℓ\* = [234]\n/, /Table 1/, /agent\.flattened\s+0\.500/, /ℓ\*=\d agent\.schema\s+AUROC/], figures: 2 },
  '02-mechanism.ipynb': { text: [/cos\(r, planted r\)\s+\S+\s+\S+\s+1\.000/, /cos\(R_harmful, r\)\s+\S+\s+\S+\s+-(0\.99\d|1\.000)/, /harmful \/ schema mean/], figures: 2 },
  '03-steering.ipynb': { text: [/α=1\.5 .*refusal\s+100\.0%/, /ℓ\* = [234]; mean ‖hidden\[ℓ\*\]‖/], figures: 1 },
  // the planted dictionary: R_harmful is made of feature 1 (−r) and feature 8 or 9 (±Q4); the splice is exact
  '04-sae-features.ipynb': { text: [/refusal direction r: +feature 0 1\.000/, /R_harmful = 0\.99\d\d·feature 1 \+ 0\.\d+·feature [89] \(unit rows\): cos² sum 1\.0000/, /FVU 0\.000000, L0 6\d\.\d\d, dead 5\d\.\d %, CE increase -?0\.000000/], figures: 1 },
};

const join1 = (s: string | string[] | undefined): string => (Array.isArray(s) ? s.join('') : s ?? '');
const outputs = (nb: Notebook): Output[] => nb.cells.flatMap((c) => c.outputs ?? []);
const stdout = (nb: Notebook): string => outputs(nb).filter((o) => o.output_type === 'stream' && o.name === 'stdout').map((o) => join1(o.text)).join('');
const pngs = (nb: Notebook): string[] => outputs(nb).flatMap((o) => (o.data?.['image/png'] ? [join1(o.data['image/png'])] : []));

/** What is wrong with an executed notebook's outputs, as assertion failures. */
function checkOutputs(name: string, nb: Notebook): void {
  // stderr carries progress lines; a compile diagnostic ("1:7 - ...") or an exception there is an error
  const errors = outputs(nb).filter((o) => o.output_type === 'error' || (o.output_type === 'stream' && o.name === 'stderr' && /^\d+:\d+ - |Error\b/m.test(join1(o.text))));
  assert.deepEqual(errors.map((o) => `${o.ename ?? ''}${join1(o.text)}`), [], `${name}: error outputs`);
  const text = stdout(nb);
  for (const re of expect[name]!.text) assert.match(text, re, name);
  const figures = pngs(nb);
  assert.equal(figures.length, expect[name]!.figures, `${name}: inline figures`);
  for (const b64 of figures) {
    const png = Buffer.from(b64, 'base64');
    assert.equal(png.subarray(1, 4).toString('latin1'), 'PNG', `${name}: a PNG`);
    const width = png.readUInt32BE(16);
    assert.ok(width >= 400 && width <= 1200, `${name}: figure width ${width}px`);
  }
}

test('every notebook has expectations here', () => {
  assert.deepEqual(notebookFiles(), Object.keys(expect).sort());
});

for (const name of notebookFiles()) {
  test(`${name} as committed: TypeScript kernel, outputs and figures inline, small, no machine paths`, () => {
    const file = join(NOTEBOOKS_DIR, name);
    const nb = JSON.parse(readFileSync(file, 'utf8')) as Notebook;
    assert.equal(nb.nbformat, 4);
    assert.equal(nb.metadata.kernelspec?.name, 'tslab');
    assert.ok(nb.cells.some((c) => c.cell_type === 'markdown') && nb.cells.some((c) => c.cell_type === 'code'));
    checkOutputs(name, nb);
    assert.ok(statSync(file).size < 300_000, `${name}: ${statSync(file).size} bytes`);
    assert.doesNotMatch(JSON.stringify(outputs(nb).map((o) => join1(o.text))), /\/(work|tmp|home|root)\//, `${name}: an absolute path in the outputs`);
    // cells import the package, not its source files
    const code = nb.cells.filter((c) => c.cell_type === 'code').map((c) => join1(c.source)).join('\n');
    assert.match(code, /from 'safekeep'/);
    assert.doesNotMatch(code, /from '\.\.?\/.*'/);
  });
}

for (const name of notebookFiles()) {
  test(`${name} executes top to bottom in Jupyter on the planted model`, (t) => {
    const missing = missingPrerequisite();
    if (missing) { t.skip(`${missing}; .ci/run installs it`); return; }
    const built = buildIfStale();
    assert.equal(built, null);
    linkPackage();
    const scratch = mkdtempSync(join(tmpdir(), 'safekeep-nb-'));
    try {
      writeKernelSpec(join(scratch, 'jupyter'));
      const r = executeNotebook(name, {
        jupyterPath: join(scratch, 'jupyter'), outputDir: join(scratch, 'out'), env: { NB_WORK: join(scratch, 'work') }, timeoutS: 600,
      });
      assert.ok(r.ok, r.log.split('\n').slice(-30).join('\n'));
      checkOutputs(name, JSON.parse(readFileSync(join(scratch, 'out', name), 'utf8')) as Notebook);
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  });
}
