// The kit on Node's own HTTP server (node:http), and on any framework whose
// request is Node's IncomingMessage with its body unread.

import { Readable } from 'node:stream'

/**
 * A node:http request listener answering Guardian with receiver: mount it
 * at the action URL and at the lookup URL (".../{key}").
 */
export function toNodeHandler(receiver) {
  return async (req, res) => {
    const response = await receiver.handle(toRequest(req))
    await writeResponse(res, response)
  }
}

/** A web-standard Request of a Node request; body, when given, is its bytes already read. */
export function toRequest(req, body) {
  const headers = new Headers()
  for (const [name, value] of Object.entries(req.headers)) {
    if (Array.isArray(value)) value.forEach((v) => headers.append(name, v))
    else if (value !== undefined) headers.set(name, value)
  }
  const url = new URL(req.originalUrl ?? req.url, `http://${req.headers.host ?? 'localhost'}`)
  const init = { method: req.method, headers }
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    init.body = body ?? Readable.toWeb(req)
    init.duplex = 'half'
  }
  return new Request(url, init)
}

/** Writes a web-standard Response to a Node response. */
export async function writeResponse(res, response) {
  res.statusCode = response.status
  response.headers.forEach((value, name) => res.setHeader(name, value))
  res.end(Buffer.from(await response.arrayBuffer()))
}
