// Guardian's receiver kit for Node (docs/receivers.md): the whole receiver
// contract on web-standard Request and Response, with the keys in the
// merchant's own Postgres (node-postgres).
//
//   const receiver = new Receiver({ pool, secrets: [process.env.RECEIVER_SECRET], handler })
//   const response = await receiver.handle(request)
//
// An action request (POST) is verified (Standard Webhooks, any of the
// secrets, 5 minutes either way), read strictly, and answered from its
// key's row when the key finished; otherwise the merchant's handler runs
// inside the transaction that records the key, holding the key's lock: a
// write through the handler's client happens exactly once. A lookup (GET,
// the key as the last path segment) states what the key's row says, or
// whether the key is in progress. Every statement is signed.

import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto'
import { readFile } from 'node:fs/promises'

/** How far a signed timestamp may be from the receiver's clock, either way, in seconds. */
export const TOLERANCE_SECONDS = 300
/** The event type of a conformance run's deliveries: never the merchant's action. */
export const TEST_EVENT_TYPE = 'guardian.connector.test'
/** The prefix of every key a conformance run sends, and of no key Guardian derives from a payment. */
export const TEST_KEY_PREFIX = 'gtest_'
/** The largest request Guardian sends for a payload intake took under its default cap (1 MiB, and 8 KiB of envelope). */
export const DEFAULT_MAX_BODY = (1 << 20) + (8 << 10)

/** The statuses a receiver states about a key. */
export const Status = Object.freeze({
  DONE: 'done',
  NOT_DONE: 'not_done',
  IN_PROGRESS: 'in_progress',
  DECLINED: 'declined',
  MISMATCH: 'mismatch',
})

// The body's fields and what each must be: a request with any other is
// not Guardian's.
const FIELDS = {
  idempotency_key: 'string',
  provider: 'string',
  payment_id: 'string',
  event_id: 'string',
  event_type: 'string',
  action: 'string',
  action_name: 'string',
  purchase: 'json',
  payload: 'json',
}

/**
 * A handler's decision to decline its key for good: nothing was done, and
 * nothing will be for this key. Its writes are rolled back.
 */
export class Decline extends Error {
  constructor(reason) {
    super(`declined: ${reason}`)
    this.name = 'Decline'
    this.reason = reason
  }
}

/** Decodes a connector secret ("whsec_" and base64) to its key. */
export function decodeSecret(secret) {
  const raw = typeof secret === 'string' && secret.startsWith('whsec_') ? secret.slice(6) : ''
  if (raw === '' || !/^[A-Za-z0-9+/]*={0,2}$/.test(raw) || raw.length % 4 !== 0) {
    throw new Error('connector secret is not whsec_ followed by base64')
  }
  return Buffer.from(raw, 'base64')
}

/** The Standard Webhooks signature ("v1,<base64>") of body under msgId at timestamp (Unix seconds). */
export function sign(secret, msgId, timestamp, body) {
  const mac = createHmac('sha256', decodeSecret(secret))
  mac.update(`${msgId}.${timestamp}.`)
  mac.update(body)
  return `v1,${mac.digest('base64')}`
}

/**
 * Whether body and headers carry a signature by one of secrets (several
 * while rotating; the header may hold one signature per secret, space
 * separated) whose timestamp is within TOLERANCE_SECONDS of now (Unix
 * seconds), either way.
 */
export function verify(secrets, headers, body, now) {
  const id = header(headers, 'webhook-id')
  const ts = header(headers, 'webhook-timestamp')
  const signatures = header(headers, 'webhook-signature')
  if (!id || !/^[0-9]+$/.test(ts ?? '') || !signatures) return false
  const at = Number(ts)
  if (now - at > TOLERANCE_SECONDS || at - now > TOLERANCE_SECONDS) return false
  const given = signatures.split(' ').filter((s) => s.startsWith('v1,')).map((s) => Buffer.from(s.slice(3)))
  return secrets.some((secret) => {
    const want = Buffer.from(sign(secret, id, ts, body).slice(3))
    return given.some((g) => g.length === want.length && timingSafeEqual(g, want))
  })
}

