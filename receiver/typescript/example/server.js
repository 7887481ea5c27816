// An example receiver on Guardian's Node kit: it grants one licence per
// paid payment, in its own Postgres, exactly once, and takes it back once
// when Guardian sends a revoke. It records which action sent it and the
// course the purchase's metadata names.
//
//   RECEIVER_DATABASE_URL=postgres://... RECEIVER_SECRET=whsec_... RECEIVER_ADDR=127.0.0.1:8081 node example/server.js
//
// Point Guardian at it with GUARDIAN_CONNECTOR_URL=http://127.0.0.1:8081/fulfil,
// GUARDIAN_CONNECTOR_LOOKUP_URL=http://127.0.0.1:8081/lookup/{key} and the same
// secret in GUARDIAN_CONNECTOR_SECRET, and check it with `guardian connector test`.

import { createServer } from 'node:http'
import { pathToFileURL } from 'node:url'
import pg from 'pg'

import { Decline, Receiver, migrate } from '../src/index.js'
import { toNodeHandler } from '../src/node.js'

// The example's own table: the action's result.
const licenceSchema = `
CREATE TABLE IF NOT EXISTS licence (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text        NOT NULL,
    provider        text        NOT NULL,
    payment_id      text        NOT NULL,
    action_name     text        NOT NULL DEFAULT '',
    course          text        NOT NULL DEFAULT '',
    revoked_at      timestamptz,
    granted_at      timestamptz NOT NULL DEFAULT now()
)`

/** The licence: granted once per key, taken back once on a revoke. */
export async function grant(delivery, client) {
  if (delivery.action === 'revoke') {
    const { rowCount } = await client.query(
      'UPDATE licence SET revoked_at = now() WHERE provider = $1 AND payment_id = $2 AND action_name = $3 AND revoked_at IS NULL',
      [delivery.provider, delivery.paymentId, delivery.actionName],
    )
    if (rowCount === 0) throw new Decline('no licence of this payment to take back')
    return
  }
  await client.query('INSERT INTO licence (idempotency_key, provider, payment_id, action_name, course) VALUES ($1, $2, $3, $4, $5)', [
    delivery.idempotencyKey,
    delivery.provider,
    delivery.paymentId,
    delivery.actionName,
    delivery.purchase?.metadata?.course ?? '',
  ])
}

/** The example's HTTP server over pool, with its tables made. */
export async function exampleServer(pool, secrets, ReceiverClass = Receiver) {
  await migrate(pool)
  await pool.query(licenceSchema)
  return createServer(toNodeHandler(new ReceiverClass({ pool, secrets, handler: grant })))
}

async function main() {
  const { RECEIVER_DATABASE_URL: url, RECEIVER_SECRET: secret, RECEIVER_ADDR: addr = '127.0.0.1:8081' } = process.env
  if (!url || !secret) {
    console.error('example receiver: set RECEIVER_DATABASE_URL and RECEIVER_SECRET (whsec_...; several, space-separated, while rotating)')
    process.exit(1)
  }
  const pool = new pg.Pool({ connectionString: url })
  pool.on('error', (err) => console.error('example receiver: idle database connection lost:', err.message))
  const server = await exampleServer(pool, secret.split(/\s+/).filter(Boolean))
  const [host, port] = [addr.slice(0, addr.lastIndexOf(':')), Number(addr.slice(addr.lastIndexOf(':') + 1))]
  server.listen(port, host, () => console.log(`example receiver listening on ${addr}`))
  const stop = () => server.close(() => pool.end())
  process.on('SIGINT', stop)
  process.on('SIGTERM', stop)
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) await main()
