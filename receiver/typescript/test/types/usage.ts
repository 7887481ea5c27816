// Type-checked use of the kit's declarations (`tsc -p test/types`, in the
// kit's tests): what a TypeScript merchant writes compiles against them.
import pg from 'pg'
import express from 'express'
import { createServer } from 'node:http'
import { Decline, Receiver, migrate, signStatement, verify, type Delivery, type Statement } from '../../src/index.js'
import { toNodeHandler } from '../../src/node.js'
import { guardian } from '../../src/express.js'

const pool = new pg.Pool()
await migrate(pool)
const receiver = new Receiver({
  pool,
  secrets: ['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'],
  handler: async (d: Delivery, client) => {
    if (d.action === 'revoke') {
      await client.query('UPDATE licence SET revoked = true WHERE payment_id = $1', [d.paymentId])
      return
    }
    const course: string | undefined = d.purchase?.metadata?.course
    if (!course) throw new Decline('no course named')
    await client.query('INSERT INTO licence (payment_id, course, attempt) VALUES ($1, $2, $3)', [d.paymentId, course, d.attempt])
  },
})
export const POST = (req: Request): Promise<Response> => receiver.handle(req)
createServer(toNodeHandler(receiver))
express().post('/fulfil', guardian(receiver))
const st: Statement = { idempotency_key: 'k', status: 'done', receipt: 'r' }
const signed: { body: string; headers: Record<string, string> } = signStatement('whsec_x', st, 0)
const ok: boolean = verify(['whsec_x'], { 'webhook-id': 'k' }, signed.body, 0)
void ok
import { routeHandlers } from '../../src/next.js'
export const { POST: nextPOST, GET: nextGET } = routeHandlers(receiver)