/**
 * A receiver's signed statement about a key: the exact JSON body and the
 * headers that sign it (msg id the key and ".answer"), as every kit makes
 * them (receiver/vectors.json).
 */
export function signStatement(secret, statement, now) {
  const st = { idempotency_key: statement.idempotency_key, status: statement.status }
  if (statement.reason) st.reason = statement.reason
  if (statement.receipt) st.receipt = statement.receipt
  const body = JSON.stringify(st)
  const id = `${st.idempotency_key}.answer`
  return {
    body,
    headers: {
      'content-type': 'application/json',
      'webhook-id': id,
      'webhook-timestamp': String(now),
      'webhook-signature': sign(secret, id, now, body),
    },
  }
}

/** The SQL that creates the table the kit keeps its keys in (idempotent). */
export async function schema() {
  return readFile(new URL('../schema.sql', import.meta.url), 'utf8')
}

/** Creates the kit's table in the merchant's database, if it does not exist. */
export async function migrate(pool) {
  await pool.query(await schema())
}

function header(headers, name) {
  if (typeof headers.get === 'function') return headers.get(name)
  const v = headers[name] ?? headers[name.toLowerCase()]
  return Array.isArray(v) ? v[0] : v
}

class Refusal extends Error {
  constructor(status, message) {
    super(message)
    this.status = status
  }
}

/**
 * Guardian's receiver: handle(request) answers Guardian's action requests
 * (POST) and lookups (GET, the key as the last path segment).
 */
export class Receiver {
  /**
   * @param {object} options
   * @param {import('pg').Pool} options.pool the merchant's database, holding the kit's table (migrate)
   * @param {string[]} options.secrets connector secrets (whsec_...): any verifies; answers are signed with the first
   * @param {(delivery: object, client: import('pg').PoolClient) => Promise<void>} options.handler performs the action inside the key's transaction
   * @param {number} [options.maxBody] caps a request's body (default DEFAULT_MAX_BODY)
   * @param {() => number} [options.now] the clock, in Unix seconds
   * @param {{error: Function, warn: Function}} [options.logger] one line per refused or failed request (default console)
   */
  constructor({ pool, secrets, handler, maxBody = DEFAULT_MAX_BODY, now = () => Math.floor(Date.now() / 1000), logger = console }) {
    if (!pool || typeof handler !== 'function') throw new Error('receiver: pool and handler are required')
    if (!Array.isArray(secrets) || secrets.length === 0) throw new Error('receiver: at least one connector secret is required')
    secrets.forEach((s, i) => {
      try {
        decodeSecret(s)
      } catch (err) {
        throw new Error(`receiver: secret ${i + 1} is ${err.message.replace('connector secret is ', '')}`)
      }
    })
    Object.assign(this, { pool, secrets, handler, maxBody, now, logger })
  }

  /** Answers one request from Guardian. */
  async handle(request) {
    try {
      if (request.method === 'POST') return await this.#action(request)
      if (request.method === 'GET' || request.method === 'HEAD') return await this.#lookup(request)
      return new Response('method not allowed', { status: 405, headers: { allow: 'POST, GET' } })
    } catch (err) {
      if (err instanceof Refusal) {
        if (err.status === 401) this.logger.warn(`receiver: refused a request: ${err.message}`)
        return new Response(err.message, { status: err.status, headers: { 'content-type': 'text/plain; charset=utf-8' } })
      }
      // Nothing was recorded (or, after a failed commit, nothing is
      // known: the lookup reads the truth from the table).
      this.logger.error('receiver: request failed', err)
      return new Response('internal error', { status: 500 })
    }
  }

