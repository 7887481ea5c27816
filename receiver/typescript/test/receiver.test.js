// The kit's contract against a real Postgres, with real concurrency:
// a key acts once, a finished key replays, another body is refused, a
// decline stays, a failure records nothing, a lookup tells the truth,
// a test delivery never reaches the handler.

import assert from 'node:assert/strict'
import { once } from 'node:events'
import { test } from 'node:test'
import express from 'express'

import { Decline, Receiver, migrate } from '../src/index.js'
import { guardian } from '../src/express.js'
import { action, body, database, lookup, realKey, secret, testKey } from './helpers.js'

const base = 'http://receiver'

async function setup(t, handler) {
  const pool = await database(t)
  await migrate(pool)
  await migrate(pool) // idempotent
  await pool.query('CREATE TABLE act (key text NOT NULL)')
  const calls = { n: 0 }
  const receiver = new Receiver({
    pool,
    secrets: [secret, 'whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD'],
    logger: { warn() {}, error() {} },
    handler: async (delivery, client) => {
      calls.n++
      await client.query('INSERT INTO act VALUES ($1)', [delivery.idempotencyKey])
      if (handler) await handler(delivery, client, calls.n)
    },
  })
  const count = async (sql, args = []) => Number((await pool.query(sql, args)).rows[0].count)
  return { pool, receiver, calls, count }
}

async function answer(res) {
  return { status: res.status, st: JSON.parse(await res.text()) }
}

test('the same key sent 32 times at once acts once', async (t) => {
  const { receiver, calls, count } = await setup(t, () => new Promise((resolve) => setTimeout(resolve, 50)))
  const key = realKey()
  const raw = body({ key })
  const answers = await Promise.all(Array.from({ length: 32 }, () => receiver.handle(action(`${base}/fulfil`, key, raw)).then(answer)))
  assert.equal(calls.n, 1, `the handler ran once: ${JSON.stringify(answers)}`)
  assert.equal(await count('SELECT count(*) FROM act'), 1, 'its write happened once')
  const done = answers.filter((a) => a.status === 200)
  assert.ok(done.length >= 1)
  assert.ok(answers.every((a) => (a.status === 200 && a.st.status === 'done') || (a.status === 409 && a.st.status === 'in_progress')), JSON.stringify(answers))
  assert.equal(new Set(done.map((a) => a.st.receipt)).size, 1, 'one act, one receipt, replayed')
  const again = await answer(await receiver.handle(action(`${base}/fulfil`, key, raw, { attempt: 2 })))
  assert.deepEqual(again, done[0], 'a finished key replays its answer')
  const looked = await answer(await receiver.handle(lookup(base, key)))
  assert.deepEqual(looked, { status: 200, st: { idempotency_key: key, status: 'done', receipt: done[0].st.receipt } })
})

test('another body under a finished key is refused, and acts on nothing', async (t) => {
  const { receiver, calls } = await setup(t)
  const key = realKey()
  assert.equal((await receiver.handle(action(`${base}/fulfil`, key, body({ key })))).status, 200)
  const other = await answer(await receiver.handle(action(`${base}/fulfil`, key, body({ key, paymentId: 'pi_other' }))))
  assert.deepEqual(other, { status: 422, st: { idempotency_key: key, status: 'mismatch' } })
  assert.equal(calls.n, 1)
})

test('a decline is kept for good, and its writes rolled back', async (t) => {
  const { receiver, calls, count } = await setup(t, () => {
    throw new Decline('no such course')
  })
  const key = realKey()
  const first = await answer(await receiver.handle(action(`${base}/fulfil`, key, body({ key }))))
  assert.deepEqual(first, { status: 422, st: { idempotency_key: key, status: 'declined', reason: 'no such course' } })
  assert.equal(await count('SELECT count(*) FROM act'), 0, "the handler's writes are rolled back")
  const again = await answer(await receiver.handle(action(`${base}/fulfil`, key, body({ key }), { attempt: 2 })))
  assert.deepEqual(again, first, 'the stored decline, signed')
  assert.equal(calls.n, 1, 'a declined key never runs the handler again')
  const looked = await answer(await receiver.handle(lookup(base, key)))
  assert.deepEqual(looked.st, { idempotency_key: key, status: 'declined', reason: 'no such course' })
})

