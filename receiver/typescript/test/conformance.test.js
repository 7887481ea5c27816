// Guardian's own conformance run (`guardian connector test`) against the
// example receiver, and against three broken variants of the kit, each of
// which the run must catch: no lock (a key sent twice at once acts twice),
// 409 for a finished key, and a forgotten decline.

import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { once } from 'node:events'
import { test } from 'node:test'
import { promisify } from 'node:util'

import { Receiver } from '../src/index.js'
import { exampleServer } from '../example/server.js'
import { database, secret } from './helpers.js'

const run = promisify(execFile)

/** The guardian binary: GUARDIAN_BIN (`just test` builds it), else built here. */
async function guardianBin() {
  if (process.env.GUARDIAN_BIN) return process.env.GUARDIAN_BIN
  const out = new URL('../node_modules/.guardian-test-bin', import.meta.url).pathname
  await run('go', ['build', '-o', out, '.'], { cwd: new URL('../../..', import.meta.url).pathname })
  return out
}

/** Runs the conformance run against a receiver class on the example, returning its steps. */
async function conform(t, ReceiverClass) {
  const pool = await database(t)
  const server = await exampleServer(pool, [secret], ReceiverClass)
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.after(() => new Promise((resolve) => server.close(resolve)))
  const url = `http://127.0.0.1:${server.address().port}`
  const env = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    GUARDIAN_CONNECTOR_URL: `${url}/fulfil`,
    GUARDIAN_CONNECTOR_LOOKUP_URL: `${url}/lookup/{key}`,
    GUARDIAN_CONNECTOR_SECRET: secret,
  }
  let stdout
  try {
    ;({ stdout } = await run(await guardianBin(), ['connector', 'test', '--json', '--provider', 'stripe'], { env }))
  } catch (err) {
    if (err.code !== 1 || !err.stdout) throw err // 1: a step failed, and the run says which
    stdout = err.stdout
  }
  const report = JSON.parse(stdout)
  const licences = Number((await pool.query('SELECT count(*) FROM licence')).rows[0].count)
  return { report, licences }
}

function failing(report) {
  return Object.fromEntries(report.steps.filter((s) => !s.ok).map((s) => [s.name, s.verdict]))
}

test('the example keeps the contract: every step passes, and no test delivery acts', async (t) => {
  const { report, licences } = await conform(t, Receiver)
  assert.deepEqual(failing(report), {})
  assert.equal(report.ok, true)
  assert.ok(report.steps.length >= 14, `${report.steps.length} steps`)
  assert.equal(licences, 0)
})

class NoLock extends Receiver {
  async tryLock() {
    return true
  }
}

class ConflictForDone extends Receiver {
  replay(row, sum) {
    return this.state(409, { idempotency_key: row.answer.idempotency_key, status: 'in_progress' })
  }
}

class ForgetsDeclines extends Receiver {
  async record(client, delivery, sum, st) {
    if (st.status !== 'declined') await super.record(client, delivery, sum, st)
  }
}

for (const [Broken, wants] of [
  // Without the lock the key's row still stands in the second request's
  // way (its primary key), so that one fails rather than acting: the run
  // sees no 409 while the key is in progress, and a lookup that says
  // not_done then.
  [NoLock, { 'one key sent twice at once': 'a key in progress answers 409', 'lookup of a key in progress': 'answered not_done' }],
  [ConflictForDone, { 'a finished key sent again': '409 for a finished key' }],
  [ForgetsDeclines, { 'a declined key sent with a body that would act': 'ACTED on a declined key' }],
]) {
  test(`a broken kit fails the run: ${Broken.name}`, async (t) => {
    const { report } = await conform(t, Broken)
    assert.equal(report.ok, false)
    const failed = failing(report)
    for (const [step, word] of Object.entries(wants)) {
      assert.ok(failed[step]?.includes(word), `${step}: want a failure saying ${word}; the run said ${JSON.stringify(failed)}`)
    }
  })
}
