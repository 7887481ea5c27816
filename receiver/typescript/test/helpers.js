// What the kit's tests share: a database of their own on the test
// Postgres, and requests signed as Guardian signs them.

import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import pg from 'pg'

import { TEST_EVENT_TYPE, TEST_KEY_PREFIX, sign } from '../src/index.js'

export const vectors = JSON.parse(readFileSync(new URL('../../vectors.json', import.meta.url), 'utf8'))
export const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'

/**
 * A pool on a database of the test's own, dropped when the test ends.
 * TEST_DATABASE_URL names the server (`just test` sets the local one).
 */
export async function database(t) {
  const url = process.env.TEST_DATABASE_URL
  if (!url) {
    throw new Error('TEST_DATABASE_URL is not set: point it at a PostgreSQL server the tests may create databases on ' +
      "(`just test` sets postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)")
  }
  const name = `guardian_ts_${randomBytes(6).toString('hex')}`
  const admin = new pg.Client({ connectionString: url })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${name}`)
  await admin.end()
  const target = new URL(url)
  target.pathname = `/${name}`
  const pool = new pg.Pool({ connectionString: target.toString(), max: 20 })
  // An idle connection closed under the pool (a server restart, an
  // operator's pg_terminate_backend) is an event, not a crash: node-postgres
  // asks every pool's owner to listen for it.
  pool.on('error', (err) => console.error('test pool: idle connection lost:', err.message))
  t.after(async () => {
    await pool.end()
    const c = new pg.Client({ connectionString: url })
    await c.connect()
    await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
    await c.end()
  })
  return pool
}

/** A request body as Guardian sends it. */
export function body({ key, test = false, payload = {}, action, actionName, purchase, paymentId = 'pi_1' }) {
  const b = {
    idempotency_key: key,
    provider: 'stripe',
    payment_id: test ? 'guardian-connector-test' : paymentId,
    event_id: 'evt_1',
    event_type: test ? TEST_EVENT_TYPE : 'checkout.session.completed',
  }
  if (action) b.action = action
  if (actionName) b.action_name = actionName
  if (purchase) b.purchase = purchase
  b.payload = payload
  return JSON.stringify(b)
}

/** An action request signed as Guardian signs it, at now (Unix seconds). */
export function action(url, key, raw, { withSecret = secret, now = Math.floor(Date.now() / 1000), attempt = 1 } = {}) {
  return new Request(url, {
    method: 'POST',
    body: raw,
    headers: {
      'content-type': 'application/json',
      'idempotency-key': key,
      'guardian-attempt': String(attempt),
      'webhook-id': key,
      'webhook-timestamp': String(now),
      'webhook-signature': sign(withSecret, key, now, raw),
    },
  })
}

/** A lookup of key, signed as Guardian signs it. */
export function lookup(base, key, { withSecret = secret, now = Math.floor(Date.now() / 1000) } = {}) {
  return new Request(`${base}/lookup/${encodeURIComponent(key)}`, {
    headers: { 'idempotency-key': key, 'webhook-id': key, 'webhook-timestamp': String(now), 'webhook-signature': sign(withSecret, key, now, '') },
  })
}

export const testKey = () => `${TEST_KEY_PREFIX}${randomBytes(8).toString('hex')}`
export const realKey = () => `gk1_${randomBytes(20).toString('hex')}`
