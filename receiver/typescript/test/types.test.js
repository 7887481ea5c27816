// The kit's type declarations compile as a TypeScript merchant uses them
// (test/types/usage.ts, strict).

import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { test } from 'node:test'
import { promisify } from 'node:util'

test('the declarations type-check a merchant\'s receiver', async () => {
  const tsc = new URL('../node_modules/typescript/bin/tsc', import.meta.url).pathname
  const { stdout } = await promisify(execFile)(process.execPath, [tsc, '-p', new URL('./types', import.meta.url).pathname]).catch((err) => {
    assert.fail(`tsc: ${err.stdout}${err.stderr}`)
  })
  assert.equal(stdout, '')
})