  async #action(request) {
    const body = await readCapped(request, this.maxBody)
    if (!verify(this.secrets, request.headers, body, this.now())) throw new Refusal(401, 'signature or timestamp not valid')
    const delivery = this.read(body, request.headers)
    const sum = createHash('sha256').update(body).digest()
    // A finished key answers from its row, without waiting for anything.
    const row = await this.find(this.pool, delivery.idempotencyKey)
    if (row) return this.replay(row, sum)
    return this.act(delivery, sum)
  }

  /**
   * Reads an action request's body strictly: exactly the contract's
   * fields, a key equal to the Idempotency-Key header, and a test delivery
   * under a test key and only then. Throws a 400 refusal otherwise.
   */
  read(body, headers) {
    let b
    try {
      b = JSON.parse(body.toString('utf8'))
    } catch {
      throw new Refusal(400, 'not a Guardian request: body and Idempotency-Key disagree')
    }
    const ok =
      b !== null &&
      typeof b === 'object' &&
      !Array.isArray(b) &&
      Object.entries(b).every(([k, v]) => FIELDS[k] === 'json' || (FIELDS[k] === 'string' && typeof v === 'string')) &&
      typeof b.idempotency_key === 'string' &&
      b.idempotency_key !== '' &&
      b.idempotency_key === header(headers, 'idempotency-key')
    if (!ok) throw new Refusal(400, 'not a Guardian request: body and Idempotency-Key disagree')
    const test = b.event_type === TEST_EVENT_TYPE
    if (test !== b.idempotency_key.startsWith(TEST_KEY_PREFIX)) {
      throw new Refusal(400, 'test deliveries use test keys, and only they do')
    }
    return {
      idempotencyKey: b.idempotency_key,
      provider: b.provider ?? '',
      paymentId: b.payment_id ?? '',
      eventId: b.event_id ?? '',
      eventType: b.event_type ?? '',
      action: b.action ?? '',
      actionName: b.action_name ?? '',
      purchase: b.purchase ?? null,
      payload: b.payload ?? null,
      attempt: Number.parseInt(header(headers, 'guardian-attempt') ?? '', 10) || 0,
      test,
    }
  }

  /** Runs the handler for a key with no row yet, holding the key's lock for the transaction. */
  async act(delivery, sum) {
    const client = await this.pool.connect()
    let release = true
    try {
      await client.query('BEGIN')
      if (!(await this.tryLock(client, delivery.idempotencyKey))) {
        await client.query('ROLLBACK')
        return this.state(409, { idempotency_key: delivery.idempotencyKey, status: Status.IN_PROGRESS })
      }
      // The key may have finished between the first read and the lock.
      const row = await this.find(client, delivery.idempotencyKey)
      if (row) {
        await client.query('ROLLBACK')
        return this.replay(row, sum)
      }
      let st
      try {
        await this.perform(client, delivery)
        st = { idempotency_key: delivery.idempotencyKey, status: Status.DONE, receipt: `rcpt_${randomBytes(12).toString('hex')}` }
      } catch (err) {
        if (!(err instanceof Decline)) throw err
        st = { idempotency_key: delivery.idempotencyKey, status: Status.DECLINED, reason: err.reason }
      }
      await this.record(client, delivery, sum, st)
      await client.query('COMMIT')
      return this.state(st.status === Status.DONE ? 200 : 422, st)
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {
        release = false // the connection is broken: do not hand it back
      })
      throw err
    } finally {
      client.release(release ? undefined : true)
    }
  }

  /**
   * Runs the merchant's handler in a savepoint, so that a decline rolls
   * back its writes and keeps the transaction for the key's row; a test
   * delivery runs the test action instead, never the handler.
   */
  async perform(client, delivery) {
    if (delivery.test) return testAction(delivery.payload)
    await client.query('SAVEPOINT guardian_handler')
    try {
      await this.handler(delivery, client)
    } catch (err) {
      if (err instanceof Decline) await client.query('ROLLBACK TO SAVEPOINT guardian_handler')
      throw err
    }
    await client.query('RELEASE SAVEPOINT guardian_handler')
  }

  /** Records a finished key: the hash of its body and the answer every later request with it gets. */
  async record(client, delivery, sum, st) {
    await client.query(
      'INSERT INTO guardian_receiver_key (idempotency_key, body_sha256, status, answer, test) VALUES ($1, $2, $3, $4, $5)',
      [delivery.idempotencyKey, sum, st.status, JSON.stringify(st), delivery.test],
    )
  }

  /** Answers a finished key: its stored answer for the same body, a mismatch for another. */
  replay(row, sum) {
    if (!row.hash.equals(sum)) {
      return this.state(422, { idempotency_key: row.answer.idempotency_key, status: Status.MISMATCH })
    }
    return this.state(row.status === Status.DECLINED ? 422 : 200, row.answer)
  }

  async #lookup(request) {
    if (!verify(this.secrets, request.headers, '', this.now())) throw new Refusal(401, 'signature or timestamp not valid')
    const path = new URL(request.url).pathname
    const key = decodeURIComponent(path.slice(path.lastIndexOf('/') + 1))
    if (key === '' || key !== header(request.headers, 'idempotency-key')) {
      throw new Refusal(400, "the path's key and the Idempotency-Key disagree")
    }
    const row = await this.find(this.pool, key)
    if (row) return this.state(200, statementOf(key, row))
    // No row: either nothing happened, or the key's transaction is open.
    const client = await this.pool.connect()
    try {
      await client.query('BEGIN')
      if (!(await this.tryLock(client, key))) return this.state(200, { idempotency_key: key, status: Status.IN_PROGRESS })
      const again = await this.find(client, key)
      return this.state(200, again ? statementOf(key, again) : { idempotency_key: key, status: Status.NOT_DONE })
    } finally {
      await client.query('ROLLBACK').catch(() => {})
      client.release()
    }
  }

  /** Reads a finished key's row: its body's hash, its status and its answer. */
  async find(q, key) {
    const { rows } = await q.query('SELECT body_sha256, status, answer FROM guardian_receiver_key WHERE idempotency_key = $1', [key])
    if (rows.length === 0) return null
    const answer = typeof rows[0].answer === 'string' ? JSON.parse(rows[0].answer) : rows[0].answer
    return { hash: rows[0].body_sha256, status: rows[0].status, answer }
  }

  /**
   * Takes the key's transaction-scoped advisory lock without waiting:
   * false means another transaction holds it (the key is in progress). The
   * lock is the Go kit's, so kits in several languages can share a table.
   */
  async tryLock(client, key) {
    const { rows } = await client.query("SELECT pg_try_advisory_xact_lock(hashtextextended('guardian-receiver:' || $1, 0)) AS ok", [key])
    return rows[0].ok
  }

  /** A signed statement with its status code. */
  state(status, statement) {
    const { body, headers } = signStatement(this.secrets[0], statement, this.now())
    return new Response(body, { status, headers })
  }
}

function statementOf(key, row) {
  return { idempotency_key: key, status: row.status, reason: row.answer.reason, receipt: row.answer.receipt }
}

// testAction is what a test delivery does: nothing, after an optional hold
// (so a conformance run can see the key in progress), or a decline.
async function testAction(payload) {
  const p = payload && typeof payload === 'object' ? payload : {}
  const hold = Math.min(Number(p.hold_ms) || 0, 10_000)
  if (hold > 0) await new Promise((resolve) => setTimeout(resolve, hold))
  if (p.decline) throw new Decline('conformance test: declined as asked')
}

// readCapped reads a request's body, refusing one longer than max (413).
async function readCapped(request, max) {
  const declared = Number(request.headers.get('content-length'))
  if (declared > max) throw new Refusal(413, 'body too large')
  if (!request.body) return Buffer.alloc(0)
  const chunks = []
  let size = 0
  for await (const chunk of request.body) {
    size += chunk.byteLength
    if (size > max) throw new Refusal(413, 'body too large')
    chunks.push(Buffer.from(chunk))
  }
  return Buffer.concat(chunks)
}