test('a failure records nothing, and the next attempt acts', async (t) => {
  const { receiver, calls, count } = await setup(t, (_d, _c, n) => {
    if (n === 1) throw new Error('the licence service is down')
  })
  const key = realKey()
  assert.equal((await receiver.handle(action(`${base}/fulfil`, key, body({ key })))).status, 500)
  assert.equal(await count('SELECT count(*) FROM guardian_receiver_key'), 0)
  assert.equal((await answer(await receiver.handle(lookup(base, key)))).st.status, 'not_done')
  assert.equal((await receiver.handle(action(`${base}/fulfil`, key, body({ key }), { attempt: 2 }))).status, 200)
  assert.equal(calls.n, 2)
  assert.equal(await count('SELECT count(*) FROM act'), 1, 'the failed attempt wrote nothing')
})

test('a test delivery never reaches the handler; its key is recorded, held and declined as asked', async (t) => {
  const { receiver, calls, count } = await setup(t)
  const key = testKey()
  const held = receiver.handle(action(`${base}/fulfil`, key, body({ key, test: true, payload: { hold_ms: 300 } })))
  await new Promise((resolve) => setTimeout(resolve, 100))
  assert.equal((await answer(await receiver.handle(lookup(base, key)))).st.status, 'in_progress', 'a key in progress, looked up')
  assert.equal((await answer(await receiver.handle(action(`${base}/fulfil`, key, body({ key, test: true, payload: { hold_ms: 300 } }))))).status, 409)
  assert.equal((await held).status, 200)
  const declined = testKey()
  assert.equal((await receiver.handle(action(`${base}/fulfil`, declined, body({ key: declined, test: true, payload: { decline: true } })))).status, 422)
  assert.equal(calls.n, 0)
  assert.equal(await count('SELECT count(*) FROM guardian_receiver_key WHERE test'), 2)
})

test('refusals: a wrong secret, a replayed timestamp, a lookup for another key, a body too large', async (t) => {
  const { receiver, calls } = await setup(t)
  const key = realKey()
  const raw = body({ key })
  assert.equal((await receiver.handle(action(`${base}/fulfil`, key, raw, { withSecret: 'whsec_b3RoZXIgc2VjcmV0IG9mIGFub3RoZXIgcmVjZWl2ZXI=' }))).status, 401)
  assert.equal((await receiver.handle(action(`${base}/fulfil`, key, raw, { now: Math.floor(Date.now() / 1000) - 600 }))).status, 401)
  assert.equal((await receiver.handle(action(`${base}/fulfil`, key, raw, { withSecret: 'whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD' }))).status, 200, 'any listed secret: rotation')
  const wrong = lookup(base, key)
  wrong.headers.set('idempotency-key', realKey())
  assert.equal((await receiver.handle(wrong)).status, 400)
  const big = realKey()
  assert.equal((await receiver.handle(action(`${base}/fulfil`, big, body({ key: big, payload: { pad: 'x'.repeat((1 << 20) + 9000) } })))).status, 413)
  assert.equal(calls.n, 1)
})

test('express: the middleware answers as the core does', async (t) => {
  const { receiver, calls } = await setup(t)
  const app = express()
  app.post('/guardian/fulfil', guardian(receiver))
  app.get('/guardian/lookup/:key', guardian(receiver))
  const server = app.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.after(() => server.close())
  const url = `http://127.0.0.1:${server.address().port}/guardian`
  const key = realKey()
  const res = await fetch(action(`${url}/fulfil`, key, body({ key })))
  assert.equal(res.status, 200)
  assert.ok(res.headers.get('webhook-signature').startsWith('v1,'), 'a signed answer')
  assert.equal((await (await fetch(lookup(url, key))).json()).status, 'done')
  assert.equal(calls.n, 1)
})

test('next: the route handlers answer as the core does', async (t) => {
  const { routeHandlers } = await import('../src/next.js')
  const { receiver, calls } = await setup(t)
  const { POST, GET } = routeHandlers(receiver)
  const key = realKey()
  assert.equal((await POST(action(`${base}/guardian/fulfil`, key, body({ key })))).status, 200)
  assert.equal((await (await GET(lookup(`${base}/guardian`, key))).json()).status, 'done')
  assert.equal(calls.n, 1)
})
