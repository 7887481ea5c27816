// The kit against the one vector set every kit is held to
// (receiver/vectors.json, made by Guardian's own contract package).

import assert from 'node:assert/strict'
import { readFile } from 'node:fs/promises'
import { test } from 'node:test'

import { Receiver, schema, sign, signStatement, verify } from '../src/index.js'
import { database, vectors } from './helpers.js'

test('signatures: the kit signs as Guardian signs', () => {
  for (const v of vectors.signatures) {
    assert.equal(sign(v.secret, v.msg_id, v.timestamp, v.body), v.signature, v.name)
  }
})

test('verification: what a receiver accepts and refuses', () => {
  for (const v of vectors.verify) {
    const headers = Object.fromEntries(Object.entries(v.headers).filter(([, value]) => value !== ''))
    assert.equal(verify(v.secrets, headers, v.body, v.now), v.valid, v.name)
  }
})

test("statements: the exact body and headers of a receiver's answers", () => {
  for (const v of vectors.statements) {
    const { body, headers } = signStatement(v.secret, v.statement, v.timestamp)
    assert.equal(body, v.body, v.name)
    for (const [name, value] of Object.entries(v.headers)) assert.equal(headers[name], value, `${v.name}: ${name}`)
  }
})

test('schema: the same table as every kit', async () => {
  assert.ok((await schema()).includes(vectors.schema.trim()), 'schema.sql holds the vectors\' schema')
  assert.equal(await readFile(new URL('../schema.sql', import.meta.url), 'utf8'), await schema())
})

test('bodies: what a receiver takes, and refuses with 400 before it looks anything up', async (t) => {
  const pool = await database(t)
  await pool.query(await schema())
  let acted = 0
  const receiver = new Receiver({ pool, secrets: [vectors.signatures[0].secret], now: () => 1764576000, handler: async () => { acted++ } })
  for (const v of vectors.bodies) {
    const id = `msg_${v.name}`
    const headers = { 'webhook-id': id, 'webhook-timestamp': '1764576000', 'webhook-signature': sign(vectors.signatures[0].secret, id, 1764576000, v.body) }
    if (v.idempotency_key_header) headers['idempotency-key'] = v.idempotency_key_header
    const before = acted
    const res = await receiver.handle(new Request('http://receiver/fulfil', { method: 'POST', body: v.body, headers }))
    if (!v.valid) {
      assert.equal(res.status, 400, v.name)
      continue
    }
    assert.equal(res.status, 200, `${v.name}: ${await res.text()}`)
    assert.equal(acted, v.test ? before : before + 1, `${v.name}: a test delivery never reaches the handler`)
  }
})
